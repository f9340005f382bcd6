"""The Brancher's prefill per generated token, windowed prompts against the chat context.

    python -m benchmarks.perf.branch_prefill --before REV --policy DIR [--steps 2] [--seed 0]

The main job's ProVer step (alfworld-sim, the contrast judge, K = 4 continuations from each side of a
segment) from a warm-started tiny policy (``--policy``: e.g. the main job's ``models/warmstart-*``), three
ways, one after the other at one thread: REV's tree (windowed prompts, its engine), this tree with windowed
prompts, and this tree with ``rollout.context=chat``, from the main job's own warm start in the chat context
(built here: a policy cloned on windowed prompts wins nothing in a chat, so nothing would be branched; the
counts per generated token are what is compared). For each: branch prompt tokens, the
tokens the engine prefilled for them (prompt less cached), generated branch tokens, and prefill per
generated token. Writes benchmarks/results/perf/branch-prefill.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.perf.cell_speed import child_env, train_child

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "results" / "perf" / "branch-prefill.json"


def counts(tree: Path, run_dir: Path, args: argparse.Namespace, extra: tuple[str, ...]) -> dict:
    policy = [f"model.path={args.policy}", "warmstart.enabled=false"] if "rollout.context=chat" not in extra else []
    argv = [sys.executable, "-m", "prover.cli", "train", *policy, f"steps={args.steps}", "eval.episodes=1",
            f"seed={args.seed}", f"run.dir={run_dir}", *extra]
    _, _, rows = train_child(argv, tree, child_env(tree, "1"), run_dir)
    train = [r for r in rows if r["phase"] == "train"]
    total = {k: sum(r.get(f"cost/{k}", 0.0) for r in train)
             for k in ("branch_prompt_tokens", "branch_cached_tokens", "branch_tokens", "rollout_tokens")}
    prefilled = total["branch_prompt_tokens"] - total["branch_cached_tokens"]
    total["branch_prefill_per_generated"] = prefilled / total["branch_tokens"] if total["branch_tokens"] else None
    print(f"[branch-prefill] {run_dir.name}: {json.dumps(total)}", flush=True)
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True)
    ap.add_argument("--policy", required=True)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chat-only", dest="window", action="store_false", help="only the chat run; the others are "
                    "read from --out")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "before-tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(old), args.before], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            runs = {"before": counts(old, Path(tmp) / "before", args, ())} if args.window else {}
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, capture_output=True)
        runs["window"] = counts(ROOT, Path(tmp) / "window", args, ()) if args.window else None
        runs["chat"] = counts(ROOT, Path(tmp) / "chat", args, ("rollout.context=chat",))
    if not args.window:  # the saved before and window runs, with this chat run
        runs = {**json.loads(Path(args.out).read_text())["runs"], "chat": runs["chat"]}
    res = {"before": args.before, "steps": args.steps, "seed": args.seed, "policy": Path(args.policy).name,
           "runs": runs}
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
