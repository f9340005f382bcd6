"""ProVer: a judge proposes the segment that made a success, continuations verify it, GRPO gets a bonus.

    A_i          = R_i - mean_g R                       GRPO advantage (norm="mean", see grpo.py)
    eligible g   : 1 <= wins(g) <= 3 and at least one failure; target i* = the shortest success
    (l, r)       = judge.propose(tau_i*, failed runs)   at most L = 4 turns, non-terminal, valid actions
    Delta        = mean_k won(continuation k from s_{r+1}) - mean_k won(continuation k from s_l)   (K = 8 each)
    A_{i*,t,k}   = A_i* + lambda * Delta * c            for every token k of turns t in [l, r], if Delta > 0
    A_{i,t,k}    = A_i                                  every other token of the batch
    c            = reward.scale (bonus_units="reward") or 1 (bonus_units="success")

Paper: ProVer (Propose, Verify, Credit), arXiv 2609.36178: the segment as one temporally extended
action with advantage V(s_post) - V(s_pre), its Monte-Carlo estimate (conditionally unbiased,
Appendix B) and the positive-only credit rule; we work from the summary in
docs/methods/prover.md (the PDF itself was not readable here).

Departures and choices (all switches):
1. Bonus units. The paper's rewards are binary, so its GRPO advantage R_i - mean and its Delta (a
   difference of success probabilities) share one unit. Our scores are ``reward.scale * return``
   (verl-agent's 10 * won), so the default multiplies the bonus by ``reward.scale`` to keep the
   paper's ratio of bonus to advantage; ``bonus_units="success"`` adds lambda * Delta as written. With
   ``norm="std"`` the GRPO advantage is in units of the group's std and neither choice matches it
   exactly (docs/methods/prover.md); the paper centres without std, our default here.
2. Delta counts wins of the continuations (the paper's success probability), not their partial-credit
   reward (webshop-sim's score), which still enters the GRPO term through R_i.
3. Eligibility scales with the group size. The paper's "1-3 wins of 8" is read as shares of the group,
   rounded inwards, with at least one win and one failure ("mixed-outcome"): 1-1 of 4, 1-2 of 6, 1-3
   of 8, 2-6 of 16 (``win_range`` in credit/base.py; ``eligible_of=null`` takes absolute counts). Read
   literally at G = 4, 1-3 wins would admit 3-of-4 groups, whose one failure is a far weaker contrast
   than the paper's; config.yaml records the effective range.
4. Every proposal is re-checked here with ``validate_segment``, whatever judge made it (LLM judges also
   repair their own); a proposal that fails is dropped and counted, and that group keeps plain GRPO.
5. All verifications of a step are one Brancher call (2 * K continuations per valid proposal), and all
   proposals one ``propose_all`` call, so LLM judges can run concurrently. ``verify=adaptive`` (rounds
   that stop once the decision is settled) and ``free_samples`` (the group's own runs through a boundary
   state count towards K) are ours, not the paper's: credit/verification.py. Continuations never enter
   the training batch; their tokens are counted by the Brancher as cost/branch_tokens.
6. Under asynchronous rollouts (``rollout.max_off_policy_steps`` = k), step s's segments were sampled by
   policy version s-1-k and are verified with continuations of version s-1, the learner's, whose update the
   bonus steers; each checked segment records both (``sampled_version``, ``verify_version``;
   prover/episodes/async_rollout.py). Free samples are the group's own runs, of version s-1-k.
"""

from __future__ import annotations

import random
from typing import Literal, NamedTuple

import numpy as np
from pydantic import Field, field_validator

from prover.credit.base import CreditContext, WinRangeConfig, broadcast, in_win_range
from prover.credit.grpo import GRPO, GRPOConfig, grpo_turn_advantages
from prover.credit.verification import Boundaries, verify, verify_metrics
from prover.errors import ConfigError
from prover.judges.base import can_yield_segment, validate_segment
from prover.judges.health import FailureWatch, judge_metrics, reason_text
from prover.seeding import derive_seed
from prover.types import Advantages, Batch, CheckedSegment, Group, JudgeRequest, JudgeResult, JudgeUsage, Segment


