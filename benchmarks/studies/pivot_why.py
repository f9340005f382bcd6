"""How much of the update ProVer's credit touched, per ProVer row of a bench matrix: when ProVer does not
beat budget-matched GRPO, how little of the update its bonus reached says why.

    python -m benchmarks.studies.pivot_why                                  # configs/bench_pivot.yaml's cells
    python -m benchmarks.studies.pivot_why --config F dir=docs/bench/pivot  # from the cells archived beside the tables

Per row, pooled over its cells' steps: eligible groups, valid proposals and accepted segments per step, the
acceptance rate, the mean verified Δ (continuation success after the segment minus before, over the verified
proposals), and the accepted segments' turns as a share of all rollout turns (accepted × the step's mean
segment length over valid proposals, an approximation when lengths differ). For scale: with K continuations on
each side, Δ's standard error is sqrt((p1 (1 - p1) + p2 (1 - p2)) / K), at most sqrt(0.5 / K): 0.35 at K = 4.
"""

from __future__ import annotations

import statistics

from benchmarks.studies.bench_cells import matrix_cells
from benchmarks.studies.pivot_tuning_readout import reach


def why_rows(results: list, rows: list[str], groups_per_step: int) -> list[str]:
    out = ["| row | eligible groups / step | valid proposals / step | accepted / step | acceptance | mean Δ "
           "(verified) | bonus turns share |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        recs = [t for r in results if r.method == row for t in r.train]
        if not recs:
            continue
        valid = sum(t.get("credit/valid_proposals", 0.0) for t in recs)
        accepted = sum(t.get("credit/accepted", 0.0) for t in recs)
        weighted = [(t["credit/delta"], t["credit/valid_proposals"]) for t in recs if "credit/delta" in t]
        delta = sum(d * n for d, n in weighted) / sum(n for _, n in weighted) if weighted else None
        r = reach(results, row, groups_per_step)
        out.append(f"| {row} | {r['eligible']:.2f} | {valid / len(recs):.2f} | {r['accepted']:.2f} | "
                   f"{'–' if not valid else format(accepted / valid, '.0%')} | "
                   f"{'–' if delta is None else format(delta, '+.3f')} | {r['bonus_share']:.2%} |")
    return out


def main() -> None:
    p, results, pending = matrix_cells(__doc__.splitlines()[0], "benchmarks/configs/bench_pivot.yaml",
                                       "docs/bench/pivot")
    if pending:
        print(f"{len(pending)} cell(s) not finished; read without them")
    rows = [m.row for m in p.bench.methods if m.credit == "prover"]
    steps = statistics.fmean(len(r.train) for r in results) if results else 0
    print(f"{len(results)} cells, {steps:.0f} steps each on average\n")
    print("\n".join(why_rows(results, rows, p.cells[0].config.rollout.groups_per_step)))


if __name__ == "__main__":
    main()
