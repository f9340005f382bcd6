"""GraphGPO: step returns from each state's shortest-path distance to the goal in a per-group transition graph.

For each task group, a directed graph with one node per anchor state of the group's turns, one goal node
★, and one dead-end node per episode that did not score; each turn t of episode i adds an edge of weight 1
from s_t^(i) to its next state s_{t+1}^(i), which for the last turn is ★ if the episode scored (R_i > 0),
else the episode's own dead end. Then

    d(s)       = length of the shortest path s -> ★ (reverse Dijkstra from ★; unit weights)
                 or, where ★ is unreachable, 1 + the largest finite d of the group (1 when no episode scored)
    R_t^(i)    = c * gamma^d(s_{t+1}^(i))                              step return (c = 10, gamma = 0.1)
    R_t^(i)    = c * gamma^(d(s_{t+1}^(i)) - d(s_t^(i)) + 1)           with ``normalize_distance``
    R~_t^(i)   = R_t^(i) - p * invalid_t^(i)                           the invalid-format penalty p
    A^S_(i,t)  = (R~_t^(i) - mean_{G^S} R~) / F_{G^S}                  G^S: the group's rows from the same state
    A^E_(i,t)  = (R_i - p * invalid_t^(i) - mean_g) / F_g              GiGPO's episode term over step rows
    A_(i,t)    = w_S * A^S_(i,t) + w_E * A^E_(i,t), on every token of turn t

F is the unbiased std plus eps (``mode="mean_std_norm"``) or 1 (``"mean_norm"``). A step into the goal
earns c, a step one edge away c * gamma, and so on; with ``normalize_distance`` a step that closes one unit
of distance earns c, one that keeps it c * gamma (rewarding progress rather than proximity).

Paper: Cheng, He, Feng, Xu, Yan, Feng, An, "Beyond Trajectory-Level Attribution: Graph-Based Credit
Assignment for Agentic Reinforcement Learning", arXiv 2605.26684. The formula above is the reference
code's: ``recipe/GraphGPO/core_graph.py`` (``ComplexGraph.from_data``, ``all_to_target_shortest_paths``,
``compute_graph_path_returns``, ``compute_graphgpo_outcome_advantage``) and the rollout loop that marks the
goal, in zzj1111/alfworldauto at 234a913609ef (docs/methods/graphgpo.md); the paper text was not read.

Departures and choices:
1. Anchor states are ``Turn.state_key`` by default (the env's true state: text collides, e.g. every
   "Nothing happens."); ``anchor="observation"`` uses the observation text, the reference's ``anchor_obs``,
   and only then does ``similarity_thresh`` merge similar texts into one graph node (greedy, first
   representative, as gigpo.anchor_groups and the reference's ``StateCanonicalizer``). Step groups G^S
   stay exact-match, as the reference's (it never passes its similarity setting to them).
2. The next state of an episode's last turn: prover does not keep the env's observation after the last
   action, so a non-scoring episode ends in a dead end of its own (unreachable). The reference uses that
   final observation, which can be a node that reaches ★; there the two differ. ★ is never merged with an
   observation by similarity.
3. The goal is marked by the episode's score R_i = scale * return > 0, as the reference's rollout loop
   (episode reward > 0), not by ``Trajectory.won``.
4. A step group whose returns are all equal, or an episode pool of two rows or more whose scores are, gives
   exactly 0, also when the mean does not round back to the common value (the reference can leave a
   ~1e-17 residue there that, divided by std + eps, is ~1e-11).
5. An episode pool of one row keeps its raw score (as GiGPO's departure 4; the reference divides it by
   1 + eps with eps rounded to float32 under mean_std_norm, a 1e-6 relative difference).
6. Rewards are ``reward.scale`` times the env's; the invalid-format penalty is subtracted from the step
   return and the episode score, as the reference's trainer does. Everything is float64 (the reference
   stores step returns in float32). The constant c is a setting (``goal_return``; the reference writes 10).

``benchmarks/conformance/graphgpo_vs_reference.py`` runs the reference beside this code on recorded batches.
"""

