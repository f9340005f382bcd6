"""HGPO: each turn's step advantage taken in nested groups of turns that share more and more of its history.

    R_t^(i)   = sum_{u >= t} gamma^(u - t) r_u^(i)  -  p * invalid_t^(i)     discounted step return (as GiGPO)
    C_l(i,t)  = (s_{t-l}^(i), ..., s_{t-1}^(i), s_t^(i)),  0 <= l <= min(K, t)  the l-step context of turn t
    G_l(i,t)  = {(j, u) in task group g : u >= l, C_l(j,u) = C_l(i,t)}        level-l group; G_0 ⊇ G_1 ⊇ ... ⊇ G_K
    A_l(i,t)  = (R_t^(i) - mean_{G_l} R) / F_l          where |G_l| >= 2          the advantage within level l
    w_l       = (l + 2)^alpha                  ("length" weights: the context's l + 1 states, plus one)
    A(i,t)    = sum_{l in V} w_l A_l / (sum_{l in V} w_l + eps),  V = {l : |G_l| >= 2 and A_l != 0}

on every token of turn t. F_l is the population std of the level group plus eps (``mode="mean_std_norm"``)
or 1 (``"mean_norm"``); K is ``history_length``. With ``base_group`` the episode advantage
A^E = (R_i - p * invalid_t - mean) / F over every step row of the task group (unbiased std; GiGPO's
episode term) joins V as one more item with w = 1 (a context of no states): HGPO has no episode term of its
own beside that. A turn with no item in V (every level a singleton or exactly zero) gets 0.

Paper: He, Feng, Wei, Cheng, Feng, An, "Hierarchy-of-Groups Policy Optimization for Long-Horizon Agentic
Tasks", ICLR 2026, arXiv 2602.22817 (context-aware hierarchical grouping with the k-step context operator;
adaptive weighting). The formula above is the reference code's: ``compute_hgpo_outcome_advantage`` in SERL's
``recipe/hgpo/core_hgpo.py`` (OliverLeeXZ/SERL at 5a2a85b171c6; docs/methods/hgpo.md), whose level
"k" is our l + 1 (the number of states in the context) and whose weight is (k + 1)^alpha.

Departures and choices:
1. A context's states are ``Turn.state_key`` by default (the env's true state; text collides, e.g. every
   "Nothing happens."); ``anchor="observation"`` uses the observation text, the reference's ``anchor_obs``.
2. A level group whose returns are all equal gives exactly 0 (so it leaves V), also when its mean does not
   round back to the common value; the reference's torch mean can leave a ~1e-17 residue there that,
   divided by eps, becomes a ~1e-11 item of V and dilutes the others' weights. Likewise a base pool with no
   spread gives 0.
3. Rewards are ``reward.scale`` times the env's, and the invalid-format penalty is subtracted from both the
   step return and the base score, as the reference's trainer does (``apply_invalid_action_penalty``).
4. ``weight_type`` has the one value the reference implements ("length"; its trainer reads the field and
   its core never does). As there, a level advantage that is exactly 0 (zero spread, or a member exactly at
   its group's mean) is left out of the weights, and the weights sum to S / (S + eps), not exactly 1.
5. Everything is float64 (the reference casts rewards and advantages to float32).

The level groups, like GiGPO's anchor groups, never cross task groups; a trajectory that revisits a context
is in its group once per visit. ``benchmarks/conformance/hgpo_vs_reference.py`` runs the reference beside this code.
"""

from __future__ import annotations

from collections.abc import Hashable
from operator import attrgetter
from typing import Literal

import numpy as np
from pydantic import Field

from prover.credit.base import CreditAssigner, CreditContext, MethodConfig
from prover.credit.gigpo import _returns_by_trajectory
from prover.credit.grpo import Rows, batch_rows, broadcast_rows, segment_stats
from prover.types import Advantages, Batch


class HGPOConfig(MethodConfig):
    history_length: int = Field(2, ge=0, description="K: the most earlier turns a context holds beside the "
                                "current state, so levels l = 0..K (reference: env.history_length, 2; 2 or 4).")
    weight_type: Literal["length"] = Field("length", description="How levels are weighted: (l + 2)^alpha, the "
                                           "context's states plus one (the only kind the reference has).")
    length_weight_alpha: float = Field(1.0, ge=0.0, description="alpha of the length weights; 0 weighs every "
                                       "level alike (reference: 1.0).")
    base_group: bool = Field(False, description="Add the episode advantage over the task group's step rows to "
                             "the weighted levels, with weight 1 (reference: false).")
    mode: Literal["mean_norm", "mean_std_norm"] = Field("mean_std_norm", description="Centre only, or centre and "
                                                        "divide by the std (reference ALFWorld: mean_std_norm; "
                                                        "WebShop: mean_norm).")
    gamma: float = Field(0.95, ge=0.0, le=1.0, description="Discount of step returns (reference scripts: 0.95).")
    anchor: Literal["state_key", "observation"] = Field("state_key", description="What a context's states are: "
                                                        "the env's state_key or the observation text.")
    eps: float = Field(1e-6, gt=0.0, description="Added to the std and to the weights' sum (reference: 1e-6).")


