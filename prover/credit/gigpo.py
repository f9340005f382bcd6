"""GiGPO: GRPO's episode advantage plus a step advantage among turns taken from the same state.

    A^E_i      = (R_i - mean_g R) / F                                   episode level (eq. 3)
    R_t^(i)    = sum_{k >= t} gamma^(k - t) r_k^(i)                       discounted step return (eq. 5)
    G^S(s)     = {(i, t) in group g : s_t^(i) = s}                        anchor-state groups (eq. 6)
    A^S_(i,t)  = (R_t^(i) - mean_{G^S(s_t^(i))} R) / F_{G^S}              step level (eq. 7)
    A_(i,t)    = A^E_i + omega * A^S_(i,t), on every token of turn t       (eq. 8)

F is the unbiased std plus eps (mode "mean_std_norm") or 1 ("mean_norm").

Paper: Feng et al., "Group-in-Group Policy Optimization for LLM Agent Training", arXiv 2505.10978,
eqs. 3-8; semantics as in verl-agent's gigpo/core_gigpo.py (docs/methods/gigpo.md).

Departures and choices:
1. Anchor states are ``Turn.state_key`` by default (the env's true state: text collides, e.g. every
   "Nothing happens."); ``anchor="observation"`` groups by the observation text as the reference does,
   optionally with its greedy similarity clustering (``similarity_thresh``): a row joins the first
   cluster whose representative (first member) has ``SequenceMatcher(None, obs, rep).ratio() >=
   thresh``, the new observation first, as ``build_step_group`` calls ``are_similar(obs, rep)`` in
   verl-agent's gigpo/core_gigpo.py (the ratio is not symmetric).
2. Episode statistics are over every step row of the group (the reference hard-codes
   ``compute_mean_std_cross_steps=True``); ``episode_stats="trajectory"`` takes one score per episode,
   its unpenalised R_i = scale * return (``trajectory_score``; the reference with the flag off would
   take its first row's penalised score), for the mean and std; every row is then centred by them, and
   with ``mean_std_norm`` a zero-variance set of R_i gives exactly 0 (as GRPO's ``norm="std"``), since
   the rows' format penalties divided by eps would explode.
3. Rewards are ``reward.scale`` times the env's, and the invalid-format penalty is subtracted from both
   the row's episode score and its step return, as verl-agent's trainer does.
4. A singleton anchor group gives A^S = 0 exactly; a pool of one row at episode level keeps its raw
   score (verl: mean 0, std 1, which with mean_std_norm still divides by 1 + eps, eps rounded to float32:
   a 1e-6 relative difference).

The whole batch is computed at once (anchor groups and trajectories are segments of flat arrays) with
GRPO's ``segment_stats``, which sums in the reference's torch order, so with the reference's settings
(episode_stats="step", its anchor_obs as our anchors) float64 outputs equal
``compute_gigpo_outcome_advantage``'s bit for bit; ``benchmarks/conformance/credit_vs_reference.py`` checks this
and times both.
"""

from __future__ import annotations

import difflib
from collections.abc import Hashable
from operator import attrgetter
from typing import Literal

import numpy as np
from pydantic import Field

from prover.credit.base import CreditAssigner, CreditContext, MethodConfig
from prover.credit.grpo import Rows, batch_rows, broadcast_rows, segment_stats
from prover.types import Advantages, Batch


