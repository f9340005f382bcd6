"""Does adaptive verification decide as a large fixed K would, and what does it save?

    python benchmarks/verify_agreement.py [--batches 6] [--ref-k 32] [overrides ...]
    python benchmarks/verify_agreement.py env.name=pivot-sim model.path=runs/bench-pivot/cells/.../step-12

It builds the policy the overrides describe (by default the tiny alfworld-sim policy of `prover train`,
warm-started), plays ``--batches`` training batches with snapshots, and asks the judge for its proposals.
Every proposal of a batch is then verified under each rule below on the same batch, the same proposals
and the same seeds: the reference (fixed, K = ``--ref-k``) and the candidates. For each candidate it
prints the share of proposals whose decision (Delta > 0) agrees with the reference, the mean absolute
error of its Delta against the reference's, and the boundary continuations it drew per proposal.

Two comparisons, both against the reference's decision:

- **same draws** (coupled): the reference's continuations are recorded per boundary, in order, and each
  rule is replayed on them (a rule asking for n more continuations of a boundary gets its next n recorded
  ones; free samples come first, so they replace draws). Disagreement is then due to the rule alone:
  stopping early, a smaller K, or free samples that differ from branched ones.
- **new draws** (``--new-draws``): each rule draws its own continuations, as in training. Continuations
  are random draws of the current policy, so the reference is itself an estimate (its Delta has a standard
  error of up to 0.125 with K = 32) and part of this disagreement is the reference's own noise.

The token column is branch tokens over rollout tokens on the same batches: the ``(rollout + branch) /
rollout`` ratio of a run is one plus it.
"""

from __future__ import annotations

import argparse
import tempfile
from types import SimpleNamespace

import numpy as np

from prover.config import load_config
from prover.credit.verification import Tally, p_post_greater
from prover.progress import Reporter
from prover.seeding import derive_seed
from prover.trainer import Trainer, task_seeds

RULES = {  # name -> credit overrides (K is credit.samples); replaying recorded draws costs no generation
    "fixed K=8": {"verify": "fixed", "samples": 8},
    "fixed K=16": {"verify": "fixed", "samples": 16},
    "adaptive K=8": {"verify": "adaptive", "samples": 8},
    "adaptive K=8 free": {"verify": "adaptive", "samples": 8, "free_samples": True},
    "adaptive K=16, rounds of 1": {"verify": "adaptive", "samples": 16, "round_size": 1},
    "adaptive K=32, rounds of 1": {"verify": "adaptive", "samples": 32, "round_size": 1},
    "adaptive K=32, rounds of 2": {"verify": "adaptive", "samples": 32, "round_size": 2},
    "adaptive K=32, rounds of 4": {"verify": "adaptive", "samples": 32, "round_size": 4},
    "adaptive K=32, rounds of 1, confidence 0.9": {"verify": "adaptive", "samples": 32, "round_size": 1,
                                                   "confidence": 0.9},
    "adaptive K=32, rounds of 1, confidence 0.99": {"verify": "adaptive", "samples": 32, "round_size": 1,
                                                    "confidence": 0.99},
    "adaptive K=32 free, rounds of 1": {"verify": "adaptive", "samples": 32, "free_samples": True, "round_size": 1},
}


class Recorder:
    """Wraps the Brancher: records every boundary's continuations (won, tokens) in the order drawn."""

    def __init__(self, brancher) -> None:
        self.brancher, self.draws, self.tallies = brancher, {}, []

    def continue_from(self, requests, seed=0, **kwargs):
        results = self.brancher.continue_from(requests, seed=seed, **kwargs)
        for r, res in zip(requests, results):
            tokens = [sum(t.n_tokens for t in tr.turns[r.turn:]) for tr in res.trajectories]
            self.draws.setdefault((id(r.trajectory), r.turn), []).extend(zip(res.won.tolist(), tokens))
            self.tallies.append(Tally(int(res.won.sum()), len(res.won)))  # before, after, before, ...
        return results


class Replay:
    """A Brancher that hands out recorded continuations: a boundary's next n, in recorded order."""

    def __init__(self, draws: dict) -> None:
        self.draws, self.cursor, self.continuations, self.tokens = draws, {}, 0, 0

    def continue_from(self, requests, seed=0, **_):
        out = []
        for r in requests:
            key = (id(r.trajectory), r.turn)
            start = self.cursor.get(key, 0)
            got = self.draws[key][start:start + r.n]
            if len(got) < r.n:
                raise ValueError("a rule asked for more continuations than the reference drew (K > --ref-k)")
            self.cursor[key] = start + r.n
            self.continuations += r.n
            self.tokens += sum(t for _, t in got)
            out.append(SimpleNamespace(won=np.array([w for w, _ in got], dtype=bool)))
        return out


def verified(trainer: Trainer, batch, settings: dict, brancher) -> tuple[list, float, float]:
    """The batch's checked segments under ``settings`` with ``brancher``, the continuations and tokens drawn."""
    credit, ctx = trainer.credit, trainer.ctx
    saved, saved_brancher = credit.config, ctx.brancher
    credit.config, ctx.brancher = saved.model_copy(update=settings), brancher
    try:
        adv = credit.assign(batch, ctx)
    finally:
        credit.config, ctx.brancher = saved, saved_brancher
    if isinstance(brancher, Replay):
        drawn, tokens = brancher.continuations, brancher.tokens
    else:
        counts = trainer.brancher.take_counts()
        drawn, tokens = counts["cost/branch_continuations"], counts["cost/branch_tokens"]
    return [s for s in adv.segments if s.delta is not None], drawn, tokens


