"""Tree-GRPO against numbers worked by hand from its definition (prover/credit/tree_grpo.py,
docs/methods/tree-grpo.md), with a scripted Brancher: the expandable nodes, the seeded node draws and leaf
samples, the rows (whole trajectories from the root), the one-leaf and zero-variance groups, and the
method's registration and settings."""

from __future__ import annotations

import math

import numpy as np
import pytest

from prover.config import TrainConfig
from prover.config_load import load_config
from prover.credit.base import CreditContext
from prover.credit.tree_grpo import Tree, TreeGRPO, TreeGRPOConfig, normalised
from prover.episodes.branching import BranchResult
from prover.errors import CapabilityError
from prover.registry import CREDIT
from prover.seeding import derive_seed
from prover.types import Batch, Group, Trajectory, Turn

EPS = 1e-6


def turn(name: str, t: int, reward: float = 0.0, tokens: int = 2) -> Turn:
    return Turn(prompt_ids=[1], completion_ids=[5] * tokens, logprobs=[-0.5] * tokens, observation="o",
                completion_text="", action=f"{name}{t}", format_valid=True, action_valid=True, reward=reward,
                state_key=(name, t))


def chain(name: str, n_turns: int, won: bool, task: str = "t0", reward: float = 1.0) -> Trajectory:
    turns = [turn(name, t, reward if won and t == n_turns - 1 else 0.0) for t in range(n_turns)]
    return Trajectory(name, task, "", turns=turns, won=won)


class Scripted:
    """The Brancher's interface. Each request is continued by ``new`` turns of its own, and its outcome is the
    next entry of the script of its tree (the chain its path starts from), so the leaves' rewards do not
    depend on which nodes were drawn. Records every call."""

    def __init__(self, outcomes: dict[str, list[bool]], new: int = 1, reward: float = 1.0) -> None:
        self.outcomes = {k: list(v) for k, v in outcomes.items()}
        self.new, self.reward, self.calls = new, reward, []

    def continue_from(self, requests, seed=0, *, max_new_turns=None, record_snapshots=False):
        self.calls.append(([(r.trajectory.traj_id, r.turn, r.n) for r in requests], seed, max_new_turns,
                           record_snapshots))
        out = []
        for r in requests:
            assert r.n == 1 and 0 <= r.turn < len(r.trajectory.turns)  # a node strictly before a path's end
            won = self.outcomes[r.trajectory.traj_id.split("@")[0]].pop(0)
            name = f"{r.trajectory.traj_id}@{r.turn}"
            own = [turn(name, t, self.reward if won and t == self.new - 1 else 0.0) for t in range(self.new)]
            cont = Trajectory(name, r.trajectory.task_id, "", turns=list(r.trajectory.turns[:r.turn]) + own, won=won)
            out.append(BranchResult(r, np.array([won]), 2 * self.new, [cont]))
        return out


def ctx(brancher, seed: int = 0, step: int = 1) -> CreditContext:
    return CreditContext(TrainConfig(seed=seed), brancher=brancher, step=step)  # reward.scale 10


def row_values(adv) -> list[list[float]]:
    """One value per row (leaf), after checking that every token of every turn of the row carries it."""
    out = []
    for group in adv.values:
        for row in group:
            flat = np.concatenate(row) if row else np.array([])
            assert len(set(flat.tolist())) <= 1 and all(a.dtype == np.float32 for a in row)
            out.append(float(flat[0]) if len(flat) else math.nan)
    return out


# -- the nodes a tree can expand ----------------------------------------------------------------------


def test_nodes_are_the_root_and_every_boundary_before_a_paths_end_counted_once():
    c = chain("C", 3, False)
    tree = Tree.of(c)
    # root (t = 0) and the states before turns 1 and 2; the end of the chain (t = 3) is a leaf
    assert [(p.traj_id, t) for p, t in tree.nodes] == [("C", 0), ("C", 1), ("C", 2)]
    # a continuation from before turn 1 with 3 own turns (5 in all): turns 0 and 1 are C's nodes already,
    # its new boundaries are before its turns 2, 3 and 4
    cont = Trajectory("C@1", "t0", "", turns=c.turns[:1] + [turn("x", t) for t in range(4)])
    tree.add(cont, 1)
    assert [(p.traj_id, t) for p, t in tree.nodes] == [("C", 0), ("C", 1), ("C", 2), ("C@1", 2), ("C@1", 3),
                                                       ("C@1", 4)]
    assert tree.leaves == [c, cont]
    assert Tree.of(chain("E", 0, False)).nodes == []  # a chain that ended before its first turn: nothing to restore


