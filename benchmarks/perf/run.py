"""One performance page: every speed and cost figure of the loop, measured in one run, written to docs/perf.md
(by benchmarks.perf.page, the one module that writes it).

    python -m benchmarks.perf.run [--sections main,verify,overhead,envs,credit,limits,prefix,cell,later-cell]
                                  [--before REV] [--steps 12] [--batches 6] [--policy DIR]
                                  [--cell-seeds 0,1,2,3,4] [--cell-threads 1|default]
    python -m benchmarks.perf.page --render        # the page from the saved results, measuring nothing

Sections, each kept as JSON in benchmarks/results/perf/<section>.json (a section run alone replaces only its
own file; the page is then rewritten from every saved result):

- main:     benchmarks.perf.main_job: the README's main job (``prover train`` with no overrides,
            in-process) timed phase by phase: building the tiny policy, the warm start's expert episodes and
            SFT, the two held-out evaluations, and the RL steps by their own phases. ``--before REV`` also
            runs it on a git worktree of REV with the same interpreter, both at once (one core each), so the
            two wall times are a ratio within one run.
- verify:   benchmarks.studies.verify_agreement on the main job's warm-started policy: each verification rule's
            decisions against fixed K = 32 on the same draws, and its branch tokens over rollout tokens. The
            draws are kept in verify-draws.json; ``--from-draws`` replays the rules on them (no model).
- overhead: benchmarks.perf.main_job: GRPO, ProVer (verify=fixed) and ProVer (verify=adaptive) for
            ``--steps`` RL steps each from that policy, same seed and tasks: (rollout + branch) / rollout
            tokens and step time over GRPO's.
- envs:     benchmarks.perf.env_speed: env steps/s and snapshot+restore us of every embedded env, and
            alfworld-sim against the real TextWorld engine (prover-alfworld) on the same games.
- credit:   benchmarks.perf.credit_speed: each credit method's advantage time on one recorded batch.
- limits:   benchmarks.perf.limits: this CPU's matrix-product peak, each phase's achieved FLOP/s against it,
            and the threads and padding levers side by side.
- prefix:   benchmarks.perf.prefix_sharing: rollout-like calls of the hf engine with shared prompt prefixes
            prefilled once and without, interleaved in one process (off/on time, prefill tokens).
- cell:     benchmarks.perf.cell_speed: a pivot-sim bench cell (bench_pivot_12steps' prover+contrast row) trained
            by this tree and by ``--before REV`` at once for each of ``--cell-seeds``: wall-time ratio and
            held-out success side by side (``--policy``: the warm-started policy, else built once).
- later-cell: the same, with this tree's cell timed as a bench matrix runs a seed's later cells: the shared
            policy's step-0 evaluation already in the bench's evaluation cache (``eval.cache_dir``).

The machine is shared and noisy: read ratios within a section, not seconds across sections.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.perf.main_job import policy_overrides, section_main, section_overhead
from benchmarks.perf.page import PAGE, write_page
from benchmarks.perf.results import RESULTS, ROOT, SECTIONS, load, stamp

MEASURE = {"main": section_main, "overhead": section_overhead}  # the rest: section_<name> below


# -- verify: the verification rules on the main job's warm-started policy -------------------------------
def section_verify(args: argparse.Namespace, keep: Path) -> dict:
    from benchmarks.studies.verify_agreement import measure, tabulate

    if args.from_draws:  # the rules changed, the draws did not: replay them, keep when they were drawn
        draws = RESULTS / "verify-draws.json"
        if not draws.is_file():
            raise SystemExit(f"perf: no kept draws yet ({draws}); run --sections verify without --from-draws first")
        result, previous = tabulate(json.loads(draws.read_text())), load("verify")
        result["drawn"] = previous.get("drawn") or previous["measured"]
        return result

    # the draws are kept beside the table: `verify_agreement.py --replay` measures new rules on them for free
    return measure(policy_overrides(args), batches=args.batches, save=str(RESULTS / "verify-draws.json"))


# -- envs and credit: the existing scripts, their tables kept as printed -------------------------------
def script_section(argv: list[str]) -> dict:
    done = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, check=True)
    lines = [x for x in done.stdout.splitlines() if "[WARNING]" not in x]  # a library's start-up notices
    return {"command": "python " + " ".join(argv), "output": "\n".join(lines).strip()}


def section_envs(args: argparse.Namespace, keep: Path) -> dict:
    return script_section(["-m", "benchmarks.perf.env_speed", "--steps", "20000", "--real-steps", "300"])


def section_credit(args: argparse.Namespace, keep: Path) -> dict:
    return script_section(["-m", "benchmarks.perf.credit_speed"])


def section_prefix(args: argparse.Namespace, keep: Path) -> dict:
    return script_section(["-m", "benchmarks.perf.prefix_sharing"])


def section_limits(args: argparse.Namespace, keep: Path) -> dict:
    from benchmarks.perf.limits import measure

    return measure(args.policy)


def section_cell(args: argparse.Namespace, keep: Path, later_cell: bool = False) -> dict:
    from benchmarks.perf.cell_speed import measure

    if not args.before:
        raise SystemExit(f"perf: the {'later-' if later_cell else ''}cell section times two trees; name the older "
                         "one with --before REV")
    return measure(args.before, [int(s) for s in args.cell_seeds.split(",")], args.cell_threads, args.policy,
                   later_cell)


def section_later_cell(args: argparse.Namespace, keep: Path) -> dict:
    return section_cell(args, keep, later_cell=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--before", help="git revision whose main job is timed before the current tree's")
    ap.add_argument("--steps", type=int, default=12, help="RL steps per arm in the overhead section")
    ap.add_argument("--batches", type=int, default=6, help="training batches in the verify section")
    ap.add_argument("--policy", help="policy folder for verify/overhead (default: the main job's warm start)")
    ap.add_argument("--cell-seeds", default="0,1,2,3,4", help="seeds of the cell section")
    ap.add_argument("--cell-threads", default="1", help="cell: OMP_NUM_THREADS for both trees, or 'default'")
    ap.add_argument("--from-draws", action="store_true", help="verify: replay the rules on the saved draws "
                    "(verify-draws.json) instead of drawing new ones")
    args = ap.parse_args()
    wanted = [s for s in args.sections.split(",") if s]
    unknown = sorted(set(wanted) - set(SECTIONS))
    if unknown:
        raise SystemExit(f"perf: unknown section(s) {unknown}; choose from {list(SECTIONS)}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    keep = ROOT / "runs" / "perf"
    keep.mkdir(parents=True, exist_ok=True)
    for section in wanted:
        t0 = time.perf_counter()
        measure = MEASURE.get(section) or globals()[f"section_{section.replace('-', '_')}"]
        result = measure(args, keep)
        result["measured"] = stamp(time.perf_counter() - t0)
        (RESULTS / f"{section}.json").write_text(json.dumps(result, indent=1))
    write_page()
    print(PAGE.read_text().split("\n## ")[0])


if __name__ == "__main__":
    main()
