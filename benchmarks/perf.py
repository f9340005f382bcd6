"""One performance page: every speed and cost figure of the loop, measured in one run, written to docs/perf.md.

    python benchmarks/perf.py [--sections main,verify,overhead,envs,credit,limits,prefix,cell,later-cell] [--before REV]
                              [--steps 12] [--batches 6] [--policy DIR] [--cell-seeds 0,1,2,3,4]
                              [--cell-threads 1|default] [--render]

Sections, each kept as JSON in benchmarks/results/perf/<section>.json (``--render`` rewrites the page from
them without measuring; a section run alone replaces only its own file):

- main:     the README's main job (``prover train`` with no overrides, in-process) timed phase by phase:
            building the tiny policy, the warm start's expert episodes and SFT, the two held-out evaluations,
            and the RL steps by their own phases. ``--before REV`` also runs it on a git worktree of REV with
            the same interpreter, one after the other, so the two wall times are a ratio within one run.
- verify:   benchmarks/verify_agreement.py on the main job's warm-started policy: each verification rule's
            decisions against fixed K = 32 on the same draws, and its branch tokens over rollout tokens. The
            draws are kept in verify-draws.json; ``--from-draws`` replays the rules on them (no model).
- overhead: GRPO, ProVer (verify=fixed) and ProVer (verify=adaptive) for ``--steps`` RL steps each from that
            policy, same seed and tasks: (rollout + branch) / rollout tokens and step time over GRPO's.
- envs:     benchmarks/env_speed.py: env steps/s and snapshot+restore us of every embedded env, and
            alfworld-sim against the real TextWorld engine (prover-alfworld) on the same games.
- credit:   benchmarks/credit_speed.py: each credit method's advantage time on one recorded batch.
- limits:   benchmarks/limits.py: this CPU's matrix-product peak, each phase's achieved FLOP/s against it,
            and the threads and padding levers side by side.
- prefix:   benchmarks/prefix_sharing.py: rollout-like calls of the hf engine with shared prompt prefixes
            prefilled once and without, interleaved in one process (off/on time, prefill tokens).
- cell:     benchmarks/cell_speed.py: a pivot-sim bench cell (bench_pivot_12steps' prover+contrast row) trained
            by this tree and by ``--before REV`` at once for each of ``--cell-seeds``: wall-time ratio and
            held-out success side by side (``--policy``: the warm-started policy, else built once).
- later-cell: the same, with this tree's cell timed as a bench matrix runs a seed's later cells: the shared
            policy's step-0 evaluation already in the bench's evaluation cache (``eval.cache_dir``).

The machine is shared and noisy: read ratios within a section, not seconds across sections.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "perf"
PAGE = ROOT / "docs" / "perf.md"
SECTIONS = ("main", "verify", "overhead", "envs", "credit", "limits", "prefix", "cell", "later-cell")
ASYNC = ROOT / "benchmarks" / "results" / "async_rollout.json"  # written by benchmarks/async_rollout.py
KV_CACHE = ROOT / "benchmarks" / "results" / "kv_cache.json"  # benchmarks/kv_cache.py
LEARNER_SEQUENCES = ROOT / "benchmarks" / "results" / "learner_sequences.json"  # benchmarks/learner_sequences.py


# -- main: the README's main job, phase by phase --------------------------------------------------------
def main_child(run_dir: str, out: str) -> None:
    """Run the main job in this process with clocks around its phases (``--main-child``)."""
    import prover.policy as policy
    try:
        import prover.policy.warmstart as warmstart
    except ImportError:  # a revision from before the policy package
        import prover.warmstart as warmstart
    from prover.config_load import load_config
    from prover.learner import Learner
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
    folder = args.policy or load("main")["runs"][-1]["warmstart_dir"]
    return [f"model.path={folder}", "warmstart.enabled=false"]


def section_verify(args: argparse.Namespace, keep: Path) -> dict:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from verify_agreement import measure, tabulate

    if args.from_draws:  # the rules changed, the draws did not: replay them, keep when they were drawn
        draws = RESULTS / "verify-draws.json"
        if not draws.is_file():
            raise SystemExit(f"perf: no kept draws yet ({draws}); run --sections verify without --from-draws first")
        result, previous = tabulate(json.loads(draws.read_text())), load("verify")
        result["drawn"] = previous.get("drawn") or previous["measured"]
        return result

    # the draws are kept beside the table: `verify_agreement.py --replay` measures new rules on them for free
    return measure(policy_overrides(args), batches=args.batches, save=str(RESULTS / "verify-draws.json"))


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


# -- envs and credit: the existing scripts, their tables kept as printed -------------------------------
def script_section(argv: list[str]) -> dict:
    done = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, check=True)
    lines = [x for x in done.stdout.splitlines() if "[WARNING]" not in x]  # a library's start-up notices
    return {"command": "python " + " ".join(argv), "output": "\n".join(lines).strip()}


def section_envs(args: argparse.Namespace, keep: Path) -> dict:
    return script_section(["benchmarks/env_speed.py", "--steps", "20000", "--real-steps", "300"])


def section_credit(args: argparse.Namespace, keep: Path) -> dict:
    return script_section(["benchmarks/credit_speed.py"])


def section_prefix(args: argparse.Namespace, keep: Path) -> dict:
    return script_section(["benchmarks/prefix_sharing.py"])


def section_limits(args: argparse.Namespace, keep: Path) -> dict:
    from limits import measure

    return measure(args.policy)


def section_cell(args: argparse.Namespace, keep: Path, later_cell: bool = False) -> dict:
    from cell_speed import measure

    if not args.before:
        raise SystemExit(f"perf: the {'later-' if later_cell else ''}cell section times two trees; name the older "
                         "one with --before REV")
    return measure(args.before, [int(s) for s in args.cell_seeds.split(",")], args.cell_threads, args.policy,
                   later_cell)


def section_later_cell(args: argparse.Namespace, keep: Path) -> dict:
    return section_cell(args, keep, later_cell=True)


# -- the page --------------------------------------------------------------------------------------------
def load(section: str) -> dict:
    path = RESULTS / f"{section}.json"
    if not path.is_file():
        raise SystemExit(f"perf: no results for section {section!r} yet ({path}); run it first")
    return json.loads(path.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--before", help="git revision whose main job is timed before the current tree's")
    ap.add_argument("--steps", type=int, default=12, help="RL steps per arm in the overhead section")
    ap.add_argument("--batches", type=int, default=6, help="training batches in the verify section")
    ap.add_argument("--policy", help="policy folder for verify/overhead (default: the main job's warm start)")
    ap.add_argument("--cell-seeds", default="0,1,2,3,4", help="seeds of the cell section")
    ap.add_argument("--cell-threads", default="1", help="cell: OMP_NUM_THREADS for both trees, or 'default'")
    ap.add_argument("--render", action="store_true", help="only rewrite docs/perf.md from the saved results")
    ap.add_argument("--from-draws", action="store_true", help="verify: replay the rules on the saved draws "
                    "(verify-draws.json) instead of drawing new ones")
    ap.add_argument("--main-child", nargs=2, metavar=("RUN_DIR", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.main_child:
        return main_child(*args.main_child)
    wanted = [s for s in args.sections.split(",") if s]
    unknown = sorted(set(wanted) - set(SECTIONS))
    if unknown:
        raise SystemExit(f"perf: unknown section(s) {unknown}; choose from {list(SECTIONS)}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    keep = ROOT / "runs" / "perf"
    keep.mkdir(parents=True, exist_ok=True)
    for section in [] if args.render else wanted:
        t0 = time.perf_counter()
        result = globals()[f"section_{section.replace('-', '_')}"](args, keep)
        result["measured"] = {"seconds": time.perf_counter() - t0, "date": time.strftime("%Y-%m-%d %H:%M UTC",
                              time.gmtime()), "load_avg_1m": os.getloadavg()[0], "cpus": os.cpu_count(),
                              "python": platform.python_version()}
        (RESULTS / f"{section}.json").write_text(json.dumps(result, indent=1))
    write_page()
    print(PAGE.read_text().split("\n## ")[0])


def saved_results() -> dict:
    """Every saved section, main_job_recipes.py's runs, and the results of sft_levers.py, async_rollout.py and
    the real-model scripts (chat_step.py, kv_cache.py, learner_sequences.py, bf16.py, llama_vs_hf.py), where
    they exist."""
    results = {s: json.loads((RESULTS / f"{s}.json").read_text())
               for s in (*SECTIONS, "recipes", "sft_levers", "chat-step", "chat-step-bf16", "bf16", "llama-vs-hf",
                         "branch-prefill")
               if (RESULTS / f"{s}.json").is_file()}
    for name, path in (("async", ASYNC), ("kv-cache", KV_CACHE), ("learner-sequences", LEARNER_SEQUENCES)):
        if path.is_file():
            results[name] = json.loads(path.read_text())
    return results


def write_page() -> None:
    """docs/perf.md from the saved results."""
    from perf_page import render

    PAGE.write_text(render(saved_results()))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
