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
   score (verl: mean 0, std 1).
"""

from __future__ import annotations

import difflib
from typing import Hashable, Literal

import numpy as np
from pydantic import Field

from prover.credit.base import (CreditAssigner, CreditContext, MethodConfig, broadcast, trajectory_score,
                                turn_scores)
from prover.registry import CREDIT
from prover.types import Advantages, Batch, Group


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
    out = np.zeros(len(rewards), dtype=np.float64)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = rewards[t] + gamma * running
        out[t] = running
    return out


def _normalise(values: np.ndarray, members: list[list[int]], std: bool, eps: float,
               singleton_raw: bool) -> np.ndarray:
    """(x - mean) [/ (std + eps)] within each member list; singletons per ``singleton_raw``."""
    out = np.zeros_like(values)
    for idx in members:
        x = values[idx]
        if len(idx) == 1:
            out[idx] = x if singleton_raw else 0.0
            continue
        centred = x - x.mean()
        out[idx] = centred / (x.std(ddof=1) + eps) if std else centred
    return out


def _episode_by_trajectory(scores: np.ndarray, per_traj: np.ndarray, std: bool, eps: float) -> np.ndarray:
    """Row scores centred [and scaled] by the mean [and std] of one score R_i per trajectory."""
    if len(per_traj) == 1:
        return scores.copy()  # a group of one keeps its raw score (verl: mean 0, std 1)
    centred = scores - per_traj.mean()
    if not std:
        return centred
    if np.all(per_traj == per_traj[0]):  # no outcome signal: exactly 0, not penalties / eps
        return np.zeros_like(scores)
    return centred / (per_traj.std(ddof=1) + eps)


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


@CREDIT.register("gigpo")
class GiGPO(CreditAssigner):
    Config = GiGPOConfig
    needs_groups = True

    def _group(self, group: Group, ctx: CreditContext) -> list[np.ndarray]:
        cfg, reward = self.config, ctx.config.reward
        trajs = group.trajectories
        lengths = [len(tr.turns) for tr in trajs]
        if sum(lengths) == 0:
            return [np.zeros(0) for _ in trajs]
        scores = np.concatenate([turn_scores(tr, reward) for tr in trajs])
        penalty = np.concatenate([[reward.invalid_penalty * (not t.format_valid) for t in tr.turns] for tr in trajs])
        returns = np.concatenate([discounted_returns(np.array([reward.scale * t.reward for t in tr.turns]),
                                                     cfg.gamma) for tr in trajs]) - penalty
        std = cfg.mode == "mean_std_norm"
        rows_of = np.split(np.arange(len(scores)), np.cumsum(lengths)[:-1])
        if cfg.episode_stats == "step":
            episode = _normalise(scores, [list(range(len(scores)))], std, cfg.eps, singleton_raw=True)
        else:  # trajectories with turns (those with rows, as in the reference) set the statistics
            per_traj = np.array([trajectory_score(tr, reward) for tr in trajs if tr.turns])
            episode = _episode_by_trajectory(scores, per_traj, std, cfg.eps)
        keys: list[Hashable] = [t.state_key if cfg.anchor == "state_key" else t.observation
                                for tr in trajs for t in tr.turns]
        thresh = cfg.similarity_thresh if cfg.anchor == "observation" else None
        step = _normalise(returns, anchor_groups(keys, thresh), std, cfg.eps, singleton_raw=False)
        total = episode + cfg.omega * step
        return [total[r] for r in rows_of]

    def assign(self, batch: Batch, ctx: CreditContext) -> Advantages:
        per_turn = [self._group(g, ctx) for g in batch.groups]
        return Advantages(values=broadcast(batch, per_turn))