# -- hand-worked advantages ---------------------------------------------------------------------------


def test_two_trees_by_hand():
    # group of M = 2 chains: C0 won (2 turns, R = 10), C1 lost (3 turns, R = 0); L = 1 round, N = 2 nodes per tree,
    # K = 3 keeps all 1 + 2 leaves. Continuations: tree 0 won, lost; tree 1 won, lost (R = 10 * won).
    batch = Batch([Group("t0", [chain("C0", 2, True), chain("C1", 3, False)])])
    brancher = Scripted({"C0": [True, False], "C1": [True, False]})
    adv = TreeGRPO(TreeGRPOConfig(rounds=1, expand=2, leaves=3)).assign(batch, ctx(brancher))
    # leaves in tree order: tree 0 [10, 10, 0], tree 1 [0, 10, 0]
    # inter, over all 6: mean 5, deviations +-5, sum of squares 6 * 25 = 150, unbiased var 150 / 5 = 30:
    #   inter = +-5 / (sqrt(30) + 1e-6)
    # intra, tree 0 [10, 10, 0]: mean 20/3, deviations 10/3, 10/3, -20/3, squares (100 + 100 + 400) / 9 = 600/9,
    #   unbiased var 300/9, std 10/sqrt(3): intra = (10/3, 10/3, -20/3) / (10/sqrt(3) + 1e-6)
    #   tree 1 [0, 10, 0]: mean 10/3, deviations -10/3, 20/3, -10/3, the same std: (-10/3, 20/3, -10/3) / (...)
    i = 5 / (math.sqrt(30) + EPS)
    s = 10 / math.sqrt(3) + EPS
    want = [i + (10 / 3) / s, i + (10 / 3) / s, -i - (20 / 3) / s,  # ~ 1.4902, 1.4902, -2.0676
            -i - (10 / 3) / s, i + (20 / 3) / s, -i - (10 / 3) / s]  # ~ -1.4902, 2.0676, -1.4902
    assert row_values(adv) == pytest.approx(want, rel=1e-6)
    assert want[0] == pytest.approx(1.49022, abs=1e-5) and want[2] == pytest.approx(-2.06757, abs=1e-5)
    # the population std (sqrt(25) = 5 over all; sqrt(200/9) in a tree) or inter alone would give other numbers
    assert want[0] != pytest.approx(5 / 5 + (10 / 3) / math.sqrt(200 / 9)) and want[0] != pytest.approx(i)
    assert adv.metrics == {"credit/tree_leaves": 6.0, "credit/tree_kept_leaves": 6.0,
                           "credit/tree_nodes_expanded": 4.0}


def test_one_leaf_groups_use_mean_0_and_std_1():
    # K = 1: each tree keeps one leaf, so its intra group is a group of one: R / (1 + eps) (the reference's
    # mean 0, std 1). Every continuation ends as its tree's chain did, so whichever leaf is kept: R = 10 and 0.
    batch = Batch([Group("t0", [chain("C0", 2, True), chain("C1", 2, False)])])
    brancher = Scripted({"C0": [True, True], "C1": [False, False]})
    adv = TreeGRPO(TreeGRPOConfig(leaves=1)).assign(batch, ctx(brancher))
    # inter over [10, 0]: mean 5, unbiased var (25 + 25) / 1 = 50: +-5 / (sqrt(50) + 1e-6)
    # intra: 10 / (1 + 1e-6) and 0 / (1 + 1e-6)
    i = 5 / (math.sqrt(50) + EPS)
    assert row_values(adv) == pytest.approx([i + 10 / (1 + EPS), -i], rel=1e-7)  # ~ 10.7071, -0.7071
    assert adv.metrics["credit/tree_kept_leaves"] == 2.0 and adv.metrics["credit/tree_leaves"] == 6.0
    # M = 1 and K = 1: both terms are groups of one: 2 R / (1 + eps)
    lone = Batch([Group("t0", [chain("C0", 2, True)])])
    adv = TreeGRPO(TreeGRPOConfig(leaves=1)).assign(lone, ctx(Scripted({"C0": [True, True]})))
    assert row_values(adv) == pytest.approx([2 * 10 / (1 + EPS)], rel=1e-7)