class ProVerConfig(GRPOConfig, WinRangeConfig):
    eligible: tuple[int, int] = Field((1, 3), description="Groups with this many wins (min, max) and at least one "
                                      "failure get a proposal (the ProVer paper used 1 to 3 of 8), scaled to the "
                                      "group size (eligible_of).")
    target: Literal["shortest", "longest", "random"] = Field("shortest", description="Which success of an eligible "
                                                             "group the judge reads (the ProVer paper used the "
                                                             "shortest).")
    max_turns: int = Field(4, ge=1, description="L: the longest segment, in turns (the ProVer paper used 4).")
    samples: int = Field(8, ge=1, description="K: continuations from each boundary of a segment (the ProVer paper "
                         "used 8).")
    lam: float = Field(1.0, ge=0.0, description="lambda: weight of the verified gain Delta (the ProVer paper used 1).")
    bonus_units: Literal["reward", "success"] = Field("reward", description="'reward': the bonus is lambda * Delta "
                                                      "* reward.scale, in the units of R_i as in the paper's binary "
                                                      "rewards; 'success': lambda * Delta as written.")
    verify: Literal["fixed", "adaptive"] = Field("fixed", description="'fixed': K continuations from each boundary "
                                                 "(ProVer); 'adaptive': rounds that stop once the decision is "
                                                 "settled, K at most (credit/verification.py).")
    confidence: float = Field(0.95, gt=0.5, lt=1.0, description="verify=adaptive: the level of the whole sequential "
                              "decision; each round's test gets an equal share of 1 minus it (credit/verification.py).")
    round_size: int = Field(2, ge=1, description="verify=adaptive: continuations per boundary per round.")
    saturation: bool = Field(False, description="verify=adaptive: also stop, rejecting, once every draw at both "
                             "boundaries won (or every one failed) over half of K; it can reject a small real gain "
                             "(credit/verification.py).")
    free_samples: bool = Field(False, description="Count the group's own trajectories that stood in a boundary "
                               "state as samples of its value, and branch only for the rest of K.")

    def verify_kwargs(self) -> dict:
        """These settings as ``verification.verify`` takes them (the Brancher, segments and seed apart)."""
        return {"k": self.samples, "rule": self.verify, "round_size": self.round_size,
                "confidence": self.confidence, "free_samples": self.free_samples, "saturation": self.saturation}

    @field_validator("eligible")
    @classmethod
    def _ordered(cls, v: tuple[int, int]) -> tuple[int, int]:
        if not 1 <= v[0] <= v[1]:
            raise ValueError("give [min, max] wins with 1 <= min <= max")
        return v


def pick_target(group: Group, how: str, seed: str) -> int:
    """Index of the success the judge reads: the shortest (ties: the first), the longest, or a seeded pick."""
    wins = [i for i, tr in enumerate(group.trajectories) if tr.won]
    if how == "random":
        return random.Random(seed).choice(wins)
    sign = 1 if how == "shortest" else -1
    return min(wins, key=lambda i: (sign * len(group.trajectories[i].turns), i))


