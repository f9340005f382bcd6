"""Does adaptive verification decide as a large fixed K would, and what does it save?

    python benchmarks/verify_agreement.py [--batches 6] [--ref-k 32] [overrides ...]
    python benchmarks/verify_agreement.py env.name=pivot-sim model.path=runs/bench-pivot/cells/.../step-12

It builds the policy the overrides describe (by default the tiny alfworld-sim policy of `prover train`,
warm-started), plays ``--batches`` training batches with snapshots, and asks the judge for its proposals.
Every proposal of a batch is then verified under each rule below on the same batch, the same proposals
and the same seeds: the reference (fixed, K = ``--ref-k``) and the candidates. For each candidate it
prints the share of proposals whose decision (Delta > 0) agrees with the reference, the mean absolute
error of its Delta against the reference's, and the boundary continuations it drew per proposal.

Continuations are random draws of the current policy, so the reference is itself an estimate: with K = 32
its Delta has a standard error of up to 0.125 (two means of 32 Bernoulli draws).
"""

from __future__ import annotations

import argparse
import tempfile

import numpy as np

from prover.config import load_config
from prover.progress import Reporter
from prover.seeding import derive_seed
from prover.trainer import Trainer, task_seeds

RULES = {  # name -> credit overrides (K is credit.samples)
    "fixed K=8": {"verify": "fixed", "samples": 8},
    "adaptive K=8": {"verify": "adaptive", "samples": 8},
    "adaptive K=8 free": {"verify": "adaptive", "samples": 8, "free_samples": True},
    "adaptive K=16 free": {"verify": "adaptive", "samples": 16, "free_samples": True},
    "adaptive K=32 free": {"verify": "adaptive", "samples": 32, "free_samples": True},
}


def verified(trainer: Trainer, batch, settings: dict) -> tuple[list, float]:
    """The batch's checked segments under ``settings``, and the continuations it drew."""
    credit = trainer.credit
    saved = credit.config
    credit.config = saved.model_copy(update=settings)
    try:
        adv = credit.assign(batch, trainer.ctx)
    finally:
        credit.config = saved
    drawn = trainer.brancher.take_counts()["cost/branch_continuations"]
    return [s for s in adv.segments if s.delta is not None], drawn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--ref-k", type=int, default=32)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    rules = {f"fixed K={args.ref_k} (reference)": {"verify": "fixed", "samples": args.ref_k}, **RULES}
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(None, ["credit.name=prover", "judge.name=contrast", *args.overrides, f"run.dir={tmp}"])
        trainer = Trainer(cfg, reporter=Reporter(quiet=True))
        rows = {name: [] for name in rules}  # per rule: (accepted, delta) of every proposal, in order
        drawn = {name: 0.0 for name in rules}
        for b in range(1, args.batches + 1):
            trainer.ctx.step = b
            batch = trainer.rollout.run(task_seeds(cfg, b), cfg.rollout.group_size, split="train",
                                        seed=derive_seed(cfg.seed, b, "rollout"), record_snapshots=True)
            for name, settings in rules.items():
                segs, n = verified(trainer, batch, settings)
                rows[name] += [(s.accepted, s.delta) for s in segs]
                drawn[name] += n
            print(f"batch {b}/{args.batches}: {len(segs)} verified proposals", flush=True)
        trainer.close()
    report(rules, rows, drawn, args.ref_k)


def report(rules: dict, rows: dict, drawn: dict, ref_k: int) -> None:
    ref_name = next(iter(rules))
    ref = rows[ref_name]
    n = len(ref)
    print(f"\n{n} proposals; reference: fixed K={ref_k}\n")
    print("| rule | agrees with the reference | mean abs. Delta error | continuations per proposal |")
    print("|---|---|---|---|")
    for name in rules:
        got = rows[name]
        agree = np.mean([a == r for (a, _), (r, _) in zip(got, ref)]) if n else float("nan")
        err = np.mean([abs(d - rd) for (_, d), (_, rd) in zip(got, ref)]) if n else float("nan")
        per = drawn[name] / n if n else float("nan")
        print(f"| {name} | {100 * agree:.1f}% | {err:.3f} | {per:.1f} |")


if __name__ == "__main__":
    main()