def test_zero_variance_groups_give_exact_zeros():
    # every leaf won with reward 0.01: R = 10 * 0.01 = 0.1 each; (3 * 0.1) / 3 != 0.1, yet exactly 0 (not ~1e-11)
    assert sum([0.1] * 3) / 3 != 0.1
    assert normalised(np.array([0.1] * 3), EPS).tolist() == [0.0] * 3
    batch = Batch([Group("t0", [chain("C0", 2, True, reward=0.01), chain("C1", 3, True, reward=0.01)])])
    brancher = Scripted({"C0": [True, True], "C1": [True, True]}, reward=0.01)
    adv = TreeGRPO().assign(batch, ctx(brancher))
    assert row_values(adv) == [0.0] * 6


# -- the rows ---------------------------------------------------------------------------------------


def test_rows_are_whole_trajectories_from_the_root():
    c0, c1 = chain("C0", 4, True), chain("C1", 3, False)
    brancher = Scripted({"C0": [False, True], "C1": [True, True]}, new=2)
    adv = TreeGRPO(TreeGRPOConfig(expand=2, leaves=3)).assign(Batch([Group("t0", [c0, c1])]), ctx(brancher))
    [(asked, _, _, _)] = brancher.calls
    rows = adv.train_batch.groups[0].trajectories
    assert [g.task_id for g in adv.train_batch.groups] == ["t0"]
    assert rows[0] is c0 and rows[3] is c1  # each tree: its initial chain, then its continuations
    for row, (path, t, _) in zip(rows[1:3] + rows[4:], asked):
        src = {"C0": c0, "C1": c1}[path]
        assert row.traj_id == f"{path}@{t}" and len(row.turns) == t + 2
        assert all(a is b for a, b in zip(row.turns[:t], src.turns[:t]))  # the prefix turns themselves
    assert len(adv.values[0]) == 6 and [len(v) for v in adv.values[0]] == [len(r.turns) for r in rows]
    assert len(adv.flat()) == len(adv.train_batch.turns())


# -- seeds, rounds and leaf samples -----------------------------------------------------------------


def long_batch() -> tuple[Batch, dict[str, list[bool]]]:
    trajs = [chain(f"C{i}", 8, i % 2 == 0) for i in range(3)]
    return Batch([Group("t0", trajs)]), {f"C{i}": [False] * 40 for i in range(3)}


def test_node_draws_are_seeded_by_run_seed_step_and_group():
    def asked(seed: int, step: int):
        batch, script = long_batch()
        brancher = Scripted(script)
        TreeGRPO(TreeGRPOConfig(expand=4)).assign(batch, ctx(brancher, seed, step))
        return brancher.calls

    first = asked(3, 2)
    assert first == asked(3, 2)  # same seed, step, group: same requests and Brancher seed
    assert first[0][0] != asked(3, 5)[0][0] and first[0][0] != asked(4, 2)[0][0]
    [(requests, seed, max_new_turns, record)] = first
    assert len(requests) == 3 * 4 and all(n == 1 for _, _, n in requests)
    assert (seed, max_new_turns, record) == (derive_seed(3, 2, "tree-grpo", "play", 0), None, False)
    # the draws are derive_seed(seed, step, "tree-grpo", group, round)'s stream, tree by tree
    rng = np.random.default_rng(derive_seed(3, 2, "tree-grpo", 0, 0))
    draws = [t for _ in range(3) for t in rng.integers(8, size=4).tolist()]  # every chain has 8 nodes
    assert [t for _, t, _ in requests] == draws


