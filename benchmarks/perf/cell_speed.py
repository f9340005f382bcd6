"""A bench cell's wall time, this tree beside an older revision's, at the same seeds and load.

    python -m benchmarks.perf.run --sections cell --before REV [--cell-seeds 0,1,2,3,4] [--cell-threads 1]
    python -m benchmarks.perf.cell_speed --before REV [--seeds 0,1,2,3,4] [--threads 1|default] [--policy DIR]

The cell is benchmarks/configs/bench_pivot_12steps.yaml's prover+contrast row: pivot-sim, 12 steps of 4 tasks x 4
episodes, ProVer with the contrast judge at K = 4, held-out success on 288 tasks at steps 0, 6 and 12, from
the bench's shared warm-started policy (``--policy``; else built once here with the bench's warm start).
For each seed the two trees train that cell at the same time, one process each, so both see the same load;
their wall-time ratio is the figure, and CPU seconds (from each process's own rusage) are kept beside it.

``--later-cell`` times the after tree's cell as a bench matrix runs every method of a seed after its first:
the step-0 evaluation of the shared policy is already in the bench's evaluation cache (``eval.cache_dir``,
prover/rundir/eval_cache.py). The cache is filled for each seed, untimed, by a ``steps=0`` run of the after tree
before the two cells start (what the seed's first cell computes); the before tree samples it as it always did.

``--threads 1`` sets OMP_NUM_THREADS=1 in both, as the bench files' two-process commands do; ``default``
removes OMP_NUM_THREADS and MKL_NUM_THREADS, so each tree runs at its own default (revisions before 2026-12-04:
torch's default, one thread per core; since: 1 thread for the tiny model).

The results must agree: evaluation samples at temperature 1, and shared prompt prefixes regroup a call's
prompts, so the draws differ; the check is that held-out success is equal in distribution, read as the
paired before/after difference over the seeds at each evaluation, with its 95% t interval.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# bench_pivot_12steps.yaml's common block and its prover+contrast row, as command-line settings both trees read
CELL = ["env.name=pivot-sim", "warmstart.enabled=false", "steps=12", "learner.lr=2e-5",
        "rollout.groups_per_step=4", "rollout.group_size=4", "rollout.max_turns=16",
        "eval.episodes=288", "eval.split=train", "eval.temperature=1.0", "eval.every=6",
        "credit.name=prover", "judge.name=contrast", "credit.samples=4"]
WARMSTART = ["env.name=pivot-sim", "steps=0", "eval.episodes=1", "warmstart.epochs=2", "warmstart.episodes=600",
             "warmstart.random_action_share=0.5", "model.tiny.vocab_size=1024", "model.tiny.hidden_size=96",
             "model.tiny.num_layers=3", "model.tiny.num_heads=4", "model.tiny.intermediate_size=288",
             "model.tiny.corpus_episodes=200"]


def child_env(tree: Path, threads: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop("MKL_NUM_THREADS", None)
    if threads == "default":
        env.pop("OMP_NUM_THREADS", None)
    else:
        env["OMP_NUM_THREADS"] = threads
    return env


def build_policy(where: Path) -> str:
    """The bench's shared warm start (seed 0), built by this tree."""
    print("[cell] building the warm-started policy (bench_pivot_12steps' recipe, seed 0) ...", flush=True)
    subprocess.run([sys.executable, "-m", "prover.cli", "train", *WARMSTART, f"run.dir={where}"], cwd=ROOT,
                   env=child_env(ROOT, "1"), check=True, stdout=subprocess.DEVNULL)
    return str(next(iter(sorted((where / "models").glob("warmstart-*")))))


def train_child(argv: list[str], cwd: Path, env: dict[str, str], run_dir: Path) -> tuple[float, float, list[dict]]:
    """Run ``prover train`` (``argv``) as a child: its wall seconds, its own CPU seconds (rusage), and its
    metrics rows; a failed run raises SystemExit with the end of its stderr (kept in a file, not a pipe
    that a chatty run could fill)."""
    with tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        if code := os.waitstatus_to_exitcode(status):
            err.seek(0)
            raise SystemExit(f"{' '.join(argv[3:])} failed ({code}) in {cwd}: {err.read().strip()[-500:]}")
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return wall, usage.ru_utime + usage.ru_stime, rows


def train_cell(tree: Path, run_dir: Path, policy: str, seed: int, threads: str, extra: tuple = ()) -> dict:
    """One cell in ``tree``'s code: wall and CPU seconds, held-out success by step, generated tokens."""
    argv = [sys.executable, "-m", "prover.cli", "train", *CELL, f"model.path={policy}", f"seed={seed}",
            f"run.dir={run_dir}", *extra]
    wall, cpu, rows = train_child(argv, tree, child_env(tree, threads), run_dir)
    train = [r for r in rows if r["phase"] == "train"]
    return {"wall_s": wall, "cpu_s": cpu,
            "eval": {str(r["step"]): r["eval/success"] for r in rows if r["phase"] == "eval"},
            "step_s": sum(r["time/step"] for r in train),
            "tokens": sum(r["cost/rollout_tokens"] + r.get("cost/branch_tokens", 0.0) for r in train)}


