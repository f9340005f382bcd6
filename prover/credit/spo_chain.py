"""SPO-chain for agents: Monte-Carlo values at segment boundaries, advantage = value difference.

    boundaries   b_0 = 0 < b_1 < ... < b_K < T     (every ``interval`` turns, or before turns whose
                                                    completion has a token with p < ``prob_threshold``)
    V(s_b)       = scale * mean(won) of K continuations of the current policy from before turn b
    V(s_T)       = scale * R                        (the trajectory's own outcome)
    A_t          = V(s_{b_{k+1}}) - V(s_{b_k})      for every turn t in segment [b_k, b_{k+1})
    optional:    probability mask (tokens with p > prob_threshold leave the loss), then whitening
                 over the kept tokens of the batch

Paper: Guo et al., "Segment Policy Optimization", arXiv 2505.23564, §3 (SPO-chain) and eq. (5)-(7);
semantics as in AIFrameResearch/SPO (../shared/research/algorithms.md §3.1 and §3.4).

Departures (SPO was built for single-turn reasoning):
1. Segments are runs of whole turns and values are estimated by restoring env snapshots (the
   mapping proposed in algorithms.md §3.4); the paper cuts inside one response.
2. The first boundary is always turn 0, so the first segment is measured against V(s_0) (the paper's
   chain gives the first segment 0 unless it has a value for the prompt-only state).
3. Values are success rates times ``reward.scale``, on the same scale as the other methods.
4. ``eligible`` restricts the method to groups with that many wins (the ProVer comparison used 1-3 of
   8); other groups, and groups outside it, get zero advantage. There is no GRPO term.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from prover.branching import BranchRequest
from prover.credit.base import CreditAssigner, CreditContext, MethodConfig, broadcast, in_win_range
from prover.registry import CREDIT
from prover.types import Advantages, Batch, Trajectory


class SPOChainConfig(MethodConfig):
    interval: int = Field(2, ge=1, description="A boundary every this many turns (with prob_guided off).")
    prob_guided: bool = Field(False, description="Put boundaries before turns that hold a token with probability "
                              "below prob_threshold, keeping every interval-th of them (SPO's cutpoints).")
    prob_threshold: float = Field(0.9, gt=0.0, lt=1.0, description="SPO's hard-coded 0.9.")
    samples: int = Field(4, ge=1, description="Continuations per boundary (SPO: 4 for Qwen MATH, 9 for GSM8K).")
    prob_mask: bool = Field(False, description="Remove tokens with probability above prob_threshold from the loss.")
    whiten: bool = Field(False, description="Whiten advantages over the kept tokens of the batch (SPO: on).")
    eligible: tuple[int, int] | None = Field(None, description="Only groups with this many wins (min, max), "
                                             "e.g. [1, 3] as in the ProVer comparison; None for all groups.")


def boundaries(traj: Trajectory, cfg: SPOChainConfig) -> list[int]:
    """Turn indices where a segment starts; always begins with 0."""
    n = len(traj.turns)
    if not cfg.prob_guided:
        return list(range(0, n, cfg.interval))
    low = [t for t, turn in enumerate(traj.turns)
           if any(np.exp(lp) < cfg.prob_threshold for lp in turn.logprobs)]
    return sorted({0, *low[::cfg.interval]})


@CREDIT.register("spo-chain")
class SPOChain(CreditAssigner):
    Config = SPOChainConfig
    needs_snapshots = True

    def assign(self, batch: Batch, ctx: CreditContext) -> Advantages:
        cfg, scale = self.config, ctx.config.reward.scale
        per_turn = [[np.zeros(len(tr.turns)) for tr in g.trajectories] for g in batch.groups]
        jobs = []  # (group, trajectory, its boundaries)
        for gi, group in enumerate(batch.groups):
            if not in_win_range(group, cfg.eligible):
                continue
            jobs += [(gi, i, boundaries(tr, cfg)) for i, tr in enumerate(group.trajectories) if tr.turns]
        requests = [BranchRequest(batch.groups[gi].trajectories[i], b, cfg.samples) for gi, i, bs in jobs for b in bs]
        results = iter(ctx.brancher.continue_from(requests, seed=ctx.step) if requests else [])
        for gi, i, bs in jobs:
            traj = batch.groups[gi].trajectories[i]
            values = [scale * next(results).value for _ in bs] + [scale * float(traj.won)]
            for k, start in enumerate(bs):
                end = bs[k + 1] if k + 1 < len(bs) else len(traj.turns)
                per_turn[gi][i][start:end] = values[k + 1] - values[k]
        values = broadcast(batch, per_turn)
        mask = None
        if cfg.prob_mask:
            mask = [[[(np.exp(np.asarray(turn.logprobs)) <= cfg.prob_threshold).astype(np.float32)
                      for turn in tr.turns] for tr in g.trajectories] for g in batch.groups]
        if cfg.whiten:
            values = _whiten(values, mask)
        return Advantages(values=values, loss_mask=mask, metrics={"credit/boundaries": float(len(requests))})


def _whiten(values: list, mask: list | None) -> list:
    flat = np.concatenate([a for g in values for tr in g for a in tr] or [np.zeros(0)])
    keep = np.concatenate([m for g in mask for tr in g for m in tr]).astype(bool) if mask else np.ones(len(flat), bool)
    kept = flat[keep]
    if kept.size < 2:
        return values
    mean, std = kept.mean(), kept.std(ddof=1)  # unbiased, as SPO's masked_whiten
    return [[[((a - mean) / np.sqrt(std**2 + 1e-8)).astype(np.float32) for a in tr] for tr in g] for g in values]