class GiGPOConfig(MethodConfig):
    gamma: float = Field(0.95, ge=0.0, le=1.0, description="Discount of step returns (verl-agent: 0.95).")
    omega: float = Field(1.0, ge=0.0, description="Weight of the step advantage (verl-agent: 1.0).")
    mode: Literal["mean_norm", "mean_std_norm"] = Field("mean_std_norm", description="Centre only, or centre "
                                                        "and divide by the std (verl-agent ALFWorld: mean_std_norm).")
    episode_stats: Literal["step", "trajectory"] = Field("step", description="Episode statistics over every step "
                                                         "row (reference) or one score per trajectory.")
    anchor: Literal["state_key", "observation"] = Field("state_key", description="What makes two turns share a "
                                                        "state: the env's state_key or the observation text.")
    similarity_thresh: float | None = Field(None, gt=0.0, lt=1.0, description="With anchor=observation: join "
                                            "the first cluster whose first member is at least this similar "
                                            "(difflib ratio); None is exact match.")
    eps: float = Field(1e-6, gt=0.0, description="Added to the std before dividing (verl: 1e-6).")


def discounted_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """R_t = sum_{k >= t} gamma^(k - t) r_k, computed backwards."""
    return _returns_by_trajectory(np.asarray(rewards, dtype=np.float64), np.array([len(rewards)]), gamma)