def turn_positions(lengths: np.ndarray) -> np.ndarray:
    """(N,) the index of each row within its trajectory (rows of a trajectory are contiguous)."""
    starts = np.cumsum(lengths) - lengths
    return np.arange(int(lengths.sum())) - np.repeat(starts, lengths)


def context_codes(keys: list[Hashable], row_group: np.ndarray, pos: np.ndarray,
                  level: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The rows with a level-``level`` context (pos >= level), and a code per row naming its level group:
    the same task group and the same ``level + 1`` states, in turn order, ending at the row."""
    rows = np.flatnonzero(pos >= level)
    seen: dict[tuple, int] = {}
    codes = np.array([seen.setdefault((int(row_group[r]), tuple(keys[r - level:r + 1])), len(seen)) for r in rows],
                     dtype=np.int64)
    return rows, codes, len(seen)


def level_advantages(returns: np.ndarray, codes: np.ndarray, n: int, std: bool, eps: float) -> np.ndarray:
    """(R - mean) [/ (population std + eps)] within each code; 0 for singletons and for groups of equal R."""
    count, mean, _, same = segment_stats(returns, codes, n)
    out = returns - mean[codes]
    if std:
        spread = np.sqrt(np.bincount(codes, weights=out * out, minlength=n) / np.maximum(count, 1))
        out = out / (spread[codes] + eps)
    out[(count[codes] < 2) | same[codes]] = 0.0
    return out


def base_advantages(rows: Rows, n_groups: int, std: bool, eps: float) -> np.ndarray:
    """GiGPO's episode term over every step row of a task group (unbiased std); a pool of one row takes
    mean 0 and std 1, as the reference; a pool with no spread gives 0."""
    count, mean, sd, same = segment_stats(rows.scores, rows.row_group, n_groups)
    g = rows.row_group
    single = count[g] == 1
    mean, sd = np.where(count == 1, 0.0, mean), np.where(count == 1, 1.0, sd)
    out = rows.scores - mean[g]
    if std:
        out = out / (sd[g] + eps)
    out[same[g] & ~single] = 0.0
    return out


def aggregate(items: np.ndarray, weights: np.ndarray, eps: float) -> np.ndarray:
    """(N,) sum_l w_l a_l / (sum_l w_l + eps) over the non-zero items of each row; 0 where there is none.

    ``items`` is (N, M), 0 where a row has no item at that level; ``weights`` is (M,), one per level."""
    w_raw = np.where(items != 0.0, weights[None, :], 0.0)
    w = w_raw / (w_raw.sum(axis=1, keepdims=True) + eps)
    return (w * items).sum(axis=1)


def hgpo_row_advantages(batch: Batch, ctx: CreditContext, cfg: HGPOConfig) -> np.ndarray:
    """(N,) float64 HGPO advantage of every turn row, in ``batch.turns()`` order."""
    return _hgpo_rows(batch, batch_rows(batch, ctx.config.reward), ctx, cfg)


def _hgpo_rows(batch: Batch, rows: Rows, ctx: CreditContext, cfg: HGPOConfig) -> np.ndarray:
    reward, std = ctx.config.reward, cfg.mode == "mean_std_norm"
    n_rows = len(rows.turns)
    if not n_rows:
        return np.zeros(0)
    env_rewards = np.fromiter(map(attrgetter("reward"), rows.turns), dtype=np.float64, count=n_rows)
    returns = _returns_by_trajectory(reward.scale * env_rewards, rows.lengths, cfg.gamma)
    returns = returns - reward.invalid_penalty * rows.invalid
    keys: list[Hashable] = list(map(attrgetter(cfg.anchor), rows.turns))  # Turn.state_key or .observation
    pos = turn_positions(rows.lengths)
    levels = range(cfg.history_length + 1)
    items = np.zeros((n_rows, len(levels) + 1))  # column 0: the base group (zeros unless base_group)
    for level in levels:
        idx, codes, n = context_codes(keys, rows.row_group, pos, level)
        items[idx, level + 1] = level_advantages(returns[idx], codes, n, std, cfg.eps)
    if cfg.base_group:
        items[:, 0] = base_advantages(rows, len(batch.groups), std, cfg.eps)
    # weight_type "length": a level-l context holds l + 1 states, weighted (l + 1 + 1)^alpha; the base 1^alpha
    weights = np.array([1.0, *[(level + 2.0) ** cfg.length_weight_alpha for level in levels]])
    return aggregate(items, weights, cfg.eps)


class HGPO(CreditAssigner):
    """HGPO: each turn's step advantage in nested groups of turns sharing 0..K earlier states, averaged with
    context-length weights (arXiv 2602.22817; SERL's core_hgpo.py)."""

    Config = HGPOConfig
    config: HGPOConfig  # the parsed settings of ``Config``
    needs_groups = True

    def assign(self, batch: Batch, ctx: CreditContext) -> Advantages:
        rows = batch_rows(batch, ctx.config.reward)
        return Advantages(values=broadcast_rows(batch, _hgpo_rows(batch, rows, ctx, self.config)))
