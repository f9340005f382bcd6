"""Loo: a leave-one-out outcome baseline (RLOO) on every token of a trajectory.

    A_i       = R_i - mean_{j != i} R_j          baseline = "loo"  (RLOO, Ahmadian et al., arXiv 2402.14740)
    A_i       = R_i - mean_j R_j                 baseline = "mean"
    A_{i,t,k} = A_i                              every token k of every turn t of trajectory i

R_i is the trajectory's score, reward.scale times its env return (prover.credit.base.trajectory_score).
A group of one has no baseline and gets 0. Made by `prover new credit loo`; docs/plugins.md in prover
explains each part.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from prover.credit.base import CreditAssigner, CreditContext, MethodConfig, broadcast, trajectory_score
from prover.types import Advantages, Batch


class LooCreditConfig(MethodConfig):
    baseline: Literal["loo", "mean"] = Field(
        "loo", description="The baseline R_i is compared with: the mean of the group's other trajectories "
        "(loo) or of all of them (mean).")


def baseline_advantages(scores: np.ndarray, baseline: str) -> np.ndarray:
    """(G,) advantages of one group from its (G,) scores; zeros for a group of fewer than two."""
    n = len(scores)
    if n < 2:
        return np.zeros(n)
    if baseline == "loo":
        return scores - (scores.sum() - scores) / (n - 1)
    return scores - scores.mean()


class LooCredit(CreditAssigner):
    Config = LooCreditConfig
    needs_groups = True  # compares a group's trajectories: refused at rollout.group_size=1
    needs_snapshots = False  # never branches, so it runs on envs that cannot snapshot

    def assign(self, batch: Batch, ctx: CreditContext) -> Advantages:
        per_turn = []
        for group in batch.groups:
            scores = np.array([trajectory_score(tr, ctx.config.reward) for tr in group.trajectories])
            advantages = baseline_advantages(scores, self.config.baseline)
            per_turn.append([np.full(len(tr.turns), a) for tr, a in zip(group.trajectories, advantages)])
        values = broadcast(batch, per_turn)  # one value per completion token of every turn
        flat = [a for g in values for tr in g for a in tr]
        mean_abs = float(np.mean(np.abs(np.concatenate(flat)))) if flat else 0.0
        return Advantages(values=values, metrics={"credit/mean_abs_advantage": mean_abs})
