"""docs/perf.md's layout (benchmarks/perf/page.py): a side-by-side measurement is named by what its two trees
differ in when the result says so, and each section's provenance sits under its result."""

from benchmarks.perf.page import lever, section_cell, summary


def _cell(**extra):
    seeds = {"0": {"before": {"wall_s": 100.0, "cpu_s": 80.0, "step_s": 50.0, "eval": {"0": 0.5, "12": 0.5}},
                   "after": {"wall_s": 90.0, "cpu_s": 60.0, "step_s": 45.0, "eval": {"0": 0.5, "12": 0.5}}}}
    return {"before": "aaa1111", "after": "bbb2222", "threads": "1", "cell": ["steps=12"], "seeds": seeds,
            "measured": {"date": "2026-12-04 18:54 UTC", "seconds": 190, "load_avg_1m": 2.0, "cpus": 2}, **extra}


def test_a_measurement_is_named_by_its_lever_or_else_by_its_revisions():
    assert lever(_cell(lever="shared prefixes / none")) == "shared prefixes / none"
    assert lever(_cell()) == "bbb2222 / aaa1111"
    [row] = [ln for ln in summary({"cell": _cell(lever="shared prefixes / none")}) if "bench cell" in ln]
    # after / before: wall 90 / 100, CPU 60 / 80
    assert row.startswith("| a pivot-sim bench cell, shared prefixes / none (threads 1, 1 seeds side by side)")
    assert row.endswith("| 0.90x; 0.75x |") and "aaa1111" not in row


def test_a_sections_provenance_comes_after_its_table():
    lines = section_cell(_cell(lever="shared prefixes / none"))
    assert lines[0] == "## A bench cell: shared prefixes / none"
    table = max(i for i, ln in enumerate(lines) if ln.startswith("|"))
    [when] = [i for i, ln in enumerate(lines) if ln.startswith("> Measured 2026-12-04 18:54 UTC")]
    assert when > table
