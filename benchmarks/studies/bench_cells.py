"""The cells of a bench matrix, for the studies that read one: the matrix named by ``--config`` and dotted
overrides on the command line, planned as ``prover bench`` plans it, and its cells read from their run folders
(finished ones as results, the rest as pending)."""

from __future__ import annotations

import argparse

from prover.bench.config import load_bench_config
from prover.bench.matrix import Cell, Plan, plan
from prover.bench.tables import CellResult, collect


def matrix_cells(description: str, config: str, example_dir: str) -> tuple[Plan, list[CellResult], list[Cell]]:
    """The plan of the matrix the command line names (``config`` by default) and its finished and pending
    cells; ``example_dir`` shows in ``--help`` how to read the cells archived beside a page."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--config", default=config)
    ap.add_argument("overrides", nargs="*", help=f"dotted overrides of the matrix, e.g. dir={example_dir}")
    args = ap.parse_args()
    cells = plan(load_bench_config(args.config, args.overrides))
    results, pending = collect(cells)
    return cells, results, pending
