"""Env instances and credit seconds per step with branching continuations on a bounded pool.

    python -m benchmarks.perf.env_instances [--bound N] -- <prover train overrides>

Runs the same ``prover train`` twice in this tree, one after the other: with ``rollout.max_branch_envs``
so large that every continuation gets its own instance (what the rollout did before the pool was
bounded), then with ``--bound`` (default: the config's own bound, groups_per_step x group_size). Prints
per step the instances created (``env/instances_created``; step 1's include the evaluation's before it,
whose episodes beyond the bound share instances too), the instances alive after the step
(``env/instances``: for an env with a process per instance, the processes alive), the swaps the sharing
cost (``env/swaps``) and the credit phase's seconds, and says whether the two runs' groups.jsonl and
metrics, evaluations included (times and ``env/*`` aside), are equal, as they must be. For a heavy env,
e.g. a TextWorld-Express plugin: ``-- env.name=twx credit.name=prover steps=3``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ONE_EACH = 1_000_000  # more than any step's continuations


def run(tmp: Path, name: str, overrides: list[str]) -> tuple[list[dict], bytes]:
    run_dir = tmp / name
    subprocess.run([sys.executable, "-m", "prover.cli", "train", *overrides, f"run.dir={run_dir}"], check=True,
                   cwd=ROOT, stdout=subprocess.DEVNULL)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["phase"] in ("train", "eval")], (run_dir / "groups.jsonl").read_bytes()


def same_results(a: list[dict], b: list[dict]) -> bool:
    def kept(rows: list[dict]) -> list[dict]:
        return [{k: v for k, v in r.items() if not k.startswith(("time/", "env/"))} for r in rows]
    return kept(a) == kept(b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bound", type=int, default=None, help="rollout.max_branch_envs of the bounded run")
    parser.add_argument("overrides", nargs="*", help="prover train overrides (after --)")
    args = parser.parse_args()
    bounded = [f"rollout.max_branch_envs={args.bound}"] if args.bound else []
    with tempfile.TemporaryDirectory() as tmp:
        before, groups_before = run(Path(tmp), "one-each", [*args.overrides, f"rollout.max_branch_envs={ONE_EACH}"])
        after, groups_after = run(Path(tmp), "bounded", [*args.overrides, *bounded])
    print("step  instances created (one each -> bounded)  alive  swaps  credit s")
    for b, a in zip(before, after):
        if b["phase"] == "eval":
            print(f"eval at step {b['step']}: held-out success {b['eval/success']:.3f} -> {a['eval/success']:.3f}")
            continue
        print(f"{b['step']:>4}  {b['env/instances_created']:>6.0f} -> {a['env/instances_created']:<6.0f}"
              f"{b['env/instances']:>14.0f} -> {a['env/instances']:<6.0f}{a['env/swaps']:>6.0f}"
              f"  {b['time/credit']:7.2f} -> {a['time/credit']:.2f}   continuations "
              f"{a['cost/branch_continuations']:.0f}")
    print("groups.jsonl equal:", groups_before == groups_after, "| metrics equal:", same_results(before, after))


if __name__ == "__main__":
    main()
