"""SPO-tree for agents: a tree of turn-level branches from the task start; edges are the training rows.

    root          the task's initial state (shared by the group)
    children      at depth d each open node branches ``branch_factors[d]`` continuations of the current
                  policy, each playing ``turns_per_level`` turns (the last level plays to the end)
    V(leaf)       = scale * won;   V(node) = mean of its children's V   (recursive mean, not over leaves)
    A(edge)       = V(child) - V(parent)                           mode "rloo"
                  = (V(child) - V(parent)) / (std(children of parent) + 1e-8)   mode "grpo" (population std)
    training      every edge whose advantage is not exactly 0 is a row set: the child's turns, each token
                  carrying A(edge); the rollout batch itself is not trained on
    optional:     probability mask and whitening over the kept tokens of the edges, as in SPO-chain

Paper: Guo et al., "Segment Policy Optimization", arXiv 2505.23564, §4 (SPO-tree); semantics as in
AIFrameResearch/SPO ``_construct_tree`` and ``extract_edges_from_tree`` (docs/methods/spo-tree.md).

Preset ``preset: prover-comparison`` (as in the ProVer comparison): ``eligible=[1, 3]`` (of 8, scaled
to the group size), ``whiten=true`` and ``prob_mask=true`` (the reference trainer applies both to tree
edges, docs/methods/spo-tree.md), each unless the run sets that field itself.

Tree-GRPO (arXiv 2509.21240) is not a preset of this method but one of its own (``tree-grpo``,
prover/credit/tree_grpo.py): it grows trees by expanding random nodes to the end, trains on whole
root-to-leaf trajectories, and gives each leaf (R - mean_prompt)/std_prompt + (R - mean_tree)/std_tree;
none of that is an SPO-tree setting (docs/methods/tree-grpo.md).

Departures:
1. A segment is ``turns_per_level`` whole agent turns (the paper: at most M tokens of one response);
   nodes are env states restored from snapshots.
2. The root is the group's task start, so the rollout's G episodes only decide which tasks are trained
   (``eligible``, written for groups of ``eligible_of`` and scaled to the run's, as in the ProVer
   comparison); the tree replaces them as training data, so an ineligible task has no rows at all.
3. Values are success rates times ``reward.scale``.
4. The probability mask and whitening (SPO-chain's code, shared) are off by default; the reference's
   trainer has them on, and the preset turns them on. Whitening is over the edges of this step's trees.
   "Drop zero edges" drops exactly-zero advantages, as the reference's ``only_adv_greater_than_zero``
   does despite its name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from pydantic import Field

from prover.credit.base import CreditAssigner, CreditContext, broadcast, in_win_range
from prover.credit.spo_chain import SPOSharedConfig, probability_mask, whiten
from prover.episodes.branching import BranchRequest
from prover.seeding import derive_seed
from prover.types import Advantages, Batch, Group, Trajectory


class SPOTreeConfig(SPOSharedConfig):
    branch_factors: list[int] = Field([3, 3], min_length=1, description="Children per node at each depth "
                                      "(SPO: 6-6-6; keep small on a CPU).")
    turns_per_level: int = Field(3, ge=1, description="Turns each child plays before it branches again.")
    mode: Literal["rloo", "grpo"] = Field("rloo", description="Edge advantage: value difference, or divided by the "
                                          "std of the parent's children.")


@dataclass
class Node:
    traj: Trajectory  # the path from the root to this node
    start: int  # the node's own turns are traj.turns[start:]
    children: list[Node] = field(default_factory=list)
    value: float = 0.0


def grow(root_traj: Trajectory, cfg: SPOTreeConfig, ctx: CreditContext, scale: float, gi: int) -> Node:
    """Branch level by level from the state before turn 0 of ``root_traj`` (the task of group ``gi``);
    fill in values."""
    root = Node(root_traj, 0)
    frontier = [(root, 0)]  # (node, turn of its trajectory to branch from)
    for depth, factor in enumerate(cfg.branch_factors):
        if not frontier:  # every branch finished early
            break
        last = depth == len(cfg.branch_factors) - 1
        requests = [BranchRequest(node.traj, at, factor) for node, at in frontier]
        seed = derive_seed(ctx.config.seed, ctx.step, "spo-tree", gi, depth)
        results = ctx.need_brancher("spo-tree").continue_from(requests, seed=seed,
                                             max_new_turns=None if last else cfg.turns_per_level,
                                             record_snapshots=not last)
        nxt = []
        for (node, at), res in zip(frontier, results):
            for child_traj in res.trajectories:
                child = Node(child_traj, at)
                node.children.append(child)
                if not child_traj.finished:
                    nxt.append((child, len(child_traj.turns)))
                else:
                    child.value = scale * float(child_traj.won)
        frontier = nxt
    _values(root)
    return root


def _values(node: Node) -> float:
    if node.children:
        node.value = float(np.mean([_values(c) for c in node.children]))
    return node.value


def edges(node: Node, mode: str) -> list[tuple[Trajectory, int, float]]:
    """(child trajectory, first turn of its segment, advantage) for every non-zero edge below ``node``."""
    out = []
    if node.children:
        std = float(np.std([c.value for c in node.children]))  # population std, as the reference
        for c in node.children:
            adv = c.value - node.value
            if mode == "grpo":
                adv /= std + 1e-8
            if adv != 0.0 and len(c.traj.turns) > c.start:
                out.append((c.traj, c.start, adv))
            out += edges(c, mode)
    return out


class SPOTree(CreditAssigner):
    Config = SPOTreeConfig
    config: SPOTreeConfig  # the parsed settings of ``Config``
    needs_snapshots = True

    def assign(self, batch: Batch, ctx: CreditContext) -> Advantages:
        cfg, scale = self.config, ctx.config.reward.scale
        groups, n_edges, n_leaves = [], 0, 0
        for gi, group in enumerate(batch.groups):
            if not group.trajectories or not group.trajectories[0].turns:
                continue
            if not in_win_range(group, cfg.eligible, cfg.eligible_of):
                continue
            tree = grow(group.trajectories[0], cfg, ctx, scale, gi)
            kept = edges(tree, cfg.mode)
            segments = [Trajectory(f"{tr.traj_id}/edge", tr.task_id, tr.task_text, turns=tr.turns[start:], gold=tr.gold)
                        for tr, start, _ in kept]
            groups.append((Group(group.task_id, segments), [np.full(len(s.turns), a) for s, (_, _, a)
                                                            in zip(segments, kept)]))
            n_edges += len(kept)
            n_leaves += _count_leaves(tree)
        train = Batch([g for g, _ in groups])
        values = broadcast(train, [v for _, v in groups])
        mask = probability_mask(train, cfg.prob_threshold) if cfg.prob_mask else None
        if cfg.whiten:
            values = whiten(values, mask)  # every edge is an assigned row
        return Advantages(values=values, loss_mask=mask, train_batch=train,
                          metrics={"credit/tree_edges": float(n_edges), "credit/tree_leaves": float(n_leaves)})


def _count_leaves(node: Node) -> int:
    return 1 if not node.children else sum(_count_leaves(c) for c in node.children)
