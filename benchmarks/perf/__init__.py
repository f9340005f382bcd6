"""docs/perf.md: each measuring module writes its JSON (results.py names the files); page.py alone writes the page."""
