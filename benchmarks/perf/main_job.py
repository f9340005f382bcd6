"""The main-job sections of docs/perf.md: the README's main job (``prover train`` with no overrides) timed phase
by phase (section ``main``), and ProVer's cost over GRPO from its warm-started policy (section ``overhead``).
benchmarks.perf.run measures them and keeps their JSON:

    python -m benchmarks.perf.run --sections main [--before REV]
    python -m benchmarks.perf.run --sections overhead [--steps 12] [--policy DIR]

``main`` runs each tree's job in a child process of this file (``--main-child``) with only that tree on
PYTHONPATH, so an older revision's job runs its own code; the module therefore imports nothing of
benchmarks at its top.
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

ROOT = Path(__file__).resolve().parents[2]


# -- main: the README's main job, phase by phase --------------------------------------------------------
def main_child(run_dir: str, out: str) -> None:
    """Run the main job in this process with clocks around its phases (``--main-child``)."""
    import prover.policy as policy
    try:
        import prover.policy.warmstart as warmstart
    except ImportError:  # a revision from before the policy package
        import prover.warmstart as warmstart
    try:
        from prover.config_load import load_config
    except ImportError:  # a revision from before the loader was split off the schema
        from prover.config import load_config
    from prover.learning.learner import Learner
    from prover.trainer import Trainer

    clocks: dict[str, float] = {}

    def clocked(name, fn):
        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                clocks[name] = clocks.get(name, 0.0) + time.perf_counter() - t0
        return wrapper

    policy.base_policy = clocked("build tiny policy", policy.base_policy)
    warmstart.expert_rows = clocked("warm start: expert episodes", warmstart.expert_rows)
    Learner.sft = clocked("warm start: SFT", Learner.sft)
    Trainer.evaluate = clocked("held-out evaluations", Trainer.evaluate)
    t0, cpu0 = time.perf_counter(), time.process_time()
    summary = Trainer(load_config(None, [f"run.dir={run_dir}"])).train()
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0  # CPU seconds barely move with load
    rows = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["phase"] == "train"]
    evals = [r["eval/success"] for r in rows if r["phase"] == "eval"]
    for phase in ("rollout", "credit", "learner", "sync"):
        clocks[f"RL: {phase}"] = sum(r.get(f"time/{phase}", 0.0) for r in train)
    clocks["other (imports, model loads, checkpoints)"] = wall - sum(clocks.values())
    ws = next(iter(sorted(Path(run_dir, "models").glob("warmstart-*"))), None)
    Path(out).write_text(json.dumps({
        "wall_s": wall, "cpu_s": cpu, "phases": clocks, "eval_before": evals[0], "eval_after": evals[-1],
        "rollout_tokens": sum(r["cost/rollout_tokens"] for r in train),
        "branch_tokens": sum(r.get("cost/branch_tokens", 0.0) for r in train),
        "steps": len(train), "warmstart_dir": str(ws) if ws else None, "summary_keys": sorted(summary)}))


def run_main(label: str, tree: Path, run_dir: Path) -> dict:
    out = run_dir.with_suffix(".json")
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}  # one core: see section_main
    print(f"[perf] main job ({label}, {tree}) ...", flush=True)
    subprocess.run([sys.executable, str(Path(__file__).resolve()), "--main-child", str(run_dir), str(out)],
                   cwd=tree, env=env, check=True)
    return {"label": label, **json.loads(out.read_text())}


def section_main(args: argparse.Namespace, keep: Path) -> dict:
    """The main job of this tree, and with ``--before`` of REV's at the same time (one core each, the same
    load on both, so their wall-time ratio is fair on a shared machine)."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    jobs = [(f"after ({head.stdout.strip()})", ROOT, keep / "main-run")]
    with tempfile.TemporaryDirectory() as tmp:
        if args.before:
            tree = Path(tmp) / "before"
            subprocess.run(["git", "worktree", "add", "--detach", str(tree), args.before], cwd=ROOT, check=True,
                           capture_output=True)
            jobs.insert(0, (f"before ({args.before})", tree, Path(tmp) / "run-before"))
        try:
            with ThreadPoolExecutor(len(jobs)) as pool:
                runs = list(pool.map(lambda job: run_main(*job), jobs))
        finally:
            if args.before:
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
    return {"runs": runs, "concurrent": len(jobs) > 1}


# -- verify and overhead: from the main job's warm-started policy --------------------------------------
def policy_overrides(args: argparse.Namespace) -> list[str]:
    from benchmarks.perf.results import load

    folder = args.policy or load("main")["runs"][-1]["warmstart_dir"]
    return [f"model.path={folder}", "warmstart.enabled=false"]


ARMS = {"GRPO": ["credit.name=grpo", "judge.name=null"],
        "ProVer, verify=fixed": ["credit.name=prover", "credit.verify=fixed"],
        "ProVer, verify=adaptive": ["credit.name=prover", "credit.verify=adaptive"]}


def section_overhead(args: argparse.Namespace, keep: Path) -> dict:
    from prover.config_load import load_config
    from prover.progress import Reporter
    from prover.trainer import Trainer

    arms = {}
    for name, overrides in ARMS.items():
        print(f"[perf] {args.steps} RL steps: {name} ...", flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            cfg = load_config(None, [*policy_overrides(args), f"steps={args.steps}", "eval.episodes=1",
                                     *overrides, f"run.dir={tmp}"])
            Trainer(cfg, reporter=Reporter(quiet=True)).train()
            rows = [json.loads(x) for x in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
        train = [r for r in rows if r["phase"] == "train"]
        arms[name] = {k: sum(r.get(k, 0.0) for r in train) for k in
                      ("cost/rollout_tokens", "cost/branch_tokens", "time/step", "time/credit",
                       "credit/valid_proposals", "credit/accepted")}
    return {"steps": args.steps, "arms": arms}


if __name__ == "__main__":
    if sys.argv[1:2] != ["--main-child"] or len(sys.argv) != 4:
        raise SystemExit("usage: python -m benchmarks.perf.run --sections main,overhead (this file's own "
                         "entry, --main-child RUN_DIR OUT, is run.py's child)")
    main_child(*sys.argv[2:])