def test_rounds_record_snapshots_before_the_last_and_later_rounds_draw_new_nodes():
    batch, script = long_batch()
    brancher = Scripted(script, new=3)
    adv = TreeGRPO(TreeGRPOConfig(rounds=3, expand=2, leaves=4)).assign(batch, ctx(brancher))
    assert [(turns, rec) for _, _, turns, rec in brancher.calls] == [(None, True), (None, True), (None, False)]
    assert [len(req) for req, _, _, _ in brancher.calls] == [6, 6, 6]
    later = [path for req, _, _, _ in brancher.calls[1:] for path, _, _ in req]
    assert any("@" in p for p in later)  # continuations of earlier rounds are expanded too (with high odds)
    # 1 + N * L = 7 leaves per tree, K = 4 kept: sampled without replacement
    assert adv.metrics == {"credit/tree_leaves": 21.0, "credit/tree_kept_leaves": 12.0,
                           "credit/tree_nodes_expanded": 18.0}
    rows = adv.train_batch.groups[0].trajectories
    assert len({id(r) for r in rows}) == 12


def test_kept_leaves_are_seeded():
    def kept(step: int) -> list[str]:
        batch, script = long_batch()
        adv = TreeGRPO(TreeGRPOConfig(rounds=2, expand=3, leaves=2)).assign(batch, ctx(Scripted(script), 0, step))
        return [(r.traj_id, len(r.turns)) for r in adv.train_batch.groups[0].trajectories]

    assert kept(1) == kept(1) and kept(1) != kept(2)


# -- groups, settings, registration -----------------------------------------------------------------


def test_empty_and_all_failed_groups_and_eligibility():
    failed = [chain("F0", 2, False, "failed"), chain("F1", 3, False, "failed")]
    mixed = [chain("W", 2, True, "mixed"), chain("L", 2, False, "mixed")]
    batch = Batch([Group("empty", []), Group("failed", failed), Group("mixed", mixed)])
    script = {"F0": [False] * 2, "F1": [False] * 2, "W": [True, False], "L": [False, True]}
    adv = TreeGRPO().assign(batch, ctx(Scripted(script)))
    assert [g.task_id for g in adv.train_batch.groups] == ["failed", "mixed"]
    assert row_values(adv)[:6] == [0.0] * 6 and all(np.isfinite(row_values(adv)))
    # eligible [1, 1] of 2 (absolute): only "mixed" (one win of two) grows trees
    script = {"F0": [False] * 2, "F1": [False] * 2, "W": [True, False], "L": [False, True]}
    brancher = Scripted(script)
    adv = TreeGRPO(TreeGRPOConfig(eligible=(1, 1), eligible_of=None)).assign(batch, ctx(brancher))
    assert [g.task_id for g in adv.train_batch.groups] == ["mixed"]
    assert {path for req, *_ in brancher.calls for path, _, _ in req} == {"W", "L"}
    assert TreeGRPO().assign(Batch([]), ctx(Scripted({}))).flat() == []


def test_registered_and_configurable_by_name(tmp_path):
    cfg = load_config(None, ["credit.name=tree-grpo", "credit.rounds=2", "credit.expand=3", "credit.leaves=5",
                             "env.name=pivot-sim", f"run.dir={tmp_path}"])
    method = CREDIT.get("tree-grpo").from_train_config(cfg)
    mine = method.config
    assert isinstance(method, TreeGRPO) and (mine.rounds, mine.expand, mine.leaves) == (2, 3, 5)
    assert method.needs_snapshots and not method.needs_groups
    defaults = TreeGRPOConfig()
    assert (defaults.rounds, defaults.expand, defaults.leaves, defaults.eps, defaults.eligible) == (1, 2, 3, 1e-6, None)
    with pytest.raises(ValueError):
        TreeGRPOConfig(leaves=0)


def test_refused_on_an_env_that_cannot_snapshot(tmp_path):
    from prover.envs.pivot_sim.env import PivotSimEnv
    from prover.registry import ENVS

    class NoSnapshots(PivotSimEnv):  # an env that keeps the contract but cannot snapshot
        can_snapshot = False

    ENVS.register("no-snapshots-tree-grpo-test", NoSnapshots)
    try:
        cfg = load_config(None, ["credit.name=tree-grpo", f"run.dir={tmp_path}"])
        cfg.env.name = "no-snapshots-tree-grpo-test"
        with pytest.raises(CapabilityError, match="cannot snapshot"):
            TreeGRPO.validate_config(cfg)
    finally:
        ENVS.unregister("no-snapshots-tree-grpo-test")
