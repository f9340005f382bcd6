"""SPO-chain for agents: Monte-Carlo values at segment boundaries, advantage = value difference.

    boundaries   b_0 = 0 < b_1 < ... < b_K < T     (every ``interval`` turns, or before turns whose
                                                    completion has a token with p < ``prob_threshold``)
    V(s_b)       = scale * mean(won) of K continuations of the current policy from before turn b,
                   estimated once per distinct state: (group, actions before b)
    V(s_T)       = scale * R                        (the trajectory's own outcome)
    A_t          = V(s_{b_{k+1}}) - V(s_{b_k})      for every turn t in segment [b_k, b_{k+1})
    optional:    probability mask (tokens with p > prob_threshold leave the loss), then whitening
                 over the kept tokens of the assigned trajectories of the batch

Paper: Guo et al., "Segment Policy Optimization", arXiv 2505.23564, §3 (SPO-chain) and eq. (5)-(7);
semantics as in AIFrameResearch/SPO (docs/methods/spo-chain.md).

Presets, each setting its fields unless the run sets that field itself:
- ``preset: prover-comparison`` (as in the ProVer comparison): ``eligible=[1, 3]`` (of 8, scaled to the
  group size), ``whiten=true`` and ``prob_mask=true``.
- ``preset: vineppo`` (VinePPO, arXiv 2410.01679; docs/methods/vineppo.md): ``interval=1``,
  ``prob_guided=false``, ``prob_mask=false``, ``eligible=None``, ``whiten=true``, ``samples=9``. With a
  boundary before every turn the chain is VinePPO's A_t = r_t + V(s_{t+1}) - V(s_t) exactly (gamma 1,
  V(terminal) = 0, r_t = R on the last turn and 0 before it, so r_t + V(s_{t+1}) is our V(s_{t+1}) with
  V(s_T) = R); departures 2 and 6 are VinePPO's own choices, 4 and 5 are inactive; whitening covers the
  step's batch where VinePPO whitens each training mini-batch.

Departures (SPO was built for single-turn reasoning):
1. Segments are runs of whole turns and values are estimated by restoring env snapshots (the
   mapping in docs/methods/spo-chain.md); the paper cuts inside one response.
2. The first boundary is always turn 0, so the first segment is measured against V(s_0) (the paper's
   chain gives the first segment 0 unless it has a value for the prompt-only state).
3. Values are success rates times ``reward.scale``, on the same scale as the other methods.
4. ``eligible`` restricts the method to groups with that many wins, written for groups of
   ``eligible_of`` and scaled to the run's (the ProVer comparison used 1-3 of 8). There is no GRPO
   term, so an ineligible group carries no signal: its advantages are exactly 0 (whitening included);
   its rows stay in the loss with advantage 0 (left out by ``skip_zero_advantage_rows``).
5. Whitening takes its mean and std over the kept tokens of the assigned trajectories only and
   rescales only those trajectories (the reference whitens the whole batch, which has no ineligible
   groups).
6. The reference deduplicates identical prefixes; here a state is identified by its group and the
   actions played before it (deterministic envs from one reset: same env state, same agent history),
   so the group's shared start is one request, not one per trajectory.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from prover.credit.base import CreditAssigner, CreditContext, WinRangeConfig, broadcast, in_win_range
from prover.episodes.branching import BranchRequest
from prover.seeding import derive_seed
from prover.types import Advantages, Batch, GroupValues, Trajectory

PROVER_COMPARISON = {"eligible": (1, 3), "whiten": True, "prob_mask": True}  # what the preset sets
# VinePPO's configs (McGill-NLP/VinePPO): a value before every step, 9 MC rollouts, whiten_advantages on
VINEPPO = {"interval": 1, "prob_guided": False, "prob_mask": False, "eligible": None, "whiten": True, "samples": 9}


class SPOSharedConfig(WinRangeConfig):
    """The fields SPO-chain and SPO-tree share: win range, probability mask, whitening, preset."""

    prob_threshold: float = Field(0.9, gt=0.0, lt=1.0, description="SPO's hard-coded 0.9.")
    prob_mask: bool = Field(False, description="Remove tokens with probability above prob_threshold from the loss.")
    whiten: bool = Field(False, description="Whiten advantages over the kept tokens of the assigned rows of the "
                         "batch (SPO: on); other rows stay exactly 0.")
    eligible: tuple[int, int] | None = Field(None, description="Only groups with this many wins (min, max) of "
                                             "eligible_of, e.g. [1, 3] as in the ProVer comparison; None for all.")
    preset: Literal["none", "prover-comparison"] = Field("none", description="'prover-comparison': eligible "
                                                         "[1, 3], whiten and prob_mask on, unless set explicitly.")
    PRESETS: ClassVar[dict[str, dict]] = {"prover-comparison": PROVER_COMPARISON}

    @model_validator(mode="after")
    def _apply_preset(self) -> SPOSharedConfig:
        for name, value in self.PRESETS.get(self.preset, {}).items():
            if name not in self.model_fields_set:
                setattr(self, name, value)
        return self


class SPOChainConfig(SPOSharedConfig):
    interval: int = Field(2, ge=1, description="A boundary every this many turns (with prob_guided off).")
    prob_guided: bool = Field(False, description="Put boundaries before turns that hold a token with probability "
                              "below prob_threshold, keeping every interval-th of them (SPO's cutpoints).")
    samples: int = Field(4, ge=1, description="Continuations per boundary (SPO: 4 for Qwen MATH, 9 for GSM8K).")
    preset: Literal["none", "prover-comparison", "vineppo"] = Field(
        "none", description="'prover-comparison': eligible [1, 3], whiten and prob_mask on; 'vineppo': a value "
        "before every turn (interval 1), 9 samples, whiten on, no mask, every group; each unless set explicitly.")
    PRESETS: ClassVar[dict[str, dict]] = {"prover-comparison": PROVER_COMPARISON, "vineppo": VINEPPO}


def boundaries(traj: Trajectory, cfg: SPOChainConfig) -> list[int]:
    """Turn indices where a segment starts; always begins with 0."""
    n = len(traj.turns)
    if not cfg.prob_guided:
        return list(range(0, n, cfg.interval))
    low = [t for t, turn in enumerate(traj.turns)
           if any(np.exp(lp) < cfg.prob_threshold for lp in turn.logprobs)]
    return sorted({0, *low[::cfg.interval]})


def state_of(gi: int, traj: Trajectory, turn: int) -> tuple:
    """The state before ``turn``: same group (task, reset) and same actions before it -> same state."""
    return gi, tuple(t.action for t in traj.turns[:turn])


class SPOChain(CreditAssigner):
    """SPO-chain: Monte-Carlo values at segment boundaries, advantage = value difference; VinePPO is its
    ``preset: vineppo`` (a boundary before every turn), not a name of its own."""

    Config = SPOChainConfig
    config: SPOChainConfig  # the parsed settings of ``Config``
    needs_snapshots = True

    def assign(self, batch: Batch, ctx: CreditContext) -> Advantages:
        cfg, scale = self.config, ctx.config.reward.scale
        per_turn = [[np.zeros(len(tr.turns)) for tr in g.trajectories] for g in batch.groups]
        assigned = [[False] * len(g.trajectories) for g in batch.groups]
        jobs = []  # (group, trajectory, its boundaries)
        for gi, group in enumerate(batch.groups):
            if in_win_range(group, cfg.eligible, cfg.eligible_of):
                jobs += [(gi, i, boundaries(tr, cfg)) for i, tr in enumerate(group.trajectories) if tr.turns]
        value_of = self._state_values(batch, jobs, ctx)
        for gi, i, bs in jobs:
            traj = batch.groups[gi].trajectories[i]
            values = [scale * value_of[state_of(gi, traj, b)] for b in bs] + [scale * float(traj.won)]
            for k, start in enumerate(bs):
                end = bs[k + 1] if k + 1 < len(bs) else len(traj.turns)
                per_turn[gi][i][start:end] = values[k + 1] - values[k]
            assigned[gi][i] = True
        values = broadcast(batch, per_turn)
        mask = probability_mask(batch, cfg.prob_threshold) if cfg.prob_mask else None
        if cfg.whiten:
            values = whiten(values, mask, assigned)
        metrics = {"credit/boundaries": float(len(value_of)), "credit/boundary_uses": float(sum(len(bs) for *_, bs
                                                                                                 in jobs))}
        return Advantages(values=values, loss_mask=mask, metrics=metrics)

    def _state_values(self, batch: Batch, jobs: list, ctx: CreditContext) -> dict[tuple, float]:
        """V of every distinct boundary state of ``jobs`` (success rate), one branch request per state."""
        requests: dict[tuple, BranchRequest] = {}
        for gi, i, bs in jobs:
            traj = batch.groups[gi].trajectories[i]
            for b in bs:
                requests.setdefault(state_of(gi, traj, b), BranchRequest(traj, b, self.config.samples))
        if not requests:
            return {}
        seed = derive_seed(ctx.config.seed, ctx.step, "spo-chain")
        results = ctx.need_brancher("spo-chain").continue_from(list(requests.values()), seed=seed)
        return {key: res.value for key, res in zip(requests, results)}


def probability_mask(batch: Batch, threshold: float) -> list[GroupValues]:
    """SPO's ``use_prob_mask``: 1 for tokens with probability at most ``threshold``, 0 (out of the loss) above."""
    return [[[(np.exp(np.asarray(turn.logprobs)) <= threshold).astype(np.float32) for turn in tr.turns]
             for tr in g.trajectories] for g in batch.groups]


def whiten(values: list[GroupValues], mask: list[GroupValues] | None,
           assigned: list[list[bool]] | None = None) -> list[GroupValues]:
    """SPO's masked_whiten, (a - mean) / sqrt(var + 1e-8) with the unbiased variance, the statistics taken
    over the tokens of assigned trajectories (``assigned[g][i]``; None: all) that ``mask`` keeps (None: all).
    Every token of an assigned trajectory is rescaled; the others stay exactly 0."""
    rows = [(g, i) for g, grp in enumerate(values) for i in range(len(grp)) if assigned is None or assigned[g][i]]
    kept = [a[mask[g][i][t] > 0] if mask is not None else a for g, i in rows for t, a in enumerate(values[g][i])]
    flat = np.concatenate(kept or [np.zeros(0)])
    out = [[[np.zeros_like(a) for a in tr] for tr in grp] for grp in values]
    if flat.size < 2:  # no std: assigned rows as they are
        for g, i in rows:
            out[g][i] = values[g][i]
        return out
    mean, var = flat.mean(), flat.var(ddof=1)
    for g, i in rows:
        out[g][i] = [((a - mean) / np.sqrt(var + 1e-8)).astype(np.float32) for a in values[g][i]]
    return out
