"""``prover bench``: the argument parser (cheap to build) and the command."""

from __future__ import annotations

import argparse
import shlex
import sys

from prover.errors import Stopped
from prover.system.stopping import stop_waiting

EPILOG = """matrix fields (a YAML file and/or dotted overrides such as steps=2 seeds=[0,1] envs=[webshop-sim]
common.rollout.group_size=4 'methods=[grpo,prover+contrast]'):"""


def _epilog() -> str:
    # lazy: these load pydantic, gymnasium and scipy, and `prover --help` builds this parser
    from prover.bench.config import PowerSpec
    from prover.bench.matrix import BenchConfig, MethodSpec

    lines = [EPILOG]
    for name, f in BenchConfig.model_fields.items():
        lines.append(f"  {name}\n      {f.description}")
    for name, f in MethodSpec.model_fields.items():
        lines.append(f"  methods[].{name}\n      {f.description}")
    for name, f in PowerSpec.model_fields.items():
        lines.append(f"  power.{name}\n      {f.description}")
    lines.append("methods: a credit name (grpo, budget-matched-grpo, gigpo, spo-chain, spo-tree,\n"
                 "tree-grpo, criticsearch) or credit+judge (prover+contrast, prover+random, prover+litellm,\n"
                 "prover+local); see `prover list`.")
    return "\n".join(lines)


def add_parser(sub: argparse._SubParsersAction) -> None:
    b = sub.add_parser("bench", help="train methods x envs x seeds; write the paper's tables and curves",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_epilog())
    b.add_argument("--config", help="bench matrix YAML file (e.g. benchmarks/configs/bench_default.yaml)")
    b.add_argument("--regen-only", action="store_true", help="train nothing: rebuild results.md, the CSV "
                   "files and the curves from the cells already finished")
    b.add_argument("--verbose", action="store_true", help="also print every cell's step lines and progress")
    b.add_argument("overrides", nargs="*", help="dotted overrides of matrix fields, e.g. steps=2 seeds=[0]")
    b.set_defaults(fn=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    # lazy: the bench's rooms load pydantic, gymnasium and scipy; `prover --help` needs none
    from prover.bench.archive import restore_pilot
    from prover.bench.headline import power_lines
    from prover.bench.matrix import load_bench_config, plan
    from prover.bench.plots import curves_unavailable
    from prover.bench.runner import precision_notes, run_plan, write_reports
    from prover.bench.timing import plan_line

    bench = load_bench_config(args.config, list(args.overrides))
    cells = plan(bench)  # every name and cell config checked before any work
    restore_pilot(cells)  # a fresh bench folder takes the committed pilot, which the power lines read
    no_curves = curves_unavailable()  # known now, not after every cell has trained
    for note in [*cells.skipped, *precision_notes(cells), *([no_curves] if no_curves else [])]:
        print(f"note: {note}", flush=True)
    failed: list[str] = []
    if not args.regen_only:
        print(f"bench: {len(cells.cells)} cells in {bench.dir}", flush=True)
        print(plan_line(cells), flush=True)  # how long, before any work
        for line in power_lines(cells):  # and whether the seeds can answer the headline question
            print(line, flush=True)
        try:
            failed = run_plan(cells, echo=lambda s: print(s, flush=True), verbose=args.verbose).failed
        except KeyboardInterrupt as exc:
            stop_waiting()  # threads waiting on a server give up, so the process can exit
            stopped = isinstance(exc, Stopped)
            print(f"prover bench: {'stopped by SIGTERM' if stopped else 'interrupted'}; run the same command "
                  "again to continue (finished cells are skipped, the stopped one resumes from its last "
                  "checkpoint)", file=sys.stderr)
            return 143 if stopped else 130
    # the command that trains these cells (add --regen-only to only rebuild the tables from them)
    command = "prover bench" + (f" --config {shlex.quote(args.config)}" if args.config else "") + \
        "".join(f" {shlex.quote(o)}" for o in args.overrides)
    write_reports(cells, command, failed)
    return 1 if failed else 0