from __future__ import annotations

from collections.abc import Hashable
from operator import attrgetter
from typing import Literal

import numpy as np
from pydantic import Field

from prover.credit.base import CreditAssigner, CreditContext, MethodConfig
from prover.credit.gigpo import _anchor_codes, _normalise, anchor_groups
from prover.credit.grpo import Rows, batch_rows, broadcast_rows, segment_stats
from prover.types import Advantages, Batch


class GraphGPOConfig(MethodConfig):
    gamma: float = Field(0.1, ge=0.0, le=1.0, description="Decay of the step return with graph distance: "
                         "c * gamma^d (reference: algorithm.gamma 0.10).")
    goal_return: float = Field(10.0, gt=0.0, description="c: the return of a step into the goal (reference: 10).")
    normalize_distance: bool = Field(False, description="Step return c * gamma^(d_new - d_old + 1), rewarding "
                                     "progress, instead of c * gamma^d_new, rewarding proximity (reference: false).")
    step_advantage_w: float = Field(1.0, ge=0.0, description="w_S: weight of the graph step advantage (reference: "
                                    "1.0).")
    episode_advantage_w: float = Field(1.0, ge=0.0, description="w_E: weight of GiGPO's episode advantage; 0 "
                                       "leaves the graph signal alone (reference: 1.0).")
    mode: Literal["mean_norm", "mean_std_norm"] = Field("mean_std_norm", description="Centre only, or centre and "
                                                        "divide by the std, both terms (reference: mean_std_norm).")
    anchor: Literal["state_key", "observation"] = Field("state_key", description="What makes two turns share a "
                                                        "state (graph node and step group): the env's state_key "
                                                        "or the observation text.")
    similarity_thresh: float | None = Field(None, gt=0.0, lt=1.0, description="With anchor=observation: merge "
                                            "observations at least this similar (difflib ratio) into one graph "
                                            "node; None is exact match (reference: enable_similarity false; 0.95 "
                                            "when on).")
    eps: float = Field(1e-6, gt=0.0, description="Added to the std before dividing (reference: 1e-6).")


def goal_distances(src: np.ndarray, dst: np.ndarray, n_nodes: int, goal: int) -> np.ndarray:
    """(n_nodes,) edges from the goal backwards (unit weights: breadth-first is Dijkstra); a node that cannot
    reach the goal gets 1 + the largest finite distance, as the reference."""
    into: list[list[int]] = [[] for _ in range(n_nodes)]
    for u, v in zip(src.tolist(), dst.tolist()):
        into[v].append(u)
    dist = np.full(n_nodes, -1, dtype=np.int64)
    dist[goal], frontier = 0, [goal]
    while frontier:
        reached = []
        for v in frontier:
            for u in into[v]:
                if dist[u] < 0:
                    dist[u] = dist[v] + 1
                    reached.append(u)
        frontier = reached
    dist[dist < 0] = dist.max() + 1
    return dist


def group_returns(keys: list[Hashable], lengths: np.ndarray, scored: np.ndarray, thresh: float | None,
                  cfg: GraphGPOConfig) -> np.ndarray:
    """(n,) step returns c * gamma^exponent of one task group's rows (its trajectories' turns in order)."""
    first: dict[Hashable, int] = {}  # distinct keys in order of first sighting: a repeat joins the same node
    index = np.array([first.setdefault(k, len(first)) for k in keys], dtype=np.int64)
    node_of = np.empty(len(first), dtype=np.int64)
    clusters = anchor_groups(list(first), thresh)
    for c, members in enumerate(clusters):
        node_of[members] = c
    node, goal = node_of[index], len(clusters)
    nxt = np.empty_like(node)
    nxt[:-1] = node[1:]  # within an episode the next state is the next turn's anchor
    ends = (np.cumsum(lengths) - 1)[lengths > 0]
    dead_ends = goal + 1 + np.arange(len(ends))
    nxt[ends] = np.where(scored[lengths > 0], goal, dead_ends)
    dist = goal_distances(node, nxt, goal + 1 + len(ends), goal)
    exponent = dist[nxt] - dist[node] + 1 if cfg.normalize_distance else dist[nxt]
    # Python's float pow, one per distinct exponent (numpy's vector pow may differ by an ulp)
    table = {k: cfg.goal_return * cfg.gamma ** float(k) for k in set(exponent.tolist())}
    return np.array([table[k] for k in exponent.tolist()], dtype=np.float64)


