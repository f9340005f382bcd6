"""Measurements of prover, grouped by kind (conformance, perf, studies, checks; configs holds their YAML). Run a
module with ``python -m benchmarks.<kind>.<name>`` from the repository root; benchmarks/README.md lists them all."""
