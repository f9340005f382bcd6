"""Lighter recipes for the README's main job, tried on seeds other than 0.

    python -m benchmarks.perf.main_job_recipes --name small-1000x1 --seeds 1,2 -- model.tiny.hidden_size=96 ...
    python -m benchmarks.perf.main_job_recipes --render          # the markdown table only

Each run is ``prover train seed=S <overrides>`` in its own process at one torch thread; its row keeps the
overrides, held-out success after the warm start and after RL (96 unseen-layout tasks at temperature 1,
the main job's evaluation), and the process's wall and CPU seconds. ``steps=0`` rows stop after the warm
start's evaluation (a screen of the warm start alone). Rows are appended to
benchmarks/results/perf/recipes.json; docs/perf.md shows them under "The five-minute main job".

CPU seconds are the figure to compare: the runs shared the machine with other work, and a one-thread
process's CPU seconds move far less with load than its wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "perf" / "recipes.json"


def run(name: str, seed: int, overrides: list[str]) -> dict:
    from benchmarks.perf.cell_speed import train_child

    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-m", "prover.cli", "train", f"seed={seed}", *overrides, f"run.dir={tmp}"]
        wall, cpu, rows = train_child(argv, ROOT, {**os.environ, "OMP_NUM_THREADS": "1"}, Path(tmp))
    evals = [r["eval/success"] for r in rows if r["phase"] == "eval"]
    return {"name": name, "seed": seed, "overrides": overrides, "before": evals[0], "after": evals[-1],
            "steps": sum(r["phase"] == "train" for r in rows), "wall_s": wall, "cpu_s": cpu,
            "load_avg_1m": os.getloadavg()[0]}


def table(res: dict) -> list[str]:
    lines = ["| recipe | seed | overrides | steps | held-out after warm start | after RL | rise (points) | "
             "CPU s | wall s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        rise = f"{100 * (r['after'] - r['before']):+.1f}" if r["steps"] else ""
        lines.append(f"| {r['name']} | {r['seed']} | `{' '.join(r['overrides']) or '(defaults)'}` | {r['steps']} | "
                     f"{r['before']:.3f} | {r['after']:.3f} | {rise} | {r['cpu_s']:.0f} | {r['wall_s']:.0f} |")
    return lines


def fresh_clone(res: dict) -> list[str]:
    """The README's command as a new user runs it, timed with ``time``, when it was."""
    f = res.get("fresh_clone")
    if f is None:
        return []
    return ["", f"On a fresh clone (commit {f['commit']}, {f['date']}, {f['load']}), "
            f"`{f['command']}`: install {f['install_s']:.0f} s, `prover train` {f['train_s']:.0f} s (the SFT "
            f"{f['sft_s']:.0f} s of it), **{f['total_s']:.0f} s** with the venv; held-out {f['eval_before']:.3f} -> "
            f"{f['eval_after']:.3f}."]


def section(res: dict, levers: dict | None = None) -> list[str]:
    """docs/perf.md's section: today's main job on an idle machine, the SFT's rate by lever, the recipes tried
    (``levers``: benchmarks/perf/sft_levers.py's result)."""
    from benchmarks.perf.sft_levers import sentence

    idle, rate = res["idle_main"], res["sft_rate_idle"]
    phases = ", ".join(f"{name} {s:.0f} s" for name, s in idle["phases"].items() if s >= 1)
    rates = "; ".join(f"{k}: {v}" for k, v in rate.items() if k != "what")
    return ["## The five-minute main job", "",
            f"The goal: the README's first command, install included, in at most 300 s on an idle machine of this "
            f"kind, with held-out success rising at least 10 points on seed 0. **Not reached.** The main job "
            f"(commit {idle['commit']}, seed {idle['seed']}, {idle['load']}) took **{idle['wall_s']:.0f} s** of "
            f"training ({idle['cpu_s']:.0f} CPU s, one thread; held-out {idle['eval_before']:.3f} -> "
            f"{idle['eval_after']:.3f}) before the install: {phases}.", *fresh_clone(res), "",
            f"The SFT's rate ({rate['what']}): {rates}. Two threads help on an idle machine and cost 7.8x on a "
            "busy one (the threads lever above), so the default stays at one.", "",
            "Lighter recipes, tuned on seeds 1 and 2 only (seed 0 untouched), by `python -m "
            "benchmarks.perf.main_job_recipes --name NAME --seeds 1,2 -- OVERRIDES`. Held-out success on 96 "
            "unseen-layout tasks at temperature 1; `steps=0` rows screen the warm start alone. "
            f"{res.get('note', '')}.", "", *table(res), "",
            "**Reading.** Below about 20,000 SFT rows (1000 episodes x 2 epochs) the default tiny policy does not "
            "copy actions from its prompt well enough to succeed on unseen layouts, and RL from a policy that "
            "never succeeds has nothing to learn from (GRPO's groups are all zero). A higher learning rate did "
            "not make up for fewer rows, nor did one decayed linearly to 0 (tried with a patched SFT, not a "
            "setting, so not in the table: 0.000 at 1e-3 and at 2e-3, small model, 1000 x 1, seed 1), nor more "
            "updates on the same rows (batches of 4 or 2: the warm start stays at 0.01-0.10), nor a larger RL "
            "learning rate (3e-4: +4.2 on both seeds, against +11.5 and +6.2 at the default 1e-4). The smaller "
            "model (bench_alfworld's) runs the SFT 1.8x faster and the whole job in about 220-250 CPU s with one "
            "epoch, which with the install would be 270-310 s; its rises were +11.5 and +6.2 (batches of 8) and "
            "+19.8 and +1.0 (batches of 2). With two epochs it rose +17.7 and +8.3 (the same numbers again in a "
            "second run: runs are deterministic) for 330-390 CPU s at a load of 2. No recipe keeps 10 points on "
            "both tuning seeds (the rule) inside 300 s, so the default recipe is unchanged.", "",
            "**Why the default does not fit.** At one thread the default SFT's 2,512 batches of 8 run at about 9 "
            "per second on this idle CPU: 280 s, near the 300 s budget by itself, before 12 RL steps of about "
            "19 s each.", *([] if levers is None else ["", sentence(levers)])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name")
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--render", action="store_true")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    res = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {"rows": []}
    if not args.render:
        if not args.name:
            raise SystemExit("recipes: name the recipe with --name (or pass --render)")
        for seed in (int(s) for s in args.seeds.split(",")):
            if seed == 0:
                raise SystemExit("recipes: seed 0 is the confirmation seed; tune on others")
            res["rows"].append(run(args.name, seed, args.overrides))
            RESULTS.write_text(json.dumps(res, indent=1))
    print("\n".join(table(res)))


if __name__ == "__main__":
    main()
