"""A real model's RL step, this tree's chat context beside an older revision's windowed prompts.

    python -m benchmarks.perf.chat_step --before REV [--model DIR] [--steps 2] [--turns 8] [--threads 1]

The run is docs/pretrained-policy.md's documented command (SmolLM2-135M-Instruct on pivot-sim, `full` prompts,
GRPO, 2 groups of 4 episodes a step, LoRA, micro-batches of 4 rows) with ``rollout.max_turns`` and the env's
``max_steps`` at ``--turns`` (the command's corridor allows 4 steps; an untrained model rarely ends sooner). Three
runs from the same model folder and seed, two at a time with ``--threads`` each:

- ``before``: REV's tree (a git worktree), as it was: windowed prompts re-rendered every turn, no cache
  across calls, one learner row per turn;
- ``after``: this tree with ``rollout.context=chat``: one growing chat per episode, the ``hf`` engine's
  prefix cache, the learner forwarding each episode once;
- ``window``: this tree with the windowed prompts (its default), for the token counts of today's prompts
  under this tree's metrics (REV's tree logs no unique-token count); run after the pair, alone.

The figures are ratios within the run: step seconds after / before (the pair ran at the same time, so at
the same load), rollout prefill tokens computed per unique trajectory token and learner tokens forwarded per
unique trajectory token in each context. Writes benchmarks/results/perf/chat-step.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.perf.cell_speed import child_env, train_child

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "results" / "perf" / "chat-step.json"
DOCUMENTED = ["env.name=pivot-sim", "env.kwargs.prompt=full", "env.kwargs.n_pivots=1", "env.kwargs.delay=1",
              "env.kwargs.irrelevant_share=0.5", "warmstart.enabled=false", "credit.name=grpo",
              "rollout.groups_per_step=2", "rollout.group_size=4", "learner.micro_batch_rows=4",
              "model.lora.enabled=true", "eval.episodes=1", "eval.every=0"]
PHASES = ("rollout", "credit", "learner", "sync", "step")
COUNTS = ("cost/rollout_tokens", "cost/rollout_prompt_tokens", "cost/rollout_cached_tokens",
          "cost/rollout_unique_tokens", "learner/tokens", "learner/forwarded_tokens", "learner/unique_tokens")


def default_model() -> str:
    from prover.judges.gguf_convert import convert

    return str(convert()[0])  # ~/.cache/prover/models/smollm2-135m-instruct, converted once


def shape_of(model: str) -> dict:
    """FLOPs per token of the model (benchmarks/perf/flops.py), for the page's achieved FLOP/s."""
    from dataclasses import asdict

    from transformers import AutoConfig

    from benchmarks.perf.flops import ModelShape

    return asdict(ModelShape.of(AutoConfig.from_pretrained(model)))


def run(tree: Path, run_dir: Path, model: str, args: argparse.Namespace, extra: tuple[str, ...]) -> dict:
    argv = [sys.executable, "-m", "prover.cli", "train", *DOCUMENTED, f"model.path={model}", f"steps={args.steps}",
            f"rollout.max_turns={args.turns}", f"env.kwargs.max_steps={args.turns}", f"seed={args.seed}",
            f"run.dir={run_dir}", *extra]
    wall, cpu, rows = train_child(argv, tree, child_env(tree, args.threads), run_dir)
    train = [r for r in rows if r["phase"] == "train"]
    out = {"wall_s": wall, "cpu_s": cpu, "steps": len(train),
           "seconds": {p: sum(r.get(f"time/{p}", 0.0) for r in train) for p in PHASES},
           "counts": {k: sum(r.get(k, 0.0) for r in train) for k in COUNTS if any(k in r for r in train)},
           "turns": sum(r["rollout/turns"] for r in train) / max(len(train), 1)}
    print(f"[chat-step] {run_dir.name}: {out['seconds']['step']:.0f} s in {len(train)} steps "
          f"({out['turns']:.1f} turns an episode)", flush=True)
    return out


def measure(args: argparse.Namespace) -> dict:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    model = args.model or default_model()
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "before-tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(old), args.before], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            jobs = [(old, Path(tmp) / "before", ()), (ROOT, Path(tmp) / "after", ("rollout.context=chat", *args.extra))]
            with ThreadPoolExecutor(2) as pool:
                before, after = pool.map(lambda job: run(job[0], job[1], model, args, job[2]), jobs)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, capture_output=True)
        window = run(ROOT, Path(tmp) / "window", model, args, ()) if args.window else None
    return {"before": args.before, "after": head.stdout.strip(), "model": Path(model).name, "shape": shape_of(model),
            "steps": args.steps,
            "turns": args.turns, "threads": args.threads, "seed": args.seed, "command": DOCUMENTED,
            "after_settings": ["rollout.context=chat", *args.extra],
            "runs": {"before": before, "after": after, **({"window": window} if window else {})}}


def ratios(res: dict) -> dict[str, float]:
    """The section's figures from the saved runs."""
    runs = res["runs"]
    out = {"step_after_over_before": runs["after"]["seconds"]["step"] / runs["before"]["seconds"]["step"]}
    # REV's tree logs no unique-token count: its episodes are read against the after run's chat lengths (the
    # same number of episodes and turns), and its learner forwards every turn row's prompt and completion
    b, a = runs["before"]["counts"], runs["after"]["counts"]
    if a.get("cost/rollout_unique_tokens") and b["cost/rollout_tokens"] == b.get("learner/tokens"):
        out["before_prefill_per_unique"] = ((b["cost/rollout_prompt_tokens"] - b["cost/rollout_cached_tokens"])
                                            / a["cost/rollout_unique_tokens"])
        out["before_learner_per_unique"] = ((b["cost/rollout_prompt_tokens"] + b["cost/rollout_tokens"])
                                            / a["cost/rollout_unique_tokens"])
    for name in [n for n in ("after", "window") if n in runs]:
        c = runs[name]["counts"]
        unique = c.get("cost/rollout_unique_tokens", 0.0)
        if unique:
            computed = c.get("cost/rollout_prompt_tokens", 0.0) - c.get("cost/rollout_cached_tokens", 0.0)
            out[f"{name}_prefill_per_unique"] = computed / unique
        if c.get("learner/unique_tokens"):
            out[f"{name}_learner_per_unique"] = c["learner/forwarded_tokens"] / c["learner/unique_tokens"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="git revision timed beside this tree")
    ap.add_argument("--model", help="the policy folder (default: SmolLM2-135M-Instruct from prover convert-gguf)")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", default="1", help="OMP_NUM_THREADS of each run")
    ap.add_argument("--extra", nargs="*", default=[], help="settings for the after run besides rollout.context=chat")
    ap.add_argument("--no-window", dest="window", action="store_false", help="skip the window run")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    res = measure(args)
    res["ratios"] = ratios(res)
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res["ratios"], indent=1))


if __name__ == "__main__":
    main()
