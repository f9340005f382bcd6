"""SPO-chain for agents: boundaries, segment value differences, probability mask, whitening.

The value source is a scripted stand-in with the Brancher's interface: the values are the inputs of
the worked examples, and the expected advantages are computed by hand from the method's formula.
"""

from __future__ import annotations

import numpy as np
import pytest

from prover.branching import BranchResult
from prover.config import TrainConfig
from prover.credit.base import CreditContext
from prover.credit.spo_chain import SPOChain, SPOChainConfig, boundaries
from prover.types import Batch, Group, Trajectory, Turn


def traj(name: str, n_turns: int, won: bool, probs: list[list[float]] | None = None) -> Trajectory:
    probs = probs or [[0.5, 0.5]] * n_turns
    turns = [Turn(prompt_ids=[1], completion_ids=[5] * len(p), logprobs=list(np.log(p)), observation="o",
                  completion_text="", action="a", format_valid=True, action_valid=True,
                  reward=1.0 if won and t == n_turns - 1 else 0.0, state_key=t, snapshot=object())
             for t, p in enumerate(probs)]
    return Trajectory(traj_id=name, task_id="t", task_text="", turns=turns, won=won)


class ScriptedValues:
    """Answers each branch request with a fixed success rate per (trajectory, turn)."""

    def __init__(self, values: dict[tuple[str, int], float]) -> None:
        self.values, self.asked = values, []

    def continue_from(self, requests, seed=0):
        self.asked += [(r.trajectory.traj_id, r.turn, r.n) for r in requests]
        out = []
        for r in requests:
            v = self.values[(r.trajectory.traj_id, r.turn)]
            won = np.array([k < round(v * r.n) for k in range(r.n)])
            out.append(BranchResult(r, won, won.astype(float), 0, []))
        return out


def per_turn(adv) -> list[float]:
    return [float(a[0]) for a in adv.flat()]


def test_interval_boundaries_and_value_differences():
    cfg = TrainConfig()
    cfg.reward.scale = 1.0
    batch = Batch([Group("t", [traj("A", 5, True), traj("B", 3, False)])])
    values = ScriptedValues({("A", 0): 0.25, ("A", 2): 0.5, ("A", 4): 0.75, ("B", 0): 0.5, ("B", 2): 0.25})
    adv = SPOChain(SPOChainConfig(interval=2, samples=4)).assign(batch, CreditContext(cfg, brancher=values))
    # A: segments [0,2) [2,4) [4,5): 0.5-0.25, 0.75-0.5, R-0.75 = 1-0.75
    # B: segments [0,2) [2,3): 0.25-0.5, R-0.25 = 0-0.25
    assert per_turn(adv) == pytest.approx([0.25, 0.25, 0.25, 0.25, 0.25, -0.25, -0.25, -0.25])
    assert all(n == 4 for *_, n in values.asked) and len(values.asked) == 5


def test_scale_and_eligibility():
    cfg = TrainConfig()  # reward.scale = 10
    batch = Batch([Group("g1", [traj("A", 2, True), traj("B", 2, False)]),
                   Group("g2", [traj("C", 2, True), traj("D", 2, True)])])
    values = ScriptedValues({("A", 0): 0.5, ("B", 0): 0.5})
    adv = SPOChain(SPOChainConfig(interval=2, eligible=(1, 1))).assign(batch, CreditContext(cfg, brancher=values))
    # g1 has one win: A gets 10*(1-0.5), B gets 10*(0-0.5); g2 (two wins) is not eligible: zeros
    assert per_turn(adv) == pytest.approx([5, 5, -5, -5, 0, 0, 0, 0])
    assert {tid for tid, *_ in values.asked} == {"A", "B"}


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


def test_config_refuses_a_branching_method_on_an_env_that_cannot_snapshot():
    from prover.config import load_config
    from prover.envs.base import TextEnv
    from prover.errors import CapabilityError
    from prover.registry import ENVS

    class NoSnapshots(TextEnv):
        can_snapshot = False

    ENVS.register("no-snapshots-test", NoSnapshots)
    try:
        with pytest.raises(CapabilityError, match="'spo-chain'.*'no-snapshots-test'"):
            load_config(None, ["env.name=no-snapshots-test", "credit.name=spo-chain"])
        load_config(None, ["env.name=no-snapshots-test", "credit.name=grpo"])  # GRPO does not branch
    finally:
        ENVS.unregister("no-snapshots-test")
