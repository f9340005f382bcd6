"""SPO-chain for agents: boundaries, segment value differences, probability mask, whitening, one value per
distinct boundary state, the win range, the ProVer-comparison preset and the branch seed.

The value source is a scripted stand-in with the Brancher's interface: the values are the inputs of
the worked examples, and the expected advantages are computed by hand from the method's formula.
"""

from __future__ import annotations

import numpy as np
import pytest

from prover.config import TrainConfig
from prover.credit.base import CreditContext
from prover.credit.spo_chain import SPOChain, SPOChainConfig, boundaries
from prover.episodes.branching import BranchResult
from prover.seeding import derive_seed
from prover.types import Batch, Group, Trajectory, Turn


def traj(name: str, n_turns: int, won: bool, probs: list[list[float]] | None = None,
         actions: list[str] | None = None) -> Trajectory:
    """``n_turns`` turns; by default every action is ``name + turn`` (no two trajectories share a state after
    turn 0) and every turn has two tokens of probability 0.5."""
    probs = probs or [[0.5, 0.5]] * n_turns
    actions = actions or [f"{name}{t}" for t in range(n_turns)]
    turns = [Turn(prompt_ids=[1], completion_ids=[5] * len(p), logprobs=list(np.log(p)), observation="o",
                  completion_text="", action=actions[t], format_valid=True, action_valid=True,
                  reward=1.0 if won and t == n_turns - 1 else 0.0, state_key=t, snapshot=object())
             for t, p in enumerate(probs)]
    return Trajectory(traj_id=name, task_id="t", task_text="", turns=turns, won=won)


class ScriptedValues:
    """Answers each branch request with a fixed success rate per (trajectory, turn)."""

    def __init__(self, values: dict[tuple[str, int], float]) -> None:
        self.values, self.asked, self.seeds = values, [], []

    def continue_from(self, requests, seed=0):
        self.asked += [(r.trajectory.traj_id, r.turn, r.n) for r in requests]
        self.seeds.append(seed)
        out = []
        for r in requests:
            v = self.values[(r.trajectory.traj_id, r.turn)]
            won = np.array([k < round(v * r.n) for k in range(r.n)])
            out.append(BranchResult(r, won, 0, []))
        return out


def per_turn(adv) -> list[float]:
    return [float(a[0]) for a in adv.flat()]


def test_interval_boundaries_and_value_differences():
    cfg = TrainConfig()
    cfg.reward.scale = 1.0
    batch = Batch([Group("t", [traj("A", 5, True), traj("B", 3, False)])])
    values = ScriptedValues({("A", 0): 0.25, ("A", 2): 0.5, ("A", 4): 0.75, ("B", 2): 0.25})
    adv = SPOChain(SPOChainConfig(interval=2, samples=4)).assign(batch, CreditContext(cfg, brancher=values))
    # V(s_0) is shared by the group, valued once from A: 0.25
    # A: segments [0,2) [2,4) [4,5): 0.5-0.25, 0.75-0.5, R-0.75 = 1-0.75
    # B: segments [0,2) [2,3): 0.25-0.25, R-0.25 = 0-0.25
    assert per_turn(adv) == pytest.approx([0.25, 0.25, 0.25, 0.25, 0.25, 0.0, 0.0, -0.25])
    assert values.asked == [("A", 0, 4), ("A", 2, 4), ("A", 4, 4), ("B", 2, 4)]


def test_scale_and_eligibility():
    cfg = TrainConfig()  # reward.scale = 10
    batch = Batch([Group("g1", [traj("A", 2, True), traj("B", 2, False)]),
                   Group("g2", [traj("C", 2, True), traj("D", 2, True)])])
    values = ScriptedValues({("A", 0): 0.5, ("B", 0): 0.5})
    adv = SPOChain(SPOChainConfig(interval=2, eligible=(1, 1))).assign(batch, CreditContext(cfg, brancher=values))
    # g1 has one win: A gets 10*(1-0.5), B gets 10*(0-0.5); g2 (two wins) is not eligible: zeros
    assert per_turn(adv) == pytest.approx([5, 5, -5, -5, 0, 0, 0, 0])
    assert values.asked == [("A", 0, 4)]  # g1's one boundary state (turn 0), valued once for A and B


def test_probability_guided_boundaries():
    cfg = SPOChainConfig(prob_guided=True, interval=1)
    t = traj("A", 4, True, probs=[[0.95, 0.99], [0.5, 0.99], [0.97, 0.92], [0.3, 0.95]])
    assert boundaries(t, cfg) == [0, 1, 3]  # turns 1 and 3 hold a token with p < 0.9, plus turn 0
    assert boundaries(t, SPOChainConfig(prob_guided=True, interval=2)) == [0, 1]  # every 2nd of [1, 3]