class ProVer(GRPO):
    Config = ProVerConfig
    config: ProVerConfig  # the parsed settings of ``Config``
    needs_snapshots = True

    def __init__(self, config: ProVerConfig | None = None) -> None:
        super().__init__(config)
        self.judge_watch = FailureWatch()  # steps in a row in which every judge request failed

    @classmethod
    def validate_config(cls, train_cfg) -> None:
        super().validate_config(train_cfg)
        if train_cfg.judge.name is None:
            raise ConfigError("credit 'prover' needs a judge to propose segments: set judge.name "
                              "(e.g. judge.name=contrast, a free one; see `prover list`)")

    def assign(self, batch: Batch, ctx: CreditContext) -> Advantages:
        cfg = self.config
        unit = ctx.config.reward.scale if cfg.bonus_units == "reward" else 1.0
        per_turn = [grpo_turn_advantages(g, ctx, cfg) for g in batch.groups]
        seed = derive_seed(ctx.config.seed, ctx.step, "prover")
        eligible = [(gi, JudgeRequest(g, pick_target(g, cfg.target, f"{seed}/{g.task_id}"), cfg.max_turns, seed=seed))
                    for gi, g in enumerate(batch.groups)
                    if in_win_range(g, cfg.eligible, cfg.eligible_of) and 0 < g.n_won < len(g.trajectories)]
        # a target without a valid segment (one turn, only rejected actions) is not sent: no judge is paid for it
        jobs = [(gi, req) for gi, req in eligible if can_yield_segment(req)]
        if jobs and ctx.judge is None:
            raise ConfigError("credit 'prover' has no judge in its context: set judge.name (e.g. judge.name=contrast)")
        results = ctx.judge.propose_all([req for _, req in jobs]) if jobs and ctx.judge is not None else []
        screened = screen(jobs, results)
        valid, checked = screened.valid, screened.checked
        self.judge_watch.observe(screened.usage, results, ctx.judge, ctx.step)  # raises past judge.max_failed_steps
        verdicts = verify(ctx.brancher, [Boundaries(batch.groups[p.group], p.request.target,
                                                    (p.segment.start_turn, p.segment.end_turn + 1)) for p in valid],
                          seed=seed, **cfg.verify_kwargs())
        for p, v in zip(valid, verdicts):
            seg = p.segment
            checked.append(CheckedSegment(
                group=p.group, segment=seg, delta=float(v.delta), accepted=v.accepted, rationale=p.rationale,
                transcript=p.transcript, sampled_version=p.request.success.turns[seg.start_turn].policy_version,
                verify_version=v.verify_version))
            if v.accepted:
                per_turn[p.group][p.request.target][seg.start_turn:seg.end_turn + 1] += cfg.lam * v.delta * unit
        metrics = {
            "credit/eligible_groups": float(len(eligible)),
            "credit/unprovable_groups": float(len(eligible) - len(jobs)),
            "credit/judged_groups": float(len(jobs)),  # requests sent to the judge
            "credit/proposals": float(sum(r.proposal is not None for r in results)),
            "credit/valid_proposals": float(len(valid)),
            "credit/dropped_proposals": float(screened.dropped),
            "credit/accepted": float(sum(v.accepted for v in verdicts)),
            **verify_metrics(verdicts),
            **judge_metrics(screened.usage),
        }
        if jobs:  # the judge's valid-proposal rate: of the groups it was asked about, those it gave one for
            metrics["credit/valid_proposal_rate"] = len(valid) / len(jobs)
        if valid:  # undefined without a verified proposal: left out rather than logged as 0
            metrics["credit/acceptance_rate"] = metrics["credit/accepted"] / len(valid)
            metrics["credit/segment_turns"] = float(np.mean([p.segment.end_turn - p.segment.start_turn + 1
                                                             for p in valid]))
            metrics["credit/delta"] = float(np.mean([v.delta for v in verdicts]))
        return Advantages(values=broadcast(batch, per_turn), metrics=metrics, segments=checked)


class ValidProposal(NamedTuple):
    """A judge's proposal for group ``group`` that ``validate_segment`` accepted: what verification needs."""

    group: int  # index in batch.groups
    request: JudgeRequest
    segment: Segment
    rationale: str
    transcript: list[str]  # the judge's replies (JudgeResult.transcript)


class Screened(NamedTuple):
    """The judge's answers of a step, re-checked: what goes on to verification, and what was dropped."""

    valid: list[ValidProposal]
    checked: list[CheckedSegment]  # the dropped ones and the groups without a proposal, with why
    dropped: int  # proposals lost: invalid, or to a failed request
    usage: JudgeUsage  # what all the requests cost


def screen(jobs: list[tuple[int, JudgeRequest]], results: list[JudgeResult]) -> Screened:
    """Every judge answer re-checked with ``validate_segment``, whatever judge made it (departure 4)."""
    usage, valid, dropped, checked = JudgeUsage(), [], 0, []
    for (gi, req), res in zip(jobs, results):
        usage.add(res.usage)
        if res.proposal is None and res.failure:  # kept for groups.jsonl: why this group got no proposal
            checked.append(CheckedSegment(group=gi, segment=None, delta=None, accepted=False,
                                          problem=reason_text(res.failure), transcript=res.transcript))
            dropped += bool(res.error)  # lost to a failed request, not a judge that found nothing
        if res.proposal is not None:
            seg, why = res.proposal.segment, res.proposal.rationale
            problem = validate_segment(req, seg)
            if problem is None:
                valid.append(ValidProposal(gi, req, seg, why, res.transcript))
            else:
                dropped += 1
                checked.append(CheckedSegment(group=gi, segment=seg, delta=None, accepted=False, problem=problem,
                                              rationale=why, transcript=res.transcript))
    return Screened(valid, checked, dropped, usage)
