"""GRPO: every policy token of a trajectory gets its group-normalised outcome.

    A_i = (R_i - mean_g R) / (std_g R + eps)     norm = "std"   (verl, eps = 1e-6, std unbiased)
    A_i =  R_i - mean_g R                        norm = "mean"  (Dr.GRPO, Prime-RL, the ProVer paper; default)
    A_{i,t,k} = A_i for every token k of every turn t of trajectory i

Paper: DeepSeekMath, arXiv 2402.03300, eq. (3) (outcome supervision); multi-turn use as in
verl-agent (arXiv 2505.10978 §4), which trains one row per turn; reference code: verl's
``core_algos.compute_grpo_outcome_advantage`` (docs/methods/grpo.md).

Departures and choices (all switches; see docs/methods/grpo.md):
1. ``norm="mean"`` is the default, not verl's std division: it is the Prime-RL setting the ProVer
   paper trained with, and this ``GRPOConfig`` is the one GRPO base of grpo, budget-matched-grpo,
   prover and criticsearch, so ProVer and GRPO differ by one thing, the verified bonus.
   ``norm="std"`` (verl) stays selectable (``credit.norm=std``).
2. Row scores subtract the invalid-format penalty of that turn (verl-agent), so turns of one
   trajectory can differ by the penalty.
3. ``stats="trajectory"``: mean and std over the G trajectory scores R_i (standard GRPO).
   ``stats="step"``: over every turn row of the group, so long trajectories weigh more (verl-agent's
   default ``compute_mean_std_cross_steps=True``).
4. A group of one: ``singleton="raw"`` keeps the raw score (verl: mean 0, std 1); ``"zero"`` gives 0
   (TRL, Prime-RL). "One" counts what the statistics pool: trajectories under stats="trajectory",
   turn rows under stats="step" (as the reference, which counts the rows of an index), so one
   trajectory of several turns is normalised among its own rows there.
5. A zero-variance pool (all equal R_i under stats="trajectory") gives exactly 0 with norm="std"
   (dividing a format penalty by eps would explode); with norm="mean" only the penalties remain.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from prover.credit.base import CreditAssigner, CreditContext, MethodConfig, broadcast, trajectory_score, turn_scores
from prover.registry import CREDIT
from prover.types import Advantages, Batch, Group


class GRPOConfig(MethodConfig):
    norm: Literal["std", "mean"] = Field("mean", description="Only centre (Prime-RL, the ProVer paper; the shared "
                                         "GRPO base) or divide by the group std (verl).")
    stats: Literal["trajectory", "step"] = Field("trajectory", description="Group statistics over trajectories "
                                                 "or over every turn row (verl-agent default).")
    singleton: Literal["raw", "zero"] = Field("raw", description="Advantage of a group of one (trajectory; row "
                                              "with stats=step): its raw score (verl) or zero (TRL).")
    eps: float = Field(1e-6, gt=0.0, description="Added to the std before dividing (verl: 1e-6; TRL: 1e-4).")


def grpo_turn_advantages(group: Group, ctx: CreditContext, cfg: GRPOConfig) -> list[np.ndarray]:
    """(n_turns,) advantages per trajectory of one group; shared by methods that add to GRPO."""
    reward = ctx.config.reward
    rows = [turn_scores(tr, reward) for tr in group.trajectories]
    if cfg.stats == "trajectory":
        pool = np.array([trajectory_score(tr, reward) for tr in group.trajectories])
    else:
        pool = np.concatenate(rows) if rows else np.zeros(0)
    if pool.size == 1:  # a group of one trajectory, or (stats="step") of one row: verl's mean 0, std 1
        return [r if cfg.singleton == "raw" else np.zeros_like(r) for r in rows]
    if pool.size == 0:
        return [np.zeros_like(r) for r in rows]
    mean = pool.mean()
    std = pool.std(ddof=1)  # torch.std is unbiased, as in verl
    if np.all(pool == pool[0]):  # zero variance: no signal, exactly zero (also with penalties off)
        return [np.zeros_like(r) if cfg.norm == "std" else r - mean for r in rows]
    if cfg.norm == "std":
        return [(r - mean) / (std + cfg.eps) for r in rows]
    return [r - mean for r in rows]


@CREDIT.register("grpo")
class GRPO(CreditAssigner):
    Config = GRPOConfig
    needs_groups = True

    def assign(self, batch: Batch, ctx: CreditContext) -> Advantages:
        per_turn = [grpo_turn_advantages(g, ctx, self.config) for g in batch.groups]
        return Advantages(values=broadcast(batch, per_turn))
