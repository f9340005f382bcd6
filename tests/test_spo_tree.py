"""SPO-tree: recursive values, edge advantages (rloo and grpo), dropped zero edges, training rows; the tree
grown with a scripted Brancher, the probability mask and whitening over edges, the preset and the seeds."""

from __future__ import annotations

import numpy as np
import pytest

from prover.config import TrainConfig
from prover.credit.base import CreditContext
from prover.credit.spo_tree import Node, SPOTree, SPOTreeConfig, _values, edges, grow
from prover.episodes.branching import BranchResult
from prover.seeding import derive_seed
from prover.types import Batch, Group, ResumePoint, Trajectory, Turn


def path(name: str, n_turns: int) -> Trajectory:
    turns = [Turn(prompt_ids=[1], completion_ids=[5], logprobs=[-1.0], observation="o", completion_text="",
                  action="a", format_valid=True, action_valid=True, reward=0.0, state_key=t) for t in range(n_turns)]
    return Trajectory(name, "t", "", turns=turns)


def tree() -> Node:
    # root -> A (3 turns) -> A1 (won), A2 (lost);  root -> B (leaf, won)
    a = Node(path("A", 3), 0, [Node(path("A1", 5), 3, value=1.0), Node(path("A2", 4), 3, value=0.0)])
    b = Node(path("B", 2), 0, value=1.0)
    return Node(path("root", 0), 0, [a, b])


def test_values_are_recursive_means_of_children():
    root = tree()
    _values(root)
    # V(A) = mean(1, 0) = 0.5; V(root) = mean(V(A), V(B)) = mean(0.5, 1) = 0.75 (not the leaf mean 2/3)
    assert root.children[0].value == 0.5 and root.value == 0.75


def test_rloo_edges():
    root = tree()
    _values(root)
    got = {tr.traj_id: (start, adv) for tr, start, adv in edges(root, "rloo")}
    assert got == {"A": (0, pytest.approx(-0.25)), "B": (0, pytest.approx(0.25)),
                   "A1": (3, pytest.approx(0.5)), "A2": (3, pytest.approx(-0.5))}


def test_grpo_edges_divide_by_the_population_std_of_siblings():
    root = tree()
    _values(root)
    got = {tr.traj_id: adv for tr, _, adv in edges(root, "grpo")}
    # siblings (0.5, 1): population std 0.25; siblings (1, 0): population std 0.5
    assert got == {"A": pytest.approx(-1.0), "B": pytest.approx(1.0), "A1": pytest.approx(1.0),
                   "A2": pytest.approx(-1.0)}


def test_zero_advantage_edges_are_dropped():
    root = Node(path("root", 0), 0, [Node(path("X", 2), 0, value=1.0), Node(path("Y", 2), 0, value=1.0)])
    _values(root)
    assert edges(root, "rloo") == []  # both children equal the parent's value


# -- the tree grown with a scripted Brancher --------------------------------------------------------


def played(name: str, prefix: Trajectory | None, new_turns: int, won: bool = False, finished: bool = True,
           task: str = "t0") -> Trajectory:
    """A continuation: ``prefix``'s turns, then ``new_turns`` own turns of two tokens (p = 0.5 and 0.95)."""
    own = [Turn(prompt_ids=[1], completion_ids=[5, 6], logprobs=list(np.log([0.5, 0.95])), observation="o",
                completion_text="", action=f"{name}{t}", format_valid=True, action_valid=True,
                reward=float(won and finished and t == new_turns - 1), state_key=t) for t in range(new_turns)]
    resume = None if finished else ResumePoint(snapshot=object(), observation="o", admissible=())
    return Trajectory(name, task, "", turns=(list(prefix.turns) if prefix else []) + own, won=won, resume=resume)


class ScriptedTree:
    """Answers each request (trajectory id, turn) with the children written for it; records every call."""

    def __init__(self, children: dict[tuple[str, int], list[Trajectory]]) -> None:
        self.children, self.calls = children, []

    def continue_from(self, requests, seed=0, *, max_new_turns=None, record_snapshots=False):
        self.calls.append(([(r.trajectory.traj_id, r.turn, r.n) for r in requests], seed, max_new_turns,
                           record_snapshots))
        out = []
        for r in requests:
            kids = self.children[(r.trajectory.traj_id, r.turn)]
            assert len(kids) == r.n
            won = np.array([k.won for k in kids])
            out.append(BranchResult(r, won, 0, kids))
        return out


def scripted_trees() -> tuple[Batch, ScriptedTree, dict[str, Trajectory]]:
    """Two tasks, branch factors [2, 2], one turn per level:
    t0: root -> C1 (unfinished) -> C11 (won), C12 (lost, 2 turns);  root -> C2 (finished at depth 0, won)
    t1: root -> D1 (unfinished) -> D11 (won), D12 (won);            root -> D2 (finished at depth 0, lost)"""
    r0, r1 = played("R0", None, 2, won=True), played("R1", None, 2, won=False, task="t1")
    c1, c2 = played("C1", None, 1, finished=False), played("C2", None, 1, won=True)
    c11, c12 = played("C11", c1, 1, won=True), played("C12", c1, 2, won=False)
    d1, d2 = played("D1", None, 1, finished=False, task="t1"), played("D2", None, 1, won=False, task="t1")
    d11, d12 = played("D11", d1, 1, won=True, task="t1"), played("D12", d1, 1, won=True, task="t1")
    brancher = ScriptedTree({("R0", 0): [c1, c2], ("C1", 1): [c11, c12], ("R1", 0): [d1, d2], ("D1", 1): [d11, d12]})
    batch = Batch([Group("t0", [r0, played("R0b", None, 1)]), Group("t1", [r1, played("R1b", None, 1, task="t1")])])
    trajs = {t.traj_id: t for t in (c1, c2, c11, c12, d1, d2, d11, d12)}
    return batch, brancher, trajs