def graph_returns(keys: list[Hashable], rows: Rows, n_groups: int, cfg: GraphGPOConfig) -> np.ndarray:
    """(N,) step returns of every row, one graph per task group (rows of a group are contiguous)."""
    thresh = cfg.similarity_thresh if cfg.anchor == "observation" else None
    out = np.zeros(len(keys))
    row_start = np.cumsum(rows.lengths) - rows.lengths
    scored = rows.traj_score > 0  # the reference marks the goal where the episode reward is > 0
    for g in range(n_groups):
        trajs = np.flatnonzero(rows.traj_group == g)
        n = int(rows.lengths[trajs].sum())
        if n == 0:
            continue
        a = int(row_start[trajs[0]])
        out[a:a + n] = group_returns(keys[a:a + n], rows.lengths[trajs], scored[trajs], thresh, cfg)
    return out


def step_advantages(returns: np.ndarray, codes: np.ndarray, n: int, std: bool, eps: float) -> np.ndarray:
    """(R - mean) [/ (unbiased std + eps)] within each step group; 0 for singletons and groups of equal R."""
    count, mean, sd, same = segment_stats(returns, codes, n)
    out = returns - mean[codes]
    if std:
        with np.errstate(invalid="ignore"):  # singletons have a nan std: set below
            out = out / (sd[codes] + eps)
    out[(count[codes] < 2) | same[codes]] = 0.0
    return out


def graphgpo_row_advantages(batch: Batch, ctx: CreditContext, cfg: GraphGPOConfig) -> np.ndarray:
    """(N,) float64 w_S * A^S + w_E * A^E of every turn row, in ``batch.turns()`` order."""
    return _graphgpo_rows(batch, batch_rows(batch, ctx.config.reward), ctx, cfg)


def _graphgpo_rows(batch: Batch, rows: Rows, ctx: CreditContext, cfg: GraphGPOConfig) -> np.ndarray:
    reward, n_groups, std = ctx.config.reward, len(batch.groups), cfg.mode == "mean_std_norm"
    if not rows.turns:
        return np.zeros(0)
    keys: list[Hashable] = list(map(attrgetter(cfg.anchor), rows.turns))  # Turn.state_key or .observation
    returns = graph_returns(keys, rows, n_groups, cfg) - reward.invalid_penalty * rows.invalid
    codes, n = _anchor_codes(keys, rows.row_group, None)  # step groups: exact anchors, as the reference
    out = cfg.step_advantage_w * step_advantages(returns, codes, n, std, cfg.eps)
    if cfg.episode_advantage_w != 0.0:
        episode = _normalise(rows.scores, rows.row_group, n_groups, std, cfg.eps, singleton_raw=True)
        count, _, _, same = segment_stats(rows.scores, rows.row_group, n_groups)
        episode[(same & (count > 1))[rows.row_group]] = 0.0  # no spread: exactly 0 (departure 4)
        out = out + cfg.episode_advantage_w * episode
    return out


class GraphGPO(CreditAssigner):
    """GraphGPO: step returns from each state's shortest-path distance to the goal in the group's transition
    graph, normalised among same-state rows, plus GiGPO's episode term (arXiv 2605.26684)."""

    Config = GraphGPOConfig
    config: GraphGPOConfig  # the parsed settings of ``Config``
    needs_groups = True

    def assign(self, batch: Batch, ctx: CreditContext) -> Advantages:
        rows = batch_rows(batch, ctx.config.reward)
        return Advantages(values=broadcast_rows(batch, _graphgpo_rows(batch, rows, ctx, self.config)))
