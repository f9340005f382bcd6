"""The forest plots of the hand-written bench pages (docs/bench/*/README.md): each bench's ``forest.svg``, the
same file ``prover bench`` writes beside results.md, drawn from the cells archived under the page's
``cells/`` (``prover bench --regen-only`` reads the same); and, for the one bench whose cells were not
archived (pivot-12steps), from the paired differences its table1.csv recorded."""

from __future__ import annotations

import csv
from collections.abc import Callable
from functools import partial
from pathlib import Path

from prover.bench.config import BenchConfig, load_bench_config
from prover.bench.forest import FILE, forest_svg
from prover.bench.matrix import cell_folder
from prover.bench.tables import CellResult, final_eval, read_history
from prover.commands.svgchart import ForestRow, forest_chart, standalone

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "benchmarks" / "configs"
ARCHIVED = {  # page folder -> its bench config (the envs, rows, seeds, steps and baseline)
    "docs/bench/alfworld": "bench_alfworld.yaml",
    "docs/bench/interop": "bench_interop.yaml",
    "docs/bench/llm": "bench_llm.yaml",
    "docs/bench/pivot": "bench_pivot.yaml",
    "docs/bench/pivot-new-credit": "bench_pivot_new_credit.yaml",
}
FROM_TABLE = {"docs/bench/pivot-12steps": "table1.csv"}  # no cells archived: the CSV's bootstrap CIs


def archived_results(bench: BenchConfig) -> list[CellResult]:
    """The cells of ``bench``'s envs, rows and seeds archived under its folder (``prover bench`` archives
    finished cells only; one whose final evaluation is missing is left out all the same)."""
    results = []
    for env in bench.envs:
        for method in bench.methods:
            for seed in bench.seeds:
                history = read_history(cell_folder(bench, env, method.row, seed))
                if history and final_eval(history, bench.steps) is not None:
                    results.append(CellResult(env, method.row, seed, history, bench.steps))
    return results


def archived_forest(folder: str, config: str) -> str:
    """The forest plot of the bench whose cells are archived under ``folder``/cells."""
    bench = load_bench_config(CONFIGS / config, [f"dir={ROOT / folder}"])
    results = archived_results(bench)
    methods = [m.row for m in bench.methods if any(r.method == m.row for r in results)]
    svg = forest_svg(results, methods, bench.envs, bench.baseline)
    if svg is None:
        raise SystemExit(f"{folder}: no method shares a finished seed with {bench.baseline}")
    return svg


def table_rows(table1: Path) -> tuple[list[ForestRow], list[str], str]:
    """Forest rows from a table1.csv's paired differences (diff_mean, diff_lo, diff_hi: the percentile bootstrap
    CI, the only interval a CSV without the t columns holds), per env; its envs and its baseline's name."""
    rows = list(csv.DictReader(table1.open()))
    envs = list(dict.fromkeys(r["env"] for r in rows if r["env"] != "avg"))
    out: list[ForestRow] = []
    for env in envs:
        mine = []
        for r in rows:
            if r["env"] == env and r["diff_mean"]:
                mean, lo, hi = (100 * float(r[k]) for k in ("diff_mean", "diff_lo", "diff_hi"))
                mine.append(ForestRow(r["method"], mean, lo, hi, f"{mean:+.1f} [{lo:+.1f}, {hi:+.1f}], "
                                                                  f"{r['n_pairs']} pairs"))
        out += ([ForestRow(env)] if len(envs) > 1 else []) + mine
    return out, envs, rows[0]["baseline"]


def table_forest(folder: str, name: str) -> str:
    """The forest plot of a bench from its table1.csv alone."""
    rows, envs, baseline = table_rows(ROOT / folder / name)
    where = f"{envs[0]}: " if len(envs) == 1 else ""
    return standalone(forest_chart(f"{where}final held-out success, method − {baseline}, paired by seed", rows,
                                   "difference in points: mean and 95% percentile bootstrap CI over seeds"))


def figures() -> dict[Path, Callable[[], str]]:
    """Each forest file and the function that draws it."""
    out = {ROOT / folder / FILE: partial(archived_forest, folder, config) for folder, config in ARCHIVED.items()}
    out.update({ROOT / folder / FILE: partial(table_forest, folder, name) for folder, name in FROM_TABLE.items()})
    return out
