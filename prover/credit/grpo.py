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
4. A group of one: ``singleton="raw"`` keeps the raw score (verl: mean 0, std 1, which with norm="std"
   still divides by 1 + eps, eps rounded to float32: a 1e-6 relative difference); ``"zero"`` gives 0
   (TRL, Prime-RL). "One" counts what the statistics pool: trajectories under stats="trajectory",
   turn rows under stats="step" (as the reference, which counts the rows of an index), so one
   trajectory of several turns is normalised among its own rows there.
5. A zero-variance pool (all equal R_i under stats="trajectory") gives exactly 0 with norm="std"
   (dividing a format penalty by eps would explode); with norm="mean" only the penalties remain.

Below: the config, the method, the formula (``grpo_advantages``), then the machinery under it. The whole
batch is computed at once, as flat arrays (``Rows``), and the mean and std are summed in the order verl's
``torch.mean`` and ``torch.std`` sum (``segment_stats``), so where the two define the same thing
(stats="step", or no penalties) float64 outputs equal the reference's bit for bit;
``benchmarks/conformance/credit_vs_reference.py`` checks this and times both.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch
from pydantic import Field

from prover.credit.base import (
    CreditAssigner,
    CreditContext,
    MethodConfig,
    broadcast_rows,
    format_invalid,
    penalised_scores,
    trajectory_score,
)
from prover.types import Advantages, Batch, Group, Turn

if TYPE_CHECKING:
    from prover.config import RewardConfig


class GRPOConfig(MethodConfig):
    norm: Literal["std", "mean"] = Field("mean", description="Only centre (Prime-RL, the ProVer paper; the shared "
                                         "GRPO base) or divide by the group std (verl).")
    stats: Literal["trajectory", "step"] = Field("trajectory", description="Group statistics over trajectories "
                                                 "or over every turn row (verl-agent default).")
    singleton: Literal["raw", "zero"] = Field("raw", description="Advantage of a group of one (trajectory; row "
                                              "with stats=step): its raw score (verl) or zero (TRL).")
    eps: float = Field(1e-6, gt=0.0, description="Added to the std before dividing (verl: 1e-6; TRL: 1e-4).")


class GRPO(CreditAssigner):
    Config = GRPOConfig
    config: GRPOConfig  # the parsed settings of ``Config``
    needs_groups = True

    def assign(self, batch: Batch, ctx: CreditContext) -> Advantages:
        rows = batch_rows(batch, ctx.config.reward)
        return Advantages(values=broadcast_rows(batch, grpo_advantages(rows, len(batch.groups), self.config)))


def grpo_advantages(rows: Rows, n_groups: int, cfg: GRPOConfig) -> np.ndarray:
    """(N,) A = (score - mean_g) / (std_g + eps), or score - mean_g with norm="mean"; the rest is departures
    4 and 5 of the module docstring (groups of one, zero variance)."""
    if cfg.stats == "trajectory":
        count, mean, std, same = segment_stats(rows.traj_score, rows.traj_group, n_groups)
    else:
        count, mean, std, same = segment_stats(rows.scores, rows.row_group, n_groups)
    g = rows.row_group
    centred = rows.scores - mean[g]
    if cfg.norm == "std":
        with np.errstate(invalid="ignore", divide="ignore"):  # groups of one: handled below
            out = centred / (std[g] + cfg.eps)
        out[same[g]] = 0.0  # zero variance: no signal, exactly zero (also with penalties off)
    else:
        out = centred  # zero variance leaves only the penalties
    single = (count == 1)[g]  # a group of one trajectory, or (stats="step") of one row: verl's mean 0, std 1
    out[single] = rows.scores[single] if cfg.singleton == "raw" else 0.0
    return out


def grpo_row_advantages(batch: Batch, ctx: CreditContext, cfg: GRPOConfig) -> np.ndarray:
    """(N,) float64 advantage of every turn row, in ``batch.turns()`` order."""
    return grpo_advantages(batch_rows(batch, ctx.config.reward), len(batch.groups), cfg)


