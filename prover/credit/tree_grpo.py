"""Tree-GRPO for agents: M trees of whole turns per task, grown by expanding random nodes to the end; every
kept leaf is one training row, its whole trajectory from the root.

    trees      the task's group: each rollout trajectory is one tree's initial chain (M = group size), its
               root the task start (the state before turn 0)
    node       the state before turn t of a path in the tree; the expandable ones are the root and every turn
               boundary strictly before the end of a path (t in 0..len-1), those of a shared prefix once
    expand     ``rounds`` (L) rounds; in each, every tree draws ``expand`` (N) nodes uniformly, with
               replacement, and plays one continuation from each to the end of the episode
    leaves     each tree's initial chain and its continuations (1 + N*L); ``leaves`` (K) of them are kept at
               random (all when a tree has no more), the others pruned
    R_i        = scale * env return of leaf i                                   (trajectory_score)
    inter_i    = (R_i - mean(R of the task's kept leaves)) / (std + eps)
    intra_i    = (R_i - mean(R of its own tree's kept leaves)) / (std + eps)
    A_i        = inter_i + intra_i, on every token of every turn of leaf i's trajectory from the root
    std        unbiased; a group of one leaf uses mean 0 and std 1 (A term = R / (1 + eps))

A shared prefix is trained once per kept leaf below it, so its gradient is the sum of those leaves'
advantages: the implicit step-level preference of the paper.

Paper: "Tree Search for LLM Agent Reinforcement Learning", arXiv 2509.21240. Reference code:
AMAP-ML/Tree-GRPO @ 90b170995d99: ``verl/trainer/ppo/ray_trainer_ts.py::compute_advantage``
(``adv_estimator == 'tree'``), ``verl/trainer/ppo/core_algos.py::compute_grpo_outcome_advantage``,
``search_r1/llm_agent/generation_ts.py::run_llm_loop_tree_search`` and ``search_r1/llm_agent/tree_node.py``
(``get_expand_node``, ``sample_leaf``). Our notes: docs/methods/tree-grpo.md.

Departures:
1. The M initial chains are the rollout group itself (M = ``rollout.group_size``), not M fresh chains
   drawn inside the method; a tree's root is the task start they share.
2. A node is a turn boundary restored from the env snapshot recorded before that turn (the reference
   continues generating from the node's token prefix). Continuations run through the Brancher, which counts
   their tokens in ``cost/branch_tokens``; they record snapshots in every round but the last.
3. Only the policy's turns are rows (one row per turn, prompt = the exact prompt the turn saw), so there
   are no tool-observation tokens to mask (the reference's ``state_masking``).
4. Defaults suit a CPU and are the released training scripts' (``ts_n=2, ts_l=1, ts_k=3``): L = 1, N = 2,
   K = 3, so a tree's 1 + N*L = 3 leaves are all kept. M is the run's group size (the scripts: 2).
5. A tree with fewer than K leaves keeps them all (the reference's ``sample_leaf`` asserts instead, so
   its code defaults, n = 2, l = 1, k = 4, would stop).
6. A zero-variance group gives exactly 0 (the reference's (R - mean) / eps is 0 only up to rounding).
7. ``eligible`` (off by default; the paper has no such rule) restricts the trees to groups whose rollout
   wins lie in a win range, as the ProVer comparison does for SPO; an ineligible task has no rows.
8. The node draws and the leaf samples are seeded from the run seed, the step and the group
   (``derive_seed``), not Python's global ``random``; all groups' continuations of a round are played
   in one Brancher batch.
9. R is the leaf's one score, without the per-turn invalid-format penalty of our GRPO's row scores: the
   reference's ``reward_mode='base'`` puts one score per leaf, on its last token.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from pydantic import Field

from prover.credit.base import CreditAssigner, CreditContext, WinRangeConfig, broadcast, in_win_range, trajectory_score
from prover.episodes.branching import BranchRequest
from prover.seeding import derive_seed
from prover.types import Advantages, Batch, Group, Trajectory

PURPOSE = "tree-grpo"


class TreeGRPOConfig(WinRangeConfig):
    rounds: int = Field(1, ge=1, description="L: expansion rounds per tree (the paper's scripts and code: 1).")
    expand: int = Field(2, ge=1, description="N: nodes each tree draws per round, each continued once to the end "
                        "(the paper: 2; each costs one episode's tail on the Brancher).")
    leaves: int = Field(3, ge=1, description="K: leaves kept per tree, drawn at random from its 1 + N*L; a tree "
                        "with fewer keeps all (the paper's scripts: 3).")
    eps: float = Field(1e-6, gt=0.0, description="Added to the unbiased std before dividing (the reference: 1e-6).")
    eligible: tuple[int, int] | None = Field(None, description="Only groups with this many rollout wins (min, max) "
                                             "of eligible_of, e.g. [1, 3] as in the ProVer comparison; None for "
                                             "all (the paper).")


@dataclass
class Tree:
    """One tree: its leaves (the initial chain first, then the continuations as played) and its nodes."""

    leaves: list[Trajectory]
    nodes: list[tuple[Trajectory, int]] = field(default_factory=list)  # (a path through it, turn it precedes)

    @classmethod
    def of(cls, chain: Trajectory) -> Tree:
        """A tree of one chain: the root (t = 0) and the boundary before each later turn are expandable. A
        chain without turns has no snapshot to restore, so nothing to expand."""
        return cls([chain], [(chain, t) for t in range(len(chain.turns))])

    def add(self, leaf: Trajectory, start: int) -> None:
        """A continuation from before turn ``start`` of a path: its turns up to ``start`` are that path's, so
        its boundaries there are nodes already; those after ``start`` and before its end are new."""
        self.leaves.append(leaf)
        self.nodes += [(leaf, t) for t in range(start + 1, len(leaf.turns))]


def draw(forest: list[Tree], n: int, seed: int) -> list[tuple[Tree, BranchRequest]]:
    """``n`` nodes per tree, uniform with replacement over its expandable nodes (``get_expand_node``)."""
    rng = np.random.default_rng(seed)
    out = []
    for tree in forest:
        if not tree.nodes:
            continue
        for k in rng.integers(len(tree.nodes), size=n).tolist():
            path, t = tree.nodes[k]
            out.append((tree, BranchRequest(path, t, 1)))
    return out


def grow(forests: dict[int, list[Tree]], cfg: TreeGRPOConfig, ctx: CreditContext) -> int:
    """Expand every tree of the step for ``cfg.rounds`` rounds, all groups' requests of a round in one
    Brancher batch; returns the number of nodes expanded."""
    expanded = 0
    for rnd in range(cfg.rounds):
        asked = [pair for gi, forest in forests.items()
                 for pair in draw(forest, cfg.expand, derive_seed(ctx.config.seed, ctx.step, PURPOSE, gi, rnd))]
        if not asked:  # no tree has a node to expand (every chain ended before its first turn)
            break
        last = rnd == cfg.rounds - 1
        results = ctx.need_brancher("tree-grpo").continue_from([r for _, r in asked],
                                             seed=derive_seed(ctx.config.seed, ctx.step, PURPOSE, "play", rnd),
                                             max_new_turns=None, record_snapshots=not last)
        for (tree, request), result in zip(asked, results):
            for leaf in result.trajectories:
                tree.add(leaf, request.turn)
        expanded += len(asked)
    return expanded


def sample_leaves(tree: Tree, k: int, rng: np.random.Generator) -> list[Trajectory]:
    """``k`` leaves without replacement (``sample_leaf``), in the tree's order; all when it has no more."""
    if len(tree.leaves) <= k:
        return list(tree.leaves)
    return [tree.leaves[i] for i in sorted(rng.choice(len(tree.leaves), size=k, replace=False).tolist())]