def test_grow_and_assign_with_a_scripted_brancher():
    batch, brancher, t = scripted_trees()
    cfg, ctx = SPOTreeConfig(branch_factors=[2, 2], turns_per_level=1), CreditContext(TrainConfig(seed=5), step=2)
    ctx.brancher = brancher
    root = grow(batch.groups[0].trajectories[0], cfg, ctx, 10.0, 0)
    # reward.scale 10. t0: V(C11) = 10, V(C12) = 0 -> V(C1) = 5; V(C2) = 10 (a leaf at depth 0)
    # V(root) = mean(V(C1), V(C2)) = mean(5, 10) = 7.5 (the mean over leaves would be 20/3)
    assert [c.value for c in root.children] == [5.0, 10.0] and root.value == 7.5
    assert [c.value for c in root.children[0].children] == [10.0, 0.0]
    brancher.calls.clear()
    adv = SPOTree(cfg).assign(batch, ctx)
    # edges (child first, then its subtree), A = V(child) - V(parent):
    # t0: C1 5-7.5 = -2.5 (its turn 0), C11 10-5 = 5 (turn 1), C12 0-5 = -5 (turns 1, 2), C2 10-7.5 = 2.5 (turn 0)
    # t1: V(D1) = mean(10, 10) = 10, V(D2) = 0, V(root) = 5: D1 10-5 = 5, D2 0-5 = -5;
    #     D11 and D12 are 10-10 = 0 exactly: dropped
    train = adv.train_batch
    assert [g.task_id for g in train.groups] == ["t0", "t1"]
    assert [[tr.traj_id for tr in g.trajectories] for g in train.groups] == [
        ["C1/edge", "C11/edge", "C12/edge", "C2/edge"], ["D1/edge", "D2/edge"]]
    c12_row = train.groups[0].trajectories[2]
    assert c12_row.turns == t["C12"].turns[1:] and train.groups[0].trajectories[1].turns == t["C11"].turns[1:]
    two = [[list(a) for a in tr] for g in adv.values for tr in g]  # every turn has two tokens
    assert two == [[[-2.5, -2.5]], [[5, 5]], [[-5, -5], [-5, -5]], [[2.5, 2.5]], [[5, 5]], [[-5, -5]]]
    assert adv.loss_mask is None
    assert adv.metrics == {"credit/tree_edges": 6.0, "credit/tree_leaves": 6.0}  # C11 C12 C2, D11 D12 D2
    # one call per depth and task: bounded and recorded at depth 0, to the end at the last depth
    assert [(asked, turns, rec) for asked, _, turns, rec in brancher.calls] == [
        ([("R0", 0, 2)], 1, True), ([("C1", 1, 2)], None, False),
        ([("R1", 0, 2)], 1, True), ([("D1", 1, 2)], None, False)]
    assert [seed for _, seed, _, _ in brancher.calls] == [
        derive_seed(5, 2, "spo-tree", gi, depth) for gi in (0, 1) for depth in (0, 1)]


def test_tree_probability_mask_and_whitening_over_edges():
    batch, brancher, _ = scripted_trees()
    cfg = SPOTreeConfig(branch_factors=[2, 2], turns_per_level=1, prob_mask=True, whiten=True)
    adv = SPOTree(cfg).assign(Batch(batch.groups[:1]), CreditContext(TrainConfig(), brancher=brancher))
    # t0's edges (see above): C1 -2.5, C11 5, C12 -5 (two turns), C2 2.5; every turn's tokens have p = 0.5
    # (kept) and p = 0.95 (masked). Kept: -2.5, 5, -5, -5, 2.5 -> mean -5/5 = -1
    # deviations -1.5, 6, -4, -4, 3.5; squares 2.25 + 36 + 16 + 16 + 12.25 = 82.5; unbiased var 82.5/4 = 20.625
    s = np.sqrt(20.625)
    assert [m[0] for m in adv.flat()] == pytest.approx([-1.5 / s, 6 / s, -4 / s, -4 / s, 3.5 / s])
    assert [list(m) for m in adv.flat_mask()] == [[1.0, 0.0]] * 5


def test_tree_preset_and_a_user_override():
    cfg = SPOTreeConfig(preset="prover-comparison")
    assert (cfg.eligible, cfg.eligible_of, cfg.whiten, cfg.prob_mask) == ((1, 3), 8, True, True)
    plain = SPOTreeConfig()
    assert (plain.eligible, plain.whiten, plain.prob_mask) == (None, False, False)
    mine = SPOTreeConfig(preset="prover-comparison", whiten=False)
    assert (mine.eligible, mine.whiten, mine.prob_mask) == ((1, 3), False, True)


def test_tree_eligible_scales_with_the_group_size_and_seeds_follow_the_run_seed():
    seeds = []
    for run_seed in (0, 1):
        batch, brancher, _ = scripted_trees()  # groups of 2 with one win (t0) and none (t1)
        cfg = SPOTreeConfig(branch_factors=[2, 2], turns_per_level=1, eligible=(1, 3))
        adv = SPOTree(cfg).assign(batch, CreditContext(TrainConfig(seed=run_seed), brancher=brancher, step=4))
        # (1, 3) of 8 is (1, 1) of 2: only t0 grows a tree
        assert [g.task_id for g in adv.train_batch.groups] == ["t0"]
        seeds.append([seed for _, seed, _, _ in brancher.calls])
    assert seeds[0] != seeds[1] and seeds[1] == [derive_seed(1, 4, "spo-tree", 0, d) for d in (0, 1)]
