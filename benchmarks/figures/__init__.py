"""The documentation's figures drawn from committed results (``python -m benchmarks.figures.docs``)."""