def test_probability_mask_removes_confident_tokens_and_whitening_uses_kept_ones():
    cfg = TrainConfig()
    cfg.reward.scale = 1.0
    batch = Batch([Group("t", [traj("A", 1, True, probs=[[0.95, 0.5]]), traj("B", 1, False, probs=[[0.3, 0.99]])])])
    values = ScriptedValues({("A", 0): 0.5, ("B", 0): 0.5})
    adv = SPOChain(SPOChainConfig(interval=1, prob_mask=True, whiten=True)).assign(
        batch, CreditContext(cfg, brancher=values))
    assert [list(m) for m in adv.flat_mask()] == [[0.0, 1.0], [1.0, 0.0]]
    # raw advantages: A +0.5 on both tokens, B -0.5; kept tokens: A's second (+0.5), B's first (-0.5)
    # mean 0, unbiased std sqrt(0.5) -> whitened +-0.5/sqrt(0.5 + 1e-8)
    a, b = adv.flat()
    assert a[1] == pytest.approx(0.5 / np.sqrt(0.5)) and b[0] == pytest.approx(-0.5 / np.sqrt(0.5))


def test_whitening_leaves_ineligible_groups_at_exactly_zero():
    cfg = TrainConfig()
    cfg.reward.scale = 1.0
    g1 = Group("g1", [traj("A", 2, True, probs=[[0.5, 0.95], [0.5]]), traj("B", 1, False, probs=[[0.5]])])
    g2 = Group("g2", [traj("C", 1, True, probs=[[0.5]]), traj("D", 1, True, probs=[[0.5]])])
    values = ScriptedValues({("A", 0): 0.25, ("B", 0): 0.25, ("A", 1): 0.5})  # B@0 is A@0's state
    method = SPOChain(SPOChainConfig(interval=1, eligible=(1, 3), prob_mask=True, whiten=True))
    adv = method.assign(Batch([g1, g2]), CreditContext(cfg, brancher=values))
    # eligible (1, 3) of 8 is (1, 1) for groups of 2: g1 (one win) is in, g2 (two wins) is out.
    # g1 raw: A turn 0 = V(A@1) - V(s_0) = 0.5 - 0.25 = 0.25 (two tokens, the p=0.95 one masked),
    #         A turn 1 = R - V(A@1) = 1 - 0.5 = 0.5,  B turn 0 = R - V(s_0) = 0 - 0.25 = -0.25
    # kept tokens of assigned trajectories: 0.25, 0.5, -0.25 (g2's kept tokens are not counted)
    # mean = 0.5/3 = 1/6; deviations 1/12, 4/12, -5/12; unbiased var = (1 + 16 + 25)/144 / 2 = 21/144
    # whitened = deviation / sqrt(var) = 1/sqrt(21), 4/sqrt(21), -5/sqrt(21); A's masked token: 1/sqrt(21)
    a0, a1, b0, c0, d0 = adv.flat()
    r = np.sqrt(21.0)
    assert list(a0) == pytest.approx([1 / r, 1 / r]) and list(a1) == pytest.approx([4 / r])
    assert list(b0) == pytest.approx([-5 / r])
    assert np.all(c0 == 0.0) and np.all(d0 == 0.0)  # exactly 0, not (0 - mean) / std
    assert [list(m) for m in adv.flat_mask()] == [[1.0, 0.0], [1.0], [1.0], [1.0], [1.0]]


def test_each_distinct_boundary_state_is_valued_once():
    cfg = TrainConfig()
    cfg.reward.scale = 1.0
    group = Group("g", [traj("A", 3, True, actions=["x", "y", "z"]), traj("B", 4, False, actions=["x", "y", "w", "v"]),
                        traj("C", 3, True, actions=["x", "q", "r"]), traj("D", 1, False, actions=["p"])])
    values = ScriptedValues({("A", 0): 0.5, ("A", 2): 0.25, ("C", 2): 0.75})
    adv = SPOChain(SPOChainConfig(interval=2)).assign(Batch([group]), CreditContext(cfg, brancher=values))
    # boundaries: A, B, C at [0, 2], D at [0]. States: before turn 0 one for the group (sent from A);
    # before turn 2: A and B both played (x, y) -> one state (sent from A); C played (x, q) -> its own
    assert values.asked == [("A", 0, 4), ("A", 2, 4), ("C", 2, 4)]
    # V(s_0) = 0.5, V(xy) = 0.25, V(xq) = 0.75
    # A: [0,2) 0.25-0.5 = -0.25, [2,3) 1-0.25 = 0.75;   B: [0,2) -0.25, [2,4) 0-0.25 = -0.25
    # C: [0,2) 0.75-0.5 = 0.25,  [2,3) 1-0.75 = 0.25;   D: [0,1) 0-0.5 = -0.5
    assert per_turn(adv) == pytest.approx([-0.25, -0.25, 0.75, -0.25, -0.25, -0.25, -0.25, 0.25, 0.25, 0.25, -0.5])
    assert adv.metrics["credit/boundaries"] == 3.0 and adv.metrics["credit/boundary_uses"] == 7.0


