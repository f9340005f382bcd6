"""Asynchronous rollouts against the synchronous loop, side by side in one run.

    OMP_NUM_THREADS=1 nice -n 19 python -m benchmarks.perf.async_rollout [--envs pivot-sim alfworld-sim]
        [--seeds 0 1 2] [--steps 12] [--policy ENV=DIR ...] [--two-threads] [--out FILE] [overrides ...]

Per env, one warm start (the bench recipe's, or ``--policy``) shared by every cell; then per seed, back
to back on the same warm start and tasks: the synchronous loop (``rollout.max_off_policy_steps=0``, one
process, one torch thread), the asynchronous one (``=1``: learner and rollout worker, one thread each)
and, with ``--two-threads``, for the first seed only, the synchronous loop with two torch threads (the
other way to use the second core). Each cell reports:

- steps per hour of its RL loop, from the end of step 1 to the end of the last step (the worker's start,
  paid once per run, is left out and reported apart as step 1's time);
- the mean seconds per phase (``time/rollout`` is the wait for the batch; ``time/rollout_sampling`` the
  sampling itself, in the worker when asynchronous);
- held-out success at step 0 and after the last step (``eval.episodes`` episodes, the same tasks for
  every cell), and the mean lag of its rows.

Writes the JSON (``--out``) only; ``python -m benchmarks.perf.page --render`` shows it in docs/perf.md. The
machine is a shared 2-core box: the cells of a seed run one after the other, so read the ratios within a seed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.perf.results import ASYNC as OUT
from benchmarks.perf.results import RENDER_HINT, today_command, when

# the recipes of the benches (benchmarks/configs/bench_pivot_tuning.yaml, 2 racks; bench_alfworld.yaml), with
# ProVer + contrast (K = 4) as the method, so verification runs under staleness too; 192 held-out episodes
TINY = ["model.tiny.vocab_size=1024", "model.tiny.hidden_size=96", "model.tiny.num_layers=3", "model.tiny.num_heads=4",
        "model.tiny.intermediate_size=288", "model.tiny.corpus_episodes=200"]
COMMON = ["credit.name=prover", "judge.name=contrast", "credit.samples=4", "rollout.groups_per_step=4",
          "rollout.group_size=4", "eval.episodes=192", "eval.split=train", "run.save_groups=2",
          "run.keep_checkpoints=1"]
ENVS = {
    "pivot-sim": {"warm_seed": 100, "settings": TINY + COMMON + [
        "warmstart.episodes=600", "warmstart.epochs=2", "warmstart.random_action_share=0.5", "learner.lr=2e-5",
        "rollout.max_turns=16", "eval.temperature=1.0"]},
    "alfworld-sim": {"warm_seed": 0, "settings": TINY + COMMON + [
        "warmstart.episodes=1000", "warmstart.epochs=2", "rollout.max_turns=15", "eval.temperature=0.4"]},
}
MODES = {"sync": (0, 1), "async": (1, 1), "sync-2-threads": (0, 2)}  # (max_off_policy_steps, torch threads)


def warm_start(env: str, base: Path, overrides: list[str]) -> Path:
    """The env's warm-started policy folder, built once by a zero-step run (its seed is the bench's)."""
    from prover.config_load import load_config
    from prover.trainer import Trainer

    cfg = load_config(None, ENVS[env]["settings"] + overrides + [
        f"env.name={env}", "steps=0", f"seed={ENVS[env]['warm_seed']}", f"run.dir={base / env / 'warm'}"])
    Trainer(cfg).close()  # building it builds the tiny model and its warm start under run.dir/models
    return next((base / env / "warm" / "models").glob("warmstart-*"))


def cell(env: str, seed: int, mode: str, steps: int, policy: Path, base: Path, overrides: list[str]) -> dict:
    """One training run; its clocks, phases, lag and held-out success."""
    import torch

    from prover.config_load import load_config
    from prover.trainer import Trainer

    k, threads = MODES[mode]
    torch.set_num_threads(threads)
    cfg = load_config(None, ENVS[env]["settings"] + overrides + [
        f"env.name={env}", f"seed={seed}", f"steps={steps}", f"rollout.max_off_policy_steps={k}",
        f"model.path={policy}", "warmstart.enabled=false", f"run.dir={base / env / f'{mode}-{seed}'}"])
    trainer = Trainer(cfg)
    ends: list[float] = []
    log = trainer.run.log

    def timed_log(record: dict, *args, **kwargs) -> None:
        if record.get("phase") == "train":
            ends.append(time.perf_counter())
        log(record, *args, **kwargs)

    trainer.run.log = timed_log
    t0 = time.perf_counter()
    trainer.train()
    hist = trainer.run.history()
    train = [r for r in hist if r["phase"] == "train"]
    evals = {r["step"]: r["eval/success"] for r in hist if r["phase"] == "eval"}
    phases = ["time/rollout", "time/rollout_sampling", "time/credit", "time/learner", "time/sync", "time/step"]
    return {"env": env, "seed": seed, "mode": mode, "max_off_policy_steps": k, "threads": threads,
            "steps": steps, "steps_per_hour": 3600 * (len(ends) - 1) / (ends[-1] - ends[0]),
            "step1_s": train[0]["time/step"], "wall_s": time.perf_counter() - t0,
            "phases": {p: statistics.mean(r[p] for r in train) for p in phases},
            "mean_lag": statistics.mean(r["rollout/policy_lag"] for r in train),
            "eval_start": evals[0], "eval_end": evals[steps], "load_avg_1m": os.getloadavg()[0]}


def summarize(cells: list[dict]) -> dict:
    """Per env: async / sync steps per hour (mean of per-seed ratios) and held-out success, both means and
    the paired async - sync differences."""
    out = {}
    for env in dict.fromkeys(c["env"] for c in cells):
        mine = {(c["seed"], c["mode"]): c for c in cells if c["env"] == env}
        seeds = sorted({s for s, m in mine if m == "async" and (s, "sync") in mine})
        ratio = [mine[s, "async"]["steps_per_hour"] / mine[s, "sync"]["steps_per_hour"] for s in seeds]
        diff = [mine[s, "async"]["eval_end"] - mine[s, "sync"]["eval_end"] for s in seeds]
        two = [mine[s, "sync-2-threads"]["steps_per_hour"] / mine[s, "sync"]["steps_per_hour"] for s in seeds
               if (s, "sync-2-threads") in mine]
        out[env] = {"seeds": seeds, "async_over_sync_steps_per_hour": ratio,
                    "sync2_over_sync_steps_per_hour": two,
                    "eval_start": statistics.mean(mine[s, "sync"]["eval_start"] for s in seeds),
                    "eval_end_sync": statistics.mean(mine[s, "sync"]["eval_end"] for s in seeds),
                    "eval_end_async": statistics.mean(mine[s, "async"]["eval_end"] for s in seeds),
                    "eval_end_diff": diff}
    return out


def section(res: dict) -> list[str]:
    """docs/perf.md's section: steps per hour and held-out success, synchronous against asynchronous."""
    lines = ["## Asynchronous rollouts (rollout.max_off_policy_steps)", "",
             f"`{today_command(res['command'])}`", "",
             f"{res['steps']} RL steps per cell ({res.get('method', '')}) from one warm start per env; the cells "
             "of a seed ran one after the other. `async` is two processes (learner, rollout worker), one torch "
             "thread each, and samples each step's batch one policy version behind the learner "
             "(prover/episodes/async_rollout.py); `sync` is the usual loop on one thread"
             + (", `sync-2-threads` the same on two" if any(c["threads"] == 2 for c in res["cells"]) else "")
             + ". Steps per hour exclude step 1 (the worker's start); the load average is at the end of each cell.", "",
             "| env | seed | mode | steps/h | vs sync | s/step: wait for batch | sampling | credit | learner "
             "| held-out start -> end | load |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    sync = {(c["env"], c["seed"]): c["steps_per_hour"] for c in res["cells"] if c["mode"] == "sync"}
    for c in res["cells"]:
        ph = c["phases"]
        lines.append(f"| {c['env']} | {c['seed']} | {c['mode']} | {c['steps_per_hour']:.0f} "
                     f"| {c['steps_per_hour'] / sync[c['env'], c['seed']]:.2f}x | {ph['time/rollout']:.1f} "
                     f"| {ph['time/rollout_sampling']:.1f} | {ph['time/credit']:.1f} | {ph['time/learner']:.1f} "
                     f"| {c['eval_start']:.3f} -> {c['eval_end']:.3f} | {c['load_avg_1m']:.1f} |")
    lines += ["", "| env | async / sync steps per hour, per seed | held-out after the last step: sync; async; "
              "async - sync per seed |", "|---|---|---|"]
    for env, s in res["summary"].items():
        ratios = ", ".join(f"{r:.2f}x" for r in s["async_over_sync_steps_per_hour"])
        diffs = ", ".join(f"{d:+.3f}" for d in s["eval_end_diff"])
        lines.append(f"| {env} | {ratios} | {s['eval_end_sync']:.3f}; {s['eval_end_async']:.3f}; {diffs} |")
    return lines + ["", when(res)] + ([""] + res["notes"] if res.get("notes") else [])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", nargs="+", default=list(ENVS), choices=list(ENVS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--policy", nargs="*", default=[], metavar="ENV=DIR", help="a warm start already built with "
                    "the env's recipe (e.g. a bench's shared models/warmstart-* folder) instead of building it")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--keep", type=Path, help="run folders here instead of a temporary folder")
    ap.add_argument("--two-threads", action="store_true", help="also the synchronous loop on two torch threads "
                    "(first seed)")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    given = dict(p.split("=", 1) for p in args.policy)
    t0, load0 = time.perf_counter(), os.getloadavg()[0]
    cells = []
    with tempfile.TemporaryDirectory() as tmp:
        base = args.keep or Path(tmp)
        for env in args.envs:
            policy = Path(given[env]) if env in given else warm_start(env, base, args.overrides)
            for seed in args.seeds:
                extra = ["sync-2-threads"] if args.two_threads and seed == args.seeds[0] else []
                for mode in ["sync", "async", *extra]:
                    cells.append(cell(env, seed, mode, args.steps, policy, base, args.overrides))
                    c = cells[-1]
                    print(f"{env} seed {seed} {mode}: {c['steps_per_hour']:.0f} steps/h, held-out "
                          f"{c['eval_start']:.3f} -> {c['eval_end']:.3f}, lag {c['mean_lag']:.2f}", flush=True)
    command = "OMP_NUM_THREADS=1 nice -n 19 python -m benchmarks.perf.async_rollout " + " ".join(sys.argv[1:])
    result = {"command": command,
              "settings": {env: ENVS[env]["settings"] + args.overrides for env in args.envs}, "steps": args.steps,
              "method": "prover + contrast judge, credit.samples=4",
              "policies": {env: given.get(env, "built") for env in args.envs}, "cells": cells,
              "summary": summarize(cells),
              "measured": {"seconds": time.perf_counter() - t0, "date": time.strftime("%Y-%m-%d %H:%M UTC",
                           time.gmtime()), "load_avg_1m": load0, "load_avg_1m_end": os.getloadavg()[0],
                           "cpus": os.cpu_count(), "python": platform.python_version()}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result["summary"], indent=1))
    print(f"wrote {args.out}; {RENDER_HINT}")


if __name__ == "__main__":
    main()
