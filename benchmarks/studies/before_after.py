"""Held-out success before RL (the shared warm start's evaluation at step 0) and after it, per row and env of a
bench matrix, with 95% intervals over seeds: the table of docs/bench/interop/README.md.

    python -m benchmarks.studies.before_after --config benchmarks/configs/bench_interop.yaml dir=docs/bench/interop

Before and after: mean over seeds [95% percentile bootstrap CI, prover.bench.stats.bootstrap]. Gain: after minus
before on the same seed, mean [95% t interval] (with 3 seeds the bootstrap CI is narrower than it should be;
the t interval is what prover bench's verdicts read too).
"""

from __future__ import annotations

from benchmarks.studies.bench_cells import matrix_cells
from prover.bench.report import pct_ci
from prover.bench.stats import bootstrap, t_interval


def rows(results: list, envs: list[str], methods: list[str]) -> list[str]:
    out = ["| env | row | seeds | before RL (%) | after RL (%) | gain (points, 95% t) |", "|---|---|---|---|---|---|"]
    for env in envs:
        for row in methods:
            cells = sorted((r for r in results if r.env == env and r.method == row), key=lambda r: r.seed)
            if not cells:
                out.append(f"| {env} | {row} | none | – | – | – |")
                continue
            before, after = [r.curve[0] for r in cells], [r.success for r in cells]
            gain = t_interval([a - b for a, b in zip(after, before)])
            seeds = ",".join(str(r.seed) for r in cells)
            out.append(f"| {env} | {row} | {seeds} | {pct_ci(bootstrap(before))} | {pct_ci(bootstrap(after))} | "
                       f"{pct_ci(gain, '+')} |")
    return out


def main() -> None:
    p, results, pending = matrix_cells(__doc__.splitlines()[0], "benchmarks/configs/bench_interop.yaml",
                                       "docs/bench/interop")
    if pending:
        print(f"{len(pending)} cell(s) not finished: " + "; ".join(f"{c.env} {c.method.row} seed {c.seed}"
                                                                   for c in pending) + "\n")
    print("\n".join(rows(results, p.bench.envs, [m.row for m in p.bench.methods])))


if __name__ == "__main__":
    main()
