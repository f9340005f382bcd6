"""Does adaptive verification decide as a large fixed K would, and what does it save?

    python -m benchmarks.studies.verify_agreement [--batches 6] [--ref-k 32] [--save FILE] [overrides ...]
    python -m benchmarks.studies.verify_agreement --replay FILE
    python -m benchmarks.studies.verify_agreement env.name=pivot-sim model.path=runs/bench-pivot/cells/.../step-12

It builds the policy the overrides describe (by default the tiny alfworld-sim policy of `prover train`,
warm-started), plays ``--batches`` training batches with snapshots, asks the judge for its proposals and
verifies every one with the reference rule (fixed, K = ``--ref-k``), recording each boundary's
continuations in the order drawn: whether each won and the tokens it generated, with the group's
outcomes and state keys (the free samples' inputs). ``--save`` writes that record as JSON; ``--replay``
reads one back and measures without a model.

Every rule is then replayed on the recorded draws (coupled, "same draws"): a rule asking for n more
continuations of a boundary gets its next n recorded ones, and free samples come first, so they replace
draws. Disagreement with the reference is then due to the rule alone: stopping early, a smaller K, or
free samples that differ from branched ones. For each rule it prints the share of proposals whose
decision (Delta > 0) agrees with the reference, the same share on the proposals where the reference
itself is sure (its Beta posteriors give P(V_post > V_pre) above 0.95 or below 0.05; the rest are
near-ties whose K = 32 decision one draw can flip), the mean absolute error of its Delta, and the
continuations it drew per proposal.

``--new-draws`` also lets each rule draw its own continuations of the same proposals, as in training.
The reference is then itself an estimate (its Delta has a standard error of up to 0.125 with K = 32),
and part of that disagreement is the reference's own noise.

The token column is branch tokens over rollout tokens on the same batches: the ``(rollout + branch) /
rollout`` ratio of a run is one plus it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np

import prover.credit.prover as prover_credit
from prover.config_load import load_config
from prover.credit.prover import ProVerConfig
from prover.credit.verification import Boundaries, Tally, p_post_greater, verify
from prover.progress import Reporter
from prover.seeding import derive_seed
from prover.trainer import Trainer, task_seeds

RULES = {  # name -> credit overrides (K is credit.samples); replaying recorded draws costs no generation
    "fixed K=8": {"verify": "fixed", "samples": 8},
    "fixed K=16": {"verify": "fixed", "samples": 16},
    "adaptive K=8": {"verify": "adaptive", "samples": 8},
    "adaptive K=8, saturation": {"verify": "adaptive", "samples": 8, "saturation": True},
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
    """Wraps the Brancher: keeps every boundary's continuations (won, tokens) in the order drawn."""

    def __init__(self, brancher) -> None:
        self.brancher, self.draws = brancher, {}

    def continue_from(self, requests, seed=0, **kwargs):
        results = self.brancher.continue_from(requests, seed=seed, **kwargs)
        for r, res in zip(requests, results):
            tokens = [sum(t.n_tokens for t in tr.turns[r.turn:]) for tr in res.trajectories]
            self.draws.setdefault((id(r.trajectory), r.turn), []).extend(zip(res.won.tolist(), tokens))
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
            out.append(SimpleNamespace(won=np.array([w for w, _ in got], dtype=bool), policy_version=None))
        return out


def state_digest(key) -> str:
    """A short stand-in for a state key: equal keys give equal digests (keys are tuples, strings, numbers)."""
    return hashlib.sha1(repr(key).encode()).hexdigest()[:12]


def proposal_record(b: Boundaries, draws: dict) -> dict:
    """One verified proposal as JSON: the group (outcomes, state keys), the target, the boundary turns and
    each boundary's recorded continuations."""
    target = b.group.trajectories[b.target]
    return {"target": b.target, "turns": list(b.turns),
            "group": [{"won": bool(tr.won), "keys": [state_digest(t.state_key) for t in tr.turns]}
                      for tr in b.group.trajectories],
            "draws": [[list(d) for d in draws[id(target), turn]] for turn in b.turns]}