def grpo_turn_advantages(group: Group, ctx: CreditContext, cfg: GRPOConfig) -> list[np.ndarray]:
    """(n_turns,) advantages per trajectory of one group; shared by methods that add to GRPO."""
    if not group.trajectories:
        return []
    rows = grpo_row_advantages(Batch([group]), ctx, cfg)
    return np.split(rows, np.cumsum([len(tr.turns) for tr in group.trajectories])[:-1])


# -- the machinery: the batch as flat arrays, and statistics summed in the reference's order ---------------


@dataclass
class Rows:
    """A batch as flat arrays: one entry per turn row (batch.turns() order) or per trajectory."""

    turns: list[Turn]  # (N,)
    traj_group: np.ndarray  # (T,) group of each trajectory
    lengths: np.ndarray  # (T,) turns of each trajectory
    traj_score: np.ndarray  # (T,) R_i = scale * return (trajectory_score)
    row_traj: np.ndarray  # (N,) trajectory of each row
    row_group: np.ndarray  # (N,) group of each row; a group's rows are contiguous
    invalid: np.ndarray  # (N,) 1.0 where the turn broke the output format
    scores: np.ndarray  # (N,) row scores: R_i - penalty * invalid (base.penalised_scores)


def batch_rows(batch: Batch, reward: RewardConfig) -> Rows:
    """The numbers credit needs, read once from the turn objects; what follows is array arithmetic."""
    trajs = [tr for g in batch.groups for tr in g.trajectories]
    turns = list(chain.from_iterable([tr.turns for tr in trajs]))
    lengths = np.array([len(tr.turns) for tr in trajs], dtype=np.int64)
    traj_group = np.repeat(np.arange(len(batch.groups)), [len(g.trajectories) for g in batch.groups])
    traj_score = np.array([trajectory_score(tr, reward) for tr in trajs], dtype=np.float64)
    row_traj = np.repeat(np.arange(len(trajs)), lengths)
    invalid = format_invalid(turns)
    return Rows(turns, traj_group, lengths, traj_score, row_traj, traj_group[row_traj],
                invalid.astype(np.float64), penalised_scores(traj_score[row_traj], invalid, reward))


def segment_stats(values: np.ndarray, codes: np.ndarray, n: int) -> tuple[np.ndarray, ...]:
    """(count, mean, unbiased std, all-equal) of ``values`` per segment code in [0, n).

    The sums run in the order verl's reference sums (its torch.mean and torch.std on each segment's
    values, in row order), so the results equal it bit for bit: the mean is torch's sum / count (rows of
    one length go to torch as one (k, length) tensor, which it sums row by row exactly as a 1-D
    tensor), and the std is sqrt(running sum of (x - mean)^2 / (count - 1)), torch's two-pass full
    std, whose plain loop is np.cumsum. A segment of one gets its value as mean and a nan std.
    """
    order = np.argsort(codes, kind="stable")  # stable: each segment keeps row order
    x = values[order]
    count = np.bincount(codes, minlength=n)
    start = np.cumsum(count) - count
    mean, std, same = np.zeros(n), np.full(n, np.nan), np.ones(n, dtype=bool)
    by_len = np.argsort(count, kind="stable")  # segments grouped by length: one torch call per length
    lengths, first = np.unique(count[by_len], return_index=True)
    for length, seg in zip(lengths.tolist(), np.split(by_len, first[1:])):
        if length == 0:
            continue
        if length == 1:  # torch: 0 + x, / 1: x itself
            mean[seg] = x[start[seg]]
            continue
        block = x[start[seg, None] + np.arange(length)]  # (k, length), each row in row order
        mean[seg] = m = torch.from_numpy(block).sum(dim=1).numpy() / length
        dev = block - m[:, None]
        std[seg] = np.sqrt(np.cumsum(dev * dev, axis=1)[:, -1] / (length - 1))
    full = count > 0
    if full.any():  # min == max: exact, unlike std == 0 (equal values need not sum to count * value)
        same[full] = np.minimum.reduceat(x, start[full]) == np.maximum.reduceat(x, start[full])
    return count, mean, std, same