def test_eligible_scales_with_the_group_size():
    cfg = TrainConfig()
    cfg.reward.scale = 1.0
    two_wins = Group("g1", [traj("A", 1, True), traj("B", 1, True), traj("C", 1, False), traj("D", 1, False)])
    one_win = Group("g2", [traj("E", 1, True), traj("F", 1, False), traj("G", 1, False), traj("H", 1, False)])
    values = ScriptedValues({("A", 0): 0.5, ("E", 0): 0.25})
    adv = SPOChain(SPOChainConfig(interval=1, eligible=(1, 3))).assign(
        Batch([two_wins, one_win]), CreditContext(cfg, brancher=values))
    # (1, 3) of 8 is (ceil(4/8), floor(12/8)) = (1, 1) of 4: g1 (2 wins) is out, g2 (1 win) is in
    # g2: E = 1 - 0.25 = 0.75, F, G, H = 0 - 0.25 = -0.25
    assert per_turn(adv) == pytest.approx([0, 0, 0, 0, 0.75, -0.25, -0.25, -0.25])
    assert values.asked == [("E", 0, 4)]
    absolute = ScriptedValues({("A", 0): 0.5, ("E", 0): 0.25})
    SPOChain(SPOChainConfig(interval=1, eligible=(1, 3), eligible_of=None)).assign(
        Batch([two_wins, one_win]), CreditContext(cfg, brancher=absolute))
    assert absolute.asked == [("A", 0, 4), ("E", 0, 4)]  # 1 to 3 wins as counts: both groups


def test_prover_comparison_preset_sets_eligible_whiten_and_mask():
    cfg = SPOChainConfig(preset="prover-comparison")
    assert (cfg.eligible, cfg.eligible_of, cfg.whiten, cfg.prob_mask) == ((1, 3), 8, True, True)
    plain = SPOChainConfig()
    assert (plain.eligible, plain.whiten, plain.prob_mask) == (None, False, False)


def test_a_field_set_by_the_user_wins_over_the_preset():
    from prover.config_load import load_config

    train = load_config(None, ["credit.name=spo-chain", "credit.preset=prover-comparison", "credit.whiten=false"])
    cfg = SPOChain.from_train_config(train).config
    assert (cfg.eligible, cfg.whiten, cfg.prob_mask) == ((1, 3), False, True)
    cfg = SPOChainConfig(preset="prover-comparison", eligible=None, prob_mask=False)
    assert (cfg.eligible, cfg.whiten, cfg.prob_mask) == (None, True, False)


def test_the_branch_seed_follows_the_run_seed():
    seeds = []
    for run_seed in (0, 1, 1):
        values = ScriptedValues({("A", 0): 0.5, ("B", 0): 0.5})
        batch = Batch([Group("t", [traj("A", 2, True), traj("B", 2, False)])])
        SPOChain(SPOChainConfig(interval=2)).assign(batch, CreditContext(TrainConfig(seed=run_seed), brancher=values,
                                                                         step=3))
        seeds.append(values.seeds)
    assert seeds[0] != seeds[1] and seeds[1] == seeds[2]  # run seeds 0 and 1 branch differently; 1 again repeats
    assert seeds[1] == [derive_seed(1, 3, "spo-chain")]


def test_config_refuses_a_branching_method_on_an_env_that_cannot_snapshot():
    from prover.config_load import load_config
    from prover.envs.pivot_sim.env import PivotSimEnv
    from prover.errors import CapabilityError
    from prover.registry import ENVS

    class NoSnapshots(PivotSimEnv):  # an env that keeps the contract but cannot snapshot
        can_snapshot = False

    ENVS.register("no-snapshots-test", NoSnapshots)
    try:
        with pytest.raises(CapabilityError, match="'spo-chain'.*'no-snapshots-test'"):
            load_config(None, ["env.name=no-snapshots-test", "credit.name=spo-chain"])
        load_config(None, ["env.name=no-snapshots-test", "credit.name=grpo"])  # GRPO does not branch
    finally:
        ENVS.unregister("no-snapshots-test")