def run_rule(brancher, segments: list[Boundaries], settings: dict) -> list:
    """The verdicts of one rule on fresh tallies of ``segments``, every other setting at the credit default."""
    fresh = [Boundaries(b.group, b.target, b.turns) for b in segments]
    return verify(brancher, fresh, seed=0, **ProVerConfig().model_copy(update=settings).verify_kwargs())


VERIFY_FIELDS = ("samples", "verify", "round_size", "confidence", "free_samples", "saturation")


def record(overrides: list[str], batches: int = 6, ref_k: int = 32, new_rules: dict | None = None) -> dict:
    """Play ``batches`` training batches and verify their proposals with fixed K = ``ref_k``, keeping every
    draw; with ``new_rules``, each of them also verifies the same proposals on draws of its own."""
    captured: list[Boundaries] = []
    real_verify = prover_credit.verify

    def capture(brancher, segments, **kwargs):  # credit.assign's verify: keep the segments it was given
        captured.extend(segments)
        return real_verify(brancher, segments, **kwargs)

    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(None, ["credit.name=prover", "judge.name=contrast", *overrides, f"run.dir={tmp}"])
        trainer = Trainer(cfg, reporter=Reporter(quiet=True))
        credit, ctx = trainer.credit, trainer.ctx
        run_settings = {k: getattr(credit.config, k) for k in VERIFY_FIELDS}
        credit.config = credit.config.model_copy(update={"verify": "fixed", "samples": ref_k, "free_samples": False})
        out = {"ref_k": ref_k, "overrides": overrides, "credit": run_settings, "batches": [],
               "new_draws": {name: {"verdicts": [], "continuations": 0, "tokens": 0} for name in new_rules or {}}}
        prover_credit.verify = capture
        try:
            for b in range(1, batches + 1):
                ctx.step = b
                batch = trainer.rollout.run(task_seeds(cfg, b), cfg.rollout.group_size, split="train",
                                            seed=derive_seed(cfg.seed, b, "rollout"), record_snapshots=True)
                captured.clear()
                ctx.brancher = recorder = Recorder(trainer.brancher)
                credit.assign(batch, ctx)
                ctx.brancher = trainer.brancher
                trainer.brancher.take_counts()
                out["batches"].append({"rollout_tokens": sum(t.n_tokens for t in batch.turns()),
                                       "proposals": [proposal_record(s, recorder.draws) for s in captured]})
                for name, settings in (new_rules or {}).items():
                    verdicts = run_rule(trainer.brancher, captured, {**run_settings, **settings})
                    counts, kept = trainer.brancher.take_counts(), out["new_draws"][name]
                    kept["verdicts"] += [[v.accepted, v.delta] for v in verdicts]
                    kept["continuations"] += counts["cost/branch_continuations"]
                    kept["tokens"] += counts["cost/branch_tokens"]
                n = sum(len(x["proposals"]) for x in out["batches"])
                print(f"batch {b}/{batches}: {n} verified proposals so far", flush=True)
        finally:
            prover_credit.verify = real_verify
            trainer.close()
    return out


def replay(rec: dict, settings: dict) -> tuple[list, int, int]:
    """One rule on the recorded draws: its (accepted, Delta) per proposal, continuations and tokens drawn."""
    verdicts, drawn, tokens = [], 0, 0
    for batch in rec["batches"]:
        segments, draws = [], {}
        for p in batch["proposals"]:  # stand-ins with what verify reads: outcomes and state keys
            trs = [SimpleNamespace(won=g["won"], turns=[SimpleNamespace(state_key=k) for k in g["keys"]])
                   for g in p["group"]]
            for turn, d in zip(p["turns"], p["draws"]):
                draws[id(trs[p["target"]]), turn] = [tuple(x) for x in d]
            segments.append(Boundaries(SimpleNamespace(trajectories=trs), p["target"], tuple(p["turns"])))
        brancher = Replay(draws)
        verdicts += [(v.accepted, v.delta) for v in run_rule(brancher, segments, {**rec["credit"], **settings})]
        drawn, tokens = drawn + brancher.continuations, tokens + brancher.tokens
    return verdicts, drawn, tokens