def measure(overrides: list[str], batches: int = 6, ref_k: int = 32, new_draws: bool = False,
            rules: dict | None = None) -> dict:
    """Play ``batches`` training batches and verify every proposal under each rule; the numbers of the table."""
    ref_name = f"fixed K={ref_k} (reference)"
    rules = {ref_name: {"verify": "fixed", "samples": ref_k}, **(RULES if rules is None else rules)}
    modes = ["same draws"] + (["new draws"] if new_draws else [])
    rows = {(m, name): [] for m in modes for name in rules}  # (accepted, delta) of every proposal, in order
    drawn, tokens, rollout_tokens = {key: 0.0 for key in rows}, {key: 0.0 for key in rows}, 0.0
    sure: list[float] = []  # per proposal: P(V_post > V_pre) given the reference's K draws at each end
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(None, ["credit.name=prover", "judge.name=contrast", *overrides, f"run.dir={tmp}"])
        trainer = Trainer(cfg, reporter=Reporter(quiet=True))
        for b in range(1, batches + 1):
            trainer.ctx.step = b
            batch = trainer.rollout.run(task_seeds(cfg, b), cfg.rollout.group_size, split="train",
                                        seed=derive_seed(cfg.seed, b, "rollout"), record_snapshots=True)
            rollout_tokens += sum(t.n_tokens for t in batch.turns())
            recorder = Recorder(trainer.brancher)
            for mode in modes:
                for name, settings in rules.items():
                    if mode == "new draws" and name == ref_name:  # the reference is the recorded draw
                        continue
                    same = recorder if name == ref_name else Replay(recorder.draws)
                    segs, n, t = verified(trainer, batch, settings, same if mode == "same draws" else trainer.brancher)
                    if name == ref_name:
                        trainer.brancher.take_counts()
                    rows[mode, name] += [(s.accepted, s.delta) for s in segs]
                    if name == ref_name:  # the reference's own confidence in its decision, per proposal
                        pairs = recorder.tallies[-2 * len(segs):] if segs else []
                        sure += [p_post_greater(pre, post) for pre, post in zip(pairs[::2], pairs[1::2])]
                    drawn[mode, name] += n
                    tokens[mode, name] += t
            print(f"batch {b}/{batches}: {len(rows['same draws', ref_name])} verified proposals so far", flush=True)
        trainer.close()
    ref = rows["same draws", ref_name]
    n = len(ref)
    decisive = [p > 0.95 or p < 0.05 for p in sure]  # the reference itself is 95% sure of its decision
    table = []
    for name in rules:
        for mode in (modes if name != ref_name else modes[:1]):
            got = rows[mode, name]
            table.append({
                "rule": name, "draws": mode, "settings": rules[name],
                "agreement": float(np.mean([a == r for (a, _), (r, _) in zip(got, ref)])) if n else float("nan"),
                "agreement_decisive": float(np.mean([a == r for (a, _), (r, _), d in zip(got, ref, decisive) if d]))
                if any(decisive) else float("nan"),
                "delta_error": float(np.mean([abs(d - rd) for (_, d), (_, rd) in zip(got, ref)])) if n else float("nan"),
                "continuations_per_proposal": drawn[mode, name] / n if n else float("nan"),
                "branch_over_rollout_tokens": tokens[mode, name] / rollout_tokens if rollout_tokens else float("nan")})
    return {"proposals": n, "decisive": int(sum(decisive)), "ref_k": ref_k, "batches": batches, "rollout_tokens": rollout_tokens,
            "overrides": overrides, "table": table}


def markdown(result: dict) -> str:
    lines = [f"{result['proposals']} proposals on {result['batches']} batches; reference: fixed K={result['ref_k']}. "
             f"On {result['decisive']} of them the reference is itself at least 95% sure of its decision (the "
             "Beta posteriors of its K draws at each end give P(V_post > V_pre) above 0.95 or below 0.05); the rest "
             "are near-ties, whose K=32 decision a single draw can flip.",
             "", "| rule | draws | agrees with the reference | on its sure decisions | mean abs. Delta error "
             "| continuations per proposal | branch / rollout tokens |", "|---|---|---|---|---|---|---|"]
    for r in result["table"]:
        lines.append(f"| {r['rule']} | {r['draws']} | {100 * r['agreement']:.1f}% "
                     f"| {100 * r['agreement_decisive']:.1f}% | {r['delta_error']:.3f} "
                     f"| {r['continuations_per_proposal']:.1f} | {r['branch_over_rollout_tokens']:.3f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--ref-k", type=int, default=32)
    parser.add_argument("--new-draws", action="store_true", help="also let each rule draw its own continuations")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    print(markdown(measure(args.overrides, args.batches, args.ref_k, args.new_draws)))


if __name__ == "__main__":
    main()
