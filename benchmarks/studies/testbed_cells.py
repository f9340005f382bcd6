"""The testbed page's hand-written tables, from the committed cells (docs/bench/testbed/cells).

Two tables, each row computed from one cell's metrics.jsonl, so every number on the page can be traced to the
file it came from:

- **learning** (``--learning``): GRPO's held-out success every 5 steps at each finished seed, its gain (last
  minus step 0, points), and the summary line: the mean gain with its 95% t interval over seeds, the mean final
  success with its exact percentile bootstrap CI, the mean at step 0 (``prover.bench.stats``).
- **cells** (default): per finished cell of each row, held-out success at step 0 and at the end, the mean
  held-out success over training (the area under the curve of every evaluation over the steps), the first
  evaluation at 0.5 or more, and for ProVer's rows the eligible groups a step (overall and by quarters of
  training: steps 1-10, 11-20, 21-30, 31-40 of 40), the share of judged groups with a valid
  proposal, the hit rate against the env's pivotal turns beside the pivotal share (a random one-turn segment's
  hit rate), and the generated tokens (rollout and continuations) over GRPO's at the same seed.

    python -m benchmarks.studies.testbed_cells --learning               # GRPO at every finished seed
    python -m benchmarks.studies.testbed_cells --seeds 3 4 5 6 7        # the comparison's reported seeds
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from prover.bench.stats import auc, bootstrap, first_reach, t_interval
from prover.bench.tables import CellResult, final_eval, read_history, total_generated

CELLS = Path(__file__).resolve().parents[2] / "docs" / "bench" / "testbed" / "cells" / "pivot-sim"
ROWS = ("prover+contrast", "prover+random", "prover+qwen-1.5b", "budget-matched-grpo", "gigpo", "grpo")
QUARTERS = 4


def finished(root: Path, row: str, steps: int, seeds: list[int] | None) -> dict[int, CellResult]:
    """{seed: result} of the row's cells evaluated at step 0 and at ``steps`` (finished)."""
    out = {}
    for cell in sorted((root / row).glob("seed-*"), key=lambda p: int(p.name.split("-")[1])):
        seed = int(cell.name.split("-")[1])
        if seeds is not None and seed not in seeds:
            continue  # a cell outside the asked seeds is not read
        result = CellResult(root.name, row, seed, read_history(cell), steps)
        if final_eval(result.history, steps) and 0 in result.curve:
            out[seed] = result
    return out


def learning_table(root: Path, steps: int, seeds: list[int] | None) -> str:
    curves = {seed: r.curve for seed, r in finished(root, "grpo", steps, seeds).items()}
    marks = list(range(0, steps + 1, 5))
    lines = ["| seed | " + " | ".join(map(str, marks)) + " | gain (points) |",
             "|---" * (len(marks) + 2) + "|"]
    for seed, c in curves.items():
        cols = [f"{c[m]:.3f}" if m in c else "–" for m in marks]
        lines.append(f"| {seed} | " + " | ".join(cols) + f" | {100 * (c[steps] - c[0]):+.1f} |")
    gain = t_interval([100 * (c[steps] - c[0]) for c in curves.values()])
    final = bootstrap([100 * c[steps] for c in curves.values()])
    if gain.lo is None or final.lo is None:
        return "\n".join(lines) + "\n\nFewer than two finished seeds: no interval.\n"
    start = statistics.fmean(100 * c[0] for c in curves.values())
    return "\n".join(lines) + (
        f"\n\nMean gain **{gain.mean:+.1f} points, 95% t interval [{gain.lo:+.1f}, {gain.hi:+.1f}]** over "
        f"{gain.n} seeds (final success {final.mean:.1f}%, bootstrap CI [{final.lo:.1f}, {final.hi:.1f}]; "
        f"step 0 {start:.1f}%).\n")


def credit_columns(result: CellResult, steps: int) -> str:
    tr = result.train
    judged = sum(r.get("credit/judged_groups", 0) for r in tr)
    if not judged:
        return "– | – | – | "
    per_step = [r.get("credit/eligible_groups", 0) for r in tr]
    size = steps // QUARTERS
    quarters = ", ".join(f"{statistics.fmean(per_step[i:i + size]):.1f}" for i in range(0, steps, size))
    valid = sum(r.get("credit/valid_proposals", 0) for r in tr)
    proposals = sum(r.get("truth/proposals", 0) for r in tr)
    hits = sum(r.get("truth/hits", 0) for r in tr)
    share = sum(r.get("truth/target_pivotal_share", 0) * r.get("truth/proposals", 0) for r in tr)
    hit = f"{100 * hits / proposals:.1f}% ({100 * share / proposals:.1f}%)" if proposals else "–"
    return (f"{statistics.fmean(per_step):.2f} ({quarters}) | {100 * valid / judged:.0f}% of {judged:.0f} "
            f"judged | {hit} | ")


def cells_table(root: Path, rows_wanted: list[str], steps: int, seeds: list[int] | None) -> str:
    by_row = {row: finished(root, row, steps, seeds) for row in dict.fromkeys([*rows_wanted, "grpo"])}
    lines = ["| row | seed | held-out success, step 0 -> " + str(steps) + " | mean held-out success over training"
             " | first evaluation at 0.5 or more | eligible groups a step (by quarters of training) | valid "
             "proposals | hit rate (pivotal share) | tokens x grpo |", "|---" * 9 + "|"]
    for row in rows_wanted:
        for seed, result in by_row[row].items():
            c, grpo = result.curve, by_row["grpo"].get(seed)
            first, area = first_reach(c, 0.5), auc(c, steps) or 0.0  # both ends are there: never None
            ratio = f"{total_generated(result) / total_generated(grpo):.2f}" if grpo else "–"
            lines.append(f"| {row} | {seed} | {c[0]:.3f} -> {c[steps]:.3f} | {100 * area:.1f}% | "
                         + (f"step {first}" if first is not None else f"– (none by step {steps})") + " | "
                         + credit_columns(result, steps) + f"{ratio} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=Path, default=CELLS, help="one env's cell folder (rows/seed-N)")
    parser.add_argument("--learning", action="store_true", help="GRPO's learning table instead of the cells")
    parser.add_argument("--rows", nargs="*", default=list(ROWS), help="rows of the cells table, in order")
    parser.add_argument("--seeds", nargs="*", type=int, default=None, help="only these seeds (default: all)")
    parser.add_argument("--steps", type=int, default=40, help="a cell's RL steps (its last evaluation)")
    args = parser.parse_args(argv)
    if not args.cells.is_dir():
        parser.error(f"no cell folder at {args.cells}")
    if args.learning:
        print(learning_table(args.cells, args.steps, args.seeds), end="")
    else:
        print(cells_table(args.cells, args.rows, args.steps, args.seeds), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