def reference_sure(rec: dict) -> list[bool]:
    """Per proposal: is the reference itself at least 95% sure of its decision (Beta(1, 1) priors)?"""
    def tally(d: list) -> Tally:
        counted = Tally()
        counted.add([w for w, _ in d])
        return counted
    ps = [p_post_greater(tally(p["draws"][0]), tally(p["draws"][1])) for b in rec["batches"] for p in b["proposals"]]
    return [p > 0.95 or p < 0.05 for p in ps]


def row(name: str, mode: str, settings: dict, got: list, ref: list, sure: list[bool], drawn: float,
        tokens: float, rollout_tokens: float) -> dict:
    n = len(ref)
    agree = [bool(a) == bool(r) for (a, _), (r, _) in zip(got, ref)]
    return {"rule": name, "draws": mode, "settings": settings,
            "agreement": float(np.mean(agree)) if n else float("nan"),
            "agreement_decisive": float(np.mean([a for a, s in zip(agree, sure) if s])) if any(sure) else float("nan"),
            "delta_error": float(np.mean([abs(d - rd) for (_, d), (_, rd) in zip(got, ref)])) if n else float("nan"),
            "continuations_per_proposal": drawn / n if n else float("nan"),
            "branch_over_rollout_tokens": tokens / rollout_tokens if rollout_tokens else float("nan")}


def tabulate(rec: dict, rules: dict | None = None) -> dict:
    """The table: every rule replayed on the recorded draws, then any new-draws results, against the reference."""
    ref_name = f"fixed K={rec['ref_k']} (reference)"
    rules = {ref_name: {"verify": "fixed", "samples": rec["ref_k"], "free_samples": False},
             **(RULES if rules is None else rules)}
    replayed = {name: replay(rec, settings) for name, settings in rules.items()}
    ref, sure = replayed[ref_name][0], reference_sure(rec)
    rollout_tokens = float(sum(b["rollout_tokens"] for b in rec["batches"]))
    table = [row(name, "same draws", rules[name], got, ref, sure, drawn, tokens, rollout_tokens)
             for name, (got, drawn, tokens) in replayed.items()]
    table += [row(name, "new draws", rules.get(name, {}), [tuple(v) for v in got["verdicts"]], ref, sure,
                  got["continuations"], got["tokens"], rollout_tokens) for name, got in rec["new_draws"].items()]
    return {"proposals": len(ref), "decisive": int(sum(sure)), "ref_k": rec["ref_k"], "batches": len(rec["batches"]),
            "rollout_tokens": rollout_tokens, "overrides": rec["overrides"], "table": table}


def measure(overrides: list[str], batches: int = 6, ref_k: int = 32, new_draws: bool = False,
            save: str | None = None) -> dict:
    """Record ``batches`` batches (optionally saved as JSON) and tabulate every rule on them."""
    rec = record(overrides, batches, ref_k, RULES if new_draws else None)
    if save:
        Path(save).write_text(json.dumps(rec))
    return tabulate(rec)


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
    parser.add_argument("--save", metavar="FILE", help="write the recorded draws as JSON")
    parser.add_argument("--replay", metavar="FILE", help="measure on draws saved with --save (no model)")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    if args.replay:
        try:
            rec = json.loads(Path(args.replay).read_text())
        except (OSError, ValueError) as exc:
            raise SystemExit(f"verify_agreement: cannot read {args.replay}: {exc}") from exc
        print(markdown(tabulate(rec)))
        return
    print(markdown(measure(args.overrides, args.batches, args.ref_k, args.new_draws, args.save)))


if __name__ == "__main__":
    main()