def measure(before: str, seeds: list[int], threads: str, policy: str | None, later_cell: bool = False) -> dict:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "before"
        subprocess.run(["git", "worktree", "add", "--detach", str(old), before], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            policy = policy or build_policy(Path(tmp) / "policy")
            seeds_out = {}
            for seed in seeds:
                print(f"[cell] seed {seed}: {before} and {head.stdout.strip()} side by side ...", flush=True)
                extra = ()
                if later_cell:  # the seed's first cell of the matrix, untimed: it fills the cache
                    extra = (f"eval.cache_dir={Path(tmp) / 'evals'}",)
                    train_cell(ROOT, Path(tmp) / f"first-{seed}", policy, seed, threads, ("steps=0", *extra))
                jobs = [(old, Path(tmp) / f"before-{seed}", ()), (ROOT, Path(tmp) / f"after-{seed}", extra)]
                with ThreadPoolExecutor(2) as pool:
                    b, a = pool.map(lambda job, s=seed: train_cell(job[0], job[1], policy, s, threads, job[2]), jobs)
                seeds_out[str(seed)] = {"before": b, "after": a}
                print(f"[cell] seed {seed}: {b['wall_s']:.0f} s before, {a['wall_s']:.0f} s after "
                      f"({a['wall_s'] / b['wall_s']:.2f}x)", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, capture_output=True)
    return {"before": before, "after": head.stdout.strip(), "threads": threads, "policy": policy,
            "cell": CELL, "later_cell": later_cell, "seeds": seeds_out}


def paired_line(diffs: list[float]) -> str:
    from prover.bench.stats import t_interval

    mean = statistics.fmean(diffs)
    if len(diffs) < 2:
        return f"{100 * mean:+.1f}"
    ci = t_interval(diffs)
    return f"{100 * mean:+.1f} [{100 * ci.lo:+.1f}, {100 * ci.hi:+.1f}]"


def curve(cell: dict) -> str:
    return ", ".join(f"{v:.3f}" for _, v in sorted(cell["eval"].items(), key=lambda kv: int(kv[0])))


def later_note(res: dict) -> list[str]:
    if not res.get("later_cell"):
        return []
    return ["", "The after tree's cell ran as a bench matrix runs a seed's later cells: the shared policy's step-0 "
            "evaluation was already in the evaluation cache (`eval.cache_dir`, filled untimed by a `steps=0` run "
            "of the after tree, as the seed's first cell fills it), so it was read, not sampled; the before tree "
            "sampled it. Its step-0 success is therefore the first cell's (`--later-cell`)."]


def table(res: dict) -> list[str]:
    """The section's markdown: each seed's seconds side by side, then the totals and the agreement check."""
    seeds = res["seeds"]
    lines = [f"benchmarks/configs/bench_pivot_12steps.yaml's prover+contrast cell (12 steps, 288 held-out episodes at "
             f"steps 0, 6, 12) at {res['before']} and at {res['after']}, both at once for each seed, "
             f"threads: {res['threads']} (`python -m benchmarks.perf.run --sections "
             f"{'later-cell' if res.get('later_cell') else 'cell'} --before {res['before']} "
             f"--cell-threads {res['threads']}`).", *later_note(res), "",
             "| seed | before s | after s | after / before (wall) | before CPU s | after CPU s | "
             "held-out success before (0, 6, 12) | after (0, 6, 12) |", "|---|---|---|---|---|---|---|---|"]
    for seed, r in seeds.items():
        b, a = r["before"], r["after"]
        lines.append(f"| {seed} | {b['wall_s']:.0f} | {a['wall_s']:.0f} | {a['wall_s'] / b['wall_s']:.2f}x | "
                     f"{b['cpu_s']:.0f} | {a['cpu_s']:.0f} | {curve(b)} | {curve(a)} |")
    wall = [sum(r[k]["wall_s"] for r in seeds.values()) for k in ("before", "after")]
    cpu = [sum(r[k]["cpu_s"] for r in seeds.values()) for k in ("before", "after")]
    lines.append(f"| **all** | **{wall[0]:.0f}** | **{wall[1]:.0f}** | **{wall[1] / wall[0]:.2f}x** | {cpu[0]:.0f} | "
                 f"{cpu[1]:.0f} ({cpu[1] / cpu[0]:.2f}x) | | |")
    steps = sorted({int(s) for r in seeds.values() for s in r["after"]["eval"]})
    diffs = {s: [r["after"]["eval"][str(s)] - r["before"]["eval"][str(s)] for r in seeds.values()] for s in steps}
    agree = "; ".join(f"step {s}: {paired_line(d)}" for s, d in diffs.items())
    lines += ["", f"Held-out success, after - before, points (mean [95% t interval] over {len(seeds)} seeds): "
              f"{agree}."]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="git revision timed beside this tree")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--threads", default="1", help="OMP_NUM_THREADS for both trees, or 'default'")
    ap.add_argument("--policy", help="warm-started policy folder (default: built here)")
    ap.add_argument("--later-cell", action="store_true", help="time the after tree's cell as a matrix's later "
                    "cell of a seed: the shared policy's step-0 evaluation already in the evaluation cache")
    ap.add_argument("--lever", help="what the two trees differ in, as the page names the comparison (e.g. "
                    "'shared prompt prefixes / none'); default: the two revisions")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "perf" / "cell.json"))
    args = ap.parse_args()
    res = measure(args.before, [int(s) for s in args.seeds.split(",")], args.threads, args.policy, args.later_cell)
    if args.lever:
        res["lever"] = args.lever
    Path(args.out).write_text(json.dumps(res, indent=1))
    print("\n".join(table(res)))


if __name__ == "__main__":
    main()
