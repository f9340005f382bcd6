"""ProVer's overhead over GRPO on the same seeds, and how often each judge's segments are accepted.

    python -m benchmarks.perf.prover_overhead [--envs alfworld-sim,webshop-sim,searchqa-sim] [--seeds 0]
                                              [--steps 2] [--judges contrast,random] [overrides ...]

For every env and seed it builds one warm-started policy in a temporary run folder, then trains from
it once with GRPO and once with ProVer per judge, each for ``--steps`` steps with the same seeds: the
same tasks, and at step 1 the same rollout batch (the policies only part after the first update).
The paper reports 1.02-1.17x generated tokens and 1.10-2.44x wall time per step (arXiv 2609.36178).

Two ratios per quantity:
- paired: ProVer's mean per step over GRPO's, from the two runs (tokens: rollout + branch over
  GRPO's rollout tokens). Wall time here drifts with the machine's load between the two runs.
- within: from the ProVer run alone, (rollout + branch) / rollout tokens and step time over step time
  without the credit phase (GRPO's credit phase takes milliseconds), immune to load changes.

Settings default to a shorter warm start than ``prover train`` (pass warmstart.* to change it) and an
evaluation of one episode (evaluation is not part of a training step).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from prover.config_load import load_config
from prover.progress import Reporter
from prover.trainer import Trainer

FIXED = ["warmstart.episodes=300", "eval.episodes=1"]


def train_steps(run_dir: str, overrides: list[str]) -> list[dict]:
    cfg = load_config(None, [*FIXED, *overrides, f"run.dir={run_dir}"])
    Trainer(cfg, reporter=Reporter(quiet=True)).train()
    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["phase"] == "train"]


def mean(rows: list[dict], key: str) -> float:
    return sum(r.get(key, 0.0) for r in rows) / len(rows)


def summarise(grpo: list[dict], prover: list[dict]) -> dict[str, float]:
    tokens = [r["cost/rollout_tokens"] + r["cost/branch_tokens"] for r in prover]
    valid = sum(r["credit/valid_proposals"] for r in prover)
    seg = sum(r.get("credit/segment_turns", 0.0) * r["credit/valid_proposals"] for r in prover)
    return {
        "tokens_paired": (sum(tokens) / len(tokens)) / mean(grpo, "cost/rollout_tokens"),
        "tokens_within": sum(tokens) / sum(r["cost/rollout_tokens"] for r in prover),
        "time_paired": mean(prover, "time/step") / mean(grpo, "time/step"),
        "time_within": sum(r["time/step"] for r in prover) / sum(r["time/step"] - r["time/credit"] for r in prover),
        "grpo_s": mean(grpo, "time/step"), "prover_s": mean(prover, "time/step"),
        "eligible": sum(r["credit/eligible_groups"] for r in prover), "valid": valid,
        "accepted": sum(r["credit/accepted"] for r in prover),
        "acceptance": sum(r["credit/accepted"] for r in prover) / valid if valid else float("nan"),
        "segment_turns": seg / valid if valid else float("nan"),
        "success": mean(prover, "rollout/success"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--envs", default="alfworld-sim,webshop-sim,searchqa-sim")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--judges", default="contrast,random")
    ap.add_argument("overrides", nargs="*", help="dotted config overrides for every run")
    args = ap.parse_args()
    rows = []
    for env in args.envs.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            with tempfile.TemporaryDirectory() as tmp:  # one folder: every arm reuses the warm-started policy
                base = [f"env.name={env}", f"seed={seed}", f"steps={args.steps}", *args.overrides]
                grpo = train_steps(tmp, [*base, "credit.name=grpo", "judge.name=null"])
                for judge in args.judges.split(","):
                    prover = train_steps(tmp, [*base, "credit.name=prover", f"judge.name={judge}"])
                    rows.append((env, seed, judge, summarise(grpo, prover)))
                    print(json.dumps({"env": env, "seed": seed, "judge": judge, **rows[-1][3]}), flush=True)
    print(f"\nProVer over GRPO, {args.steps} steps per run (paper: tokens 1.02-1.17x, time 1.10-2.44x)\n")
    print("| env | seed | judge | tokens paired | tokens within | time paired | time within | GRPO s/step "
          "| ProVer s/step | eligible | valid | accepted | acceptance | segment turns | success |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for env, seed, judge, s in rows:
        print(f"| {env} | {seed} | {judge} | {s['tokens_paired']:.2f}x | {s['tokens_within']:.2f}x "
              f"| {s['time_paired']:.2f}x | {s['time_within']:.2f}x | {s['grpo_s']:.1f} | {s['prover_s']:.1f} "
              f"| {s['eligible']:.0f} | {s['valid']:.0f} | {s['accepted']:.0f} | {s['acceptance']:.0%} "
              f"| {s['segment_turns']:.2f} | {s['success']:.2f} |")


if __name__ == "__main__":
    main()
