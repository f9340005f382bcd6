"""Read the powered bench's tuning matrix (benchmarks/configs/bench_pivot_tuning.yaml) and apply its decision rule.

Each candidate is a ProVer row ``p-<name>`` with its own budget-matched GRPO row ``bm-<name>``; its score is
the paired difference Δ = p − bm in final held-out success over the tuning seeds. The rule (written in the
YAML before any cell ran): the largest mean Δ wins; a candidate within 1 point of the best that costs fewer
generated tokens wins the tie.

    python -m benchmarks.studies.pivot_tuning_readout            # the YAML's matrix and its p3 matrix; writes --out
    python -m benchmarks.studies.pivot_tuning_readout --archived # the same from the cells committed under docs/

The table reports, per candidate: Δ with its 95% t interval and P(improvement) over seeds, the ProVer row's
gain over its warm start (and its budget-matched row's), the generated tokens of the ProVer row per step
(rollout + branches), and how much of the update its bonus touched: eligible groups and accepted segments
per step, and the accepted segments' turns as a share of all rollout turns.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
from pathlib import Path

from prover.bench import stats
from prover.bench.config import load_bench_config
from prover.bench.matrix import plan
from prover.bench.tables import CellResult, collect, per_seed, tokens_per_step

TIE_POINTS = 0.01  # "within 1 point of the best"
CONFIG = "benchmarks/configs/bench_pivot_tuning.yaml"
# the candidate that changes the task has its own folder and warm start (the YAML's header says how it ran)
P3 = ("dir=runs/bench-pivot-tuning-p3 'common.env.kwargs={n_pivots: 3}' 'methods=[grpo, {name: prover+contrast, "
      "label: p-base, overrides: {credit.samples: 4}}, {name: budget-matched-grpo, label: bm-base, "
      "match_budget_of: p-base}]'")


def candidates(results: list[CellResult]) -> list[str]:
    rows = {r.method for r in results}
    return sorted(r[2:] for r in rows if r.startswith("p-") and f"bm-{r[2:]}" in rows)


def gain(results: list[CellResult], row: str) -> float | None:
    """Mean over seeds of final minus step-0 held-out success."""
    deltas = [r.success - r.curve[0] for r in results if r.method == row and 0 in r.curve]
    return statistics.fmean(deltas) if deltas else None


def reach(results: list[CellResult], row: str, groups_per_step: int) -> dict[str, float | None]:
    """How much of the update ProVer's bonus touched, pooled over a row's cells and steps: eligible groups
    and accepted segments per step, and the accepted segments' turns as a share of the step's rollout turns."""
    recs = [t for r in results if r.method == row for t in r.train]
    if not recs:
        return {"eligible": None, "accepted": None, "bonus_share": None}
    turns = sum(t.get("rollout/turns", 0.0) * t.get("rollout/group_size", 0.0) * groups_per_step for t in recs)
    bonus = sum(t.get("credit/accepted", 0.0) * t.get("credit/segment_turns", 0.0) for t in recs)
    return {"eligible": statistics.fmean(t.get("credit/eligible_groups", 0.0) for t in recs),
            "accepted": statistics.fmean(t.get("credit/accepted", 0.0) for t in recs),
            "bonus_share": bonus / turns if turns else None}


def readout(results: list[CellResult], env: str, tag: str, groups_per_step: int) -> list[dict]:
    rows = []
    for name in candidates(results):
        p, bm = f"p-{name}", f"bm-{name}"
        d = stats.paired(*(per_seed(results, row, [env], lambda r: r.success) for row in (p, bm)))
        rows.append({"candidate": f"{name}{tag}", "pairs": d.pairs, "delta": d.diff.mean, "t": d.t,
                     "improvement": d.improvement, "gain": gain(results, p), "bm_gain": gain(results, bm),
                     "tokens": tokens_per_step(results, p, env), **reach(results, p, groups_per_step)})
    return rows


def choose(rows: list[dict]) -> dict | None:
    scored = [r for r in rows if r["delta"] is not None]
    if not scored:
        return None
    best = max(scored, key=lambda r: r["delta"])
    near = [r for r in scored if r["delta"] >= best["delta"] - TIE_POINTS]
    return min(near, key=lambda r: (r["tokens"] or float("inf"), -r["delta"]))


def _pts(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:+.1f}"


def _num(v: float | None, fmt: str) -> str:
    return "–" if v is None else format(v, fmt)


def markdown(rows: list[dict], chosen: dict | None) -> str:
    out = ["| candidate | pairs | Δ = p − bm (points) | 95% t interval | P(improvement) | p gain from warm start "
           "| bm gain | p tokens / step | eligible groups / step | accepted / step | bonus turns share |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        t = r["t"]
        out.append(f"| {r['candidate']} | {r['pairs']} | {_pts(r['delta'])} | [{_pts(t.lo)}, {_pts(t.hi)}] | "
                   f"{'–' if r['improvement'] is None else format(r['improvement'], '.2f')} | {_pts(r['gain'])} | "
                   f"{_pts(r['bm_gain'])} | {'–' if r['tokens'] is None else format(r['tokens'], '.0f')} | "
                   f"{_num(r['eligible'], '.2f')} | {_num(r['accepted'], '.2f')} | {_num(r['bonus_share'], '.1%')} |")
    out += ["", f"Chosen by the rule: **{chosen['candidate']}**" if chosen else "Nothing finished yet."]
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--archived", action="store_true", help="read the cells archived beside the tables "
                    "(docs/bench/pivot/tuning*/cells) instead of the bench folders under runs/")
    ap.add_argument("--out", default="docs/bench/pivot/tuning/readout.md")
    args = ap.parse_args()
    rows = []
    for extra, archive in ((None, "docs/bench/pivot/tuning"), (P3, "docs/bench/pivot/tuning-p3")):
        overrides = (shlex.split(extra) if extra else []) + ([f"dir={archive}"] if args.archived else [])
        bench = load_bench_config(CONFIG, overrides)
        results, pending = collect(plan(bench))
        tag = "" if extra is None else " (3 racks)"
        if pending:
            print(f"{bench.dir}: {len(pending)} cell(s) not finished; read without them")
        groups = plan(bench).cells[0].config.rollout.groups_per_step
        rows += readout(results, bench.envs[0], tag, groups)
    text = markdown(rows, choose(rows))
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