def _returns_by_trajectory(rewards: np.ndarray, lengths: np.ndarray, gamma: float) -> np.ndarray:
    """Discounted returns of every trajectory at once: one (T, max length) grid, walked backwards.

    Each step is the reference's ``running = r_t + gamma * running``; past a trajectory's end the grid
    holds 0 and running stays exactly 0, so every row sees the same float operations as a loop of its own.
    """
    if rewards.size == 0:
        return np.zeros(0)
    row_traj = np.repeat(np.arange(len(lengths)), lengths)
    pos = np.arange(rewards.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    grid = np.zeros((len(lengths), int(lengths.max())))
    grid[row_traj, pos] = rewards
    running = np.zeros(len(lengths))
    for t in range(grid.shape[1] - 1, -1, -1):
        running = grid[:, t] + gamma * running
        grid[:, t] = running
    return grid[row_traj, pos]


def _normalise(values: np.ndarray, codes: np.ndarray, n: int, std: bool, eps: float,
               singleton_raw: bool) -> np.ndarray:
    """(x - mean) [/ (std + eps)] within each segment code; singletons per ``singleton_raw``."""
    count, mean, sd, _ = segment_stats(values, codes, n)
    out = values - mean[codes]
    if std:
        with np.errstate(invalid="ignore"):  # segments of one have no std: set below
            out = out / (sd[codes] + eps)
    single = count[codes] == 1
    out[single] = values[single] if singleton_raw else 0.0
    return out


def _episode_by_trajectory(rows: Rows, n_groups: int, std: bool, eps: float) -> np.ndarray:
    """Row scores centred [and scaled] by the mean [and std] of one score R_i per trajectory."""
    has_turns = rows.lengths > 0  # trajectories with rows set the statistics, as in the reference
    count, mean, sd, same = segment_stats(rows.traj_score[has_turns], rows.traj_group[has_turns], n_groups)
    g = rows.row_group
    out = rows.scores - mean[g]
    if std:
        with np.errstate(invalid="ignore"):
            out = out / (sd[g] + eps)
        out[same[g]] = 0.0  # no outcome signal: exactly 0, not penalties / eps
    single = count[g] == 1
    out[single] = rows.scores[single]  # a group of one keeps its raw score (verl: mean 0, std 1)
    return out


def anchor_groups(keys: list[Hashable], thresh: float | None) -> list[list[int]]:
    """Row indices per anchor state: exact keys, or greedy clusters by text similarity."""
    if thresh is None:
        by_key: dict[Hashable, list[int]] = {}
        for i, k in enumerate(keys):
            by_key.setdefault(k, []).append(i)
        return list(by_key.values())
    clusters: list[list[int]] = []
    for i, k in enumerate(keys):
        for members in clusters:
            # new observation first, representative second: the reference's are_similar(obs, rep)
            if difflib.SequenceMatcher(None, str(k), str(keys[members[0]])).ratio() >= thresh:
                members.append(i)
                break
        else:
            clusters.append([i])
    return clusters


def _anchor_codes(keys: list[Hashable], row_group: np.ndarray,
                  thresh: float | None) -> tuple[np.ndarray, int]:
    """A code per row naming its anchor group; groups never share one (anchors are within a task's group)."""
    codes, n = np.empty(len(keys), dtype=np.int64), 0
    bounds = np.flatnonzero(np.diff(row_group)) + 1  # the rows of a group are contiguous
    for a, b in zip([0, *bounds.tolist()], [*bounds.tolist(), len(keys)]):
        if thresh is None:  # a dict of first sightings: new keys take the next code
            seen: dict[Hashable, int] = {}
            codes[a:b] = [seen.setdefault(k, len(seen)) for k in keys[a:b]]
            size = len(seen)
        else:
            clusters = anchor_groups(keys[a:b], thresh)
            for c, members in enumerate(clusters):
                codes[a + np.array(members)] = c
            size = len(clusters)
        codes[a:b] += n
        n += size
    return codes, n


def gigpo_row_advantages(batch: Batch, ctx: CreditContext, cfg: GiGPOConfig) -> np.ndarray:
    """(N,) float64 A^E + omega * A^S of every turn row, in ``batch.turns()`` order."""
    return _gigpo_rows(batch, batch_rows(batch, ctx.config.reward), ctx, cfg)


def _row_anchors(rows: Rows, cfg: GiGPOConfig) -> tuple[np.ndarray, int]:
    """Each row's anchor-group code, and the number of groups."""
    keys: list[Hashable] = list(map(attrgetter(cfg.anchor), rows.turns))  # Turn.state_key or .observation
    thresh = cfg.similarity_thresh if cfg.anchor == "observation" else None
    return _anchor_codes(keys, rows.row_group, thresh)


def anchor_metrics(codes: np.ndarray, n: int) -> dict[str, float]:
    """How the step's turns fell into anchor groups: how many groups, their mean size in turns, and the share
    of singletons (one turn, whose A^S is 0). {} for a batch with no turns."""
    if n == 0:
        return {}
    sizes = np.bincount(codes, minlength=n)
    return {"credit/anchor_groups": float(n), "credit/anchor_group_size": float(len(codes) / n),
            "credit/singleton_anchor_share": float(np.mean(sizes == 1))}


def _gigpo_rows(batch: Batch, rows: Rows, ctx: CreditContext, cfg: GiGPOConfig,
                anchors: tuple[np.ndarray, int] | None = None) -> np.ndarray:
    reward, n_groups, std = ctx.config.reward, len(batch.groups), cfg.mode == "mean_std_norm"
    if not rows.turns:
        return np.zeros(0)
    if cfg.episode_stats == "step":
        episode = _normalise(rows.scores, rows.row_group, n_groups, std, cfg.eps, singleton_raw=True)
    else:
        episode = _episode_by_trajectory(rows, n_groups, std, cfg.eps)
    env_rewards = np.fromiter(map(attrgetter("reward"), rows.turns), dtype=np.float64, count=len(rows.turns))
    returns = _returns_by_trajectory(reward.scale * env_rewards, rows.lengths, cfg.gamma)
    returns = returns - reward.invalid_penalty * rows.invalid
    codes, n = anchors if anchors is not None else _row_anchors(rows, cfg)
    step = _normalise(returns, codes, n, std, cfg.eps, singleton_raw=False)
    return episode + cfg.omega * step


class GiGPO(CreditAssigner):
    Config = GiGPOConfig
    config: GiGPOConfig  # the parsed settings of ``Config``
    needs_groups = True

    def assign(self, batch: Batch, ctx: CreditContext) -> Advantages:
        rows = batch_rows(batch, ctx.config.reward)
        anchors = _row_anchors(rows, self.config) if rows.turns else (np.zeros(0, dtype=np.int64), 0)
        values = broadcast_rows(batch, _gigpo_rows(batch, rows, ctx, self.config, anchors))
        return Advantages(values=values, metrics=anchor_metrics(*anchors))