def normalised(scores: np.ndarray, eps: float) -> np.ndarray:
    """``compute_grpo_outcome_advantage`` on one group: (R - mean) / (unbiased std + eps); one leaf: mean 0
    and std 1; all equal: exactly 0 (the mean of equal floats need not round back to them)."""
    if len(scores) == 1:
        return scores / (1.0 + eps)
    if scores.min() == scores.max():
        return np.zeros_like(scores)
    return (scores - scores.mean()) / (scores.std(ddof=1) + eps)


def leaf_advantages(kept: list[list[Trajectory]], cfg: TreeGRPOConfig, ctx: CreditContext) -> np.ndarray:
    """A_i = inter_i + intra_i for the kept leaves of one task's trees, flattened in tree order."""
    scores = [np.array([trajectory_score(leaf, ctx.config.reward) for leaf in leaves], dtype=np.float64)
              for leaves in kept]
    inter = normalised(np.concatenate(scores), cfg.eps)
    intra = np.concatenate([normalised(s, cfg.eps) for s in scores])
    return inter + intra


class TreeGRPO(CreditAssigner):
    Config = TreeGRPOConfig
    config: TreeGRPOConfig  # the parsed settings of ``Config``
    needs_snapshots = True
    # a single tree still has 1 + N*L leaves to compare, so a group of one is no error here
    needs_groups = False

    def assign(self, batch: Batch, ctx: CreditContext) -> Advantages:
        cfg = self.config
        forests = {gi: [Tree.of(tr) for tr in g.trajectories] for gi, g in enumerate(batch.groups)
                   if g.trajectories and in_win_range(g, cfg.eligible, cfg.eligible_of)}
        expanded = grow(forests, cfg, ctx)
        groups, values, n_kept = [], [], 0
        for gi, forest in forests.items():
            rng = np.random.default_rng(derive_seed(ctx.config.seed, ctx.step, PURPOSE, gi, "leaves"))
            kept = [sample_leaves(tree, cfg.leaves, rng) for tree in forest]
            rows = [leaf for leaves in kept for leaf in leaves]
            adv = leaf_advantages(kept, cfg, ctx)
            groups.append(Group(batch.groups[gi].task_id, rows))
            values.append([np.full(len(leaf.turns), a) for leaf, a in zip(rows, adv)])
            n_kept += len(rows)
        train = Batch(groups)
        metrics = {"credit/tree_leaves": float(sum(len(t.leaves) for f in forests.values() for t in f)),
                   "credit/tree_kept_leaves": float(n_kept), "credit/tree_nodes_expanded": float(expanded)}
        return Advantages(values=broadcast(train, values), train_batch=train, metrics=metrics)
