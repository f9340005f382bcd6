"""HGPO against worked vectors computed by hand from its definition (prover/credit/hgpo.py, docs/methods/hgpo.md),
and the credit contract: zero-variance, empty and all-failed groups give zeros, never NaN."""

from __future__ import annotations

import numpy as np
import pytest

from prover.config import TrainConfig
from prover.credit.base import CreditContext
from prover.credit.hgpo import HGPO, HGPOConfig, hgpo_row_advantages
from prover.registry import CREDIT
from prover.types import Batch, Group, Trajectory, Turn

EPS = 1e-6


def traj(name: str, states: list[str], won: bool, n_tokens: int = 2, last_reward: float = 1.0,
         valid: bool = True) -> Trajectory:
    turns = [Turn(prompt_ids=[1], completion_ids=[5] * n_tokens, logprobs=[-1.0] * n_tokens, observation=s,
                  completion_text="", action="a", format_valid=valid, action_valid=True,
                  reward=last_reward if (won and k == len(states) - 1) else 0.0, state_key=("s", s))
             for k, s in enumerate(states)]
    return Trajectory(traj_id=name, task_id="t", task_text="", turns=turns, won=won)


def worked_batch() -> Batch:
    # A wins through a, b, c; B fails through a, b, d; D wins through e, b, d (rewards 10 at the last turn).
    return Batch([Group("t", [traj("A", ["a", "b", "c"], True), traj("B", ["a", "b", "d"], False),
                              traj("D", ["e", "b", "d"], True)])])


def rows(cfg: HGPOConfig, batch: Batch | None = None) -> list[float]:
    adv = HGPO(cfg).assign(batch or worked_batch(), CreditContext(TrainConfig()))
    return [float(a[0]) for a in adv.flat()]


def agg(pairs: list[tuple[float, float]]) -> float:
    """sum w a / (sum w + eps) over the non-zero items (weight, advantage)."""
    pairs = [(w, a) for w, a in pairs if a != 0.0]
    return sum(w * a for w, a in pairs) / (sum(w for w, _ in pairs) + EPS) if pairs else 0.0


# By hand, gamma 0.95, scale 10. Returns R (backwards): A [0.95*9.5, 9.5, 10] = [9.025, 9.5, 10],
# B [0, 0, 0], D [9.025, 9.5, 10]. Level groups (l = earlier turns shared), within the task group:
#   l=0 (current state): a {A0 9.025, B0 0}; e {D0}; b {A1 9.5, B1 0, D1 9.5}; c {A2}; d {B2 0, D2 10}
#   l=1 (previous, current): (a,b) {A1, B1}; (e,b) {D1}; (b,c) {A2}; (b,d) {B2, D2}
#   l=2: (a,b,c) {A2}; (a,b,d) {B2}; (e,b,d) {D2}: all singletons, no item
# Weights (l + 2)^1: w0 = 2, w1 = 3, w2 = 4; the base group (if on) w = 1.


def test_worked_vector_mean_norm():
    # l=0 means: a 9.025/2 = 4.5125; b 19/3 = 6.3333; d 5.  l=1 means: (a,b) 4.75; (b,d) 5.
    # A0 = 2*4.5125 / 2 = 4.5125                       B0 = -4.5125
    # A1 = (2*(9.5-19/3) + 3*4.75) / 5 = (6.3333 + 14.25) / 5 = 4.116667
    # B1 = (2*(-19/3) + 3*(-4.75)) / 5 = (-12.6667 - 14.25) / 5 = -5.383333
    # D1 = 2*(9.5-19/3) / 2 = 3.166667   (e,b) is a singleton
    # A2 = 0 (c and (b,c) singletons); B2 = (2*-5 + 3*-5)/5 = -5; D2 = +5; D0 = 0 (e singleton)
    want = [4.5125, 4.116667, 0.0, -4.5125, -5.383333, -5.0, 0.0, 3.166667, 5.0]
    assert rows(HGPOConfig(mode="mean_norm")) == pytest.approx(want, rel=1e-5, abs=1e-6)
    exact = [agg([(2, 4.5125)]), agg([(2, 9.5 - 19 / 3), (3, 4.75)]), 0.0, agg([(2, -4.5125)]),
             agg([(2, -19 / 3), (3, -4.75)]), agg([(2, -5), (3, -5)]), 0.0, agg([(2, 9.5 - 19 / 3)]),
             agg([(2, 5), (3, 5)])]
    got = hgpo_row_advantages(worked_batch(), CreditContext(TrainConfig()), HGPOConfig(mode="mean_norm"))
    assert got.tolist() == pytest.approx(exact, rel=1e-12, abs=1e-12)  # float64 rows, before the float32 tokens


def test_worked_vector_mean_std_norm():
    # Population std: a [9.025, 0] -> 4.5125, so +-1; (a,b), d, (b,d): two values -> +-1.
    # b [9.5, 0, 9.5]: deviations [19/6, -19/3, 19/6], var (2*(19/6)^2 + (19/3)^2)/3 = 2*(19/6)^2,
    #   std 19*sqrt(2)/6 -> A1, D1: 1/sqrt(2) = 0.707107; B1: -sqrt(2) = -1.414214
    # A1 = (2*0.707107 + 3*1)/5 = 0.882843; B1 = (2*-1.414214 + 3*-1)/5 = -1.165685; D1 = 0.707107
    want = [1.0, 0.882843, 0.0, -1.0, -1.165685, -1.0, 0.0, 0.707107, 1.0]
    assert rows(HGPOConfig()) == pytest.approx(want, rel=1e-5, abs=1e-6)


def test_worked_vector_base_group():
    # Base (mean_norm): every step row's score, A and D rows 10, B rows 0: mean 60/9 = 6.6667,
    # so A, D rows +3.3333 and B rows -6.6667, each an item of weight 1:
    # A0 = (3.3333 + 2*4.5125)/3 = 4.119444      B0 = (-6.6667 - 2*4.5125)/3 = -5.230556
    # A1 = (3.3333 + 2*3.1667 + 3*4.75)/6 = 3.986111   B1 = (-6.6667 - 12.6667 - 14.25)/6 = -5.597222
    # A2 = 3.3333/1 = 3.333333 (only the base)      B2 = (-6.6667 - 10 - 15)/6 = -5.277778
    # D0 = 3.333333; D1 = (3.3333 + 6.3333)/3 = 3.222222; D2 = (3.3333 + 10 + 15)/6 = 4.722222
    want = [4.119444, 3.986111, 3.333333, -5.230556, -5.597222, -5.277778, 3.333333, 3.222222, 4.722222]
    assert rows(HGPOConfig(mode="mean_norm", base_group=True)) == pytest.approx(want, rel=1e-5, abs=1e-6)


def test_alpha_zero_weighs_levels_alike_and_history_zero_is_one_level():
    # alpha 0: A1 = (3.1667 + 4.75)/2 = 3.958333; B1 = (-6.3333 - 4.75)/2 = -5.541667
    got = rows(HGPOConfig(mode="mean_norm", length_weight_alpha=0.0))
    assert got[1] == pytest.approx(3.958333, rel=1e-5) and got[4] == pytest.approx(-5.541667, rel=1e-5)
    # history_length 0: only l=0, so each row is its state group's centred return (B2 = -5, D2 = +5)
    got = rows(HGPOConfig(mode="mean_norm", history_length=0))
    assert got == pytest.approx([4.5125, 19 / 6, 0, -4.5125, -19 / 3, -5, 0, 19 / 6, 5], rel=1e-5, abs=1e-6)


def test_a_member_at_its_group_mean_is_left_out_of_the_weights():
    # b holds returns [10, 5, 0] (wins at b with rewards 1 and 0.5, and a loss): the middle member's l=0
    # advantage is exactly 0, so M1 gets only its l=1 item (a,b) {M1 5, N1 0}: 3*2.5/3 = 2.5, not 3*2.5/5
    batch = Batch([Group("t", [traj("W", ["x", "b"], True), traj("M", ["a", "b"], True, last_reward=0.5),
                               traj("N", ["a", "b"], False)])])
    got = rows(HGPOConfig(mode="mean_norm"), batch)
    assert got[3] == pytest.approx(2.5, rel=1e-5)


def test_zero_variance_groups_give_exact_zeros_even_when_the_mean_does_not_round_back():
    # Three wins through the same states with a return of 0.1 at the last turn (reward 0.01, scale 10):
    # 0.1 + 0.1 + 0.1 = 0.30000000000000004 and / 3 != 0.1; every group has no spread, so exactly 0.
    assert (0.1 + 0.1 + 0.1) / 3 != 0.1
    batch = Batch([Group("t", [traj(n, ["a", "b"], True, last_reward=0.01) for n in "PQR"])])
    for cfg in (HGPOConfig(base_group=True), HGPOConfig(mode="mean_norm", base_group=True)):
        got = hgpo_row_advantages(batch, CreditContext(TrainConfig()), cfg)
        assert got.tolist() == [0.0] * 6


@pytest.mark.parametrize("cfg", [HGPOConfig(), HGPOConfig(mode="mean_norm", base_group=True),
                                 HGPOConfig(base_group=True, history_length=4, anchor="observation")])
def test_empty_all_failed_and_singleton_groups_give_zeros_or_finite_values(cfg):
    failed = [traj("F1", ["a", "b"], False), traj("F2", ["a", "c", "d"], False)]
    lone = traj("L", ["z"], True)  # a task with one one-turn episode: every level a singleton
    batch = Batch([Group("empty", []), Group("failed", failed), Group("lone", [lone])])
    adv = HGPO(cfg).assign(batch, CreditContext(TrainConfig()))
    values = adv.flat()
    assert len(values) == 6 and all(np.isfinite(v).all() for v in values)
    assert all(np.all(v == 0.0) for v in values[:5])
    assert adv.values[0] == []
    # the lone row: no level has two members; only the base pool of one row (mean 0, std 1) gives an item
    assert float(values[5][0]) == (pytest.approx(10.0, rel=1e-5) if cfg.base_group else 0.0)


def test_empty_batch_and_every_token_of_a_turn_carries_one_value():
    assert HGPO().assign(Batch([]), CreditContext(TrainConfig())).flat() == []
    batch = Batch([Group("t", [traj("A", ["a", "b", "c"], True, n_tokens=3), traj("B", ["a", "b"], False, n_tokens=5),
                               traj("C", ["a", "c"], True, n_tokens=1, valid=False)])])
    adv = HGPO(HGPOConfig(base_group=True)).assign(batch, CreditContext(TrainConfig()))
    for values, turn in zip(adv.flat(), batch.turns()):
        assert values.shape == (turn.n_tokens,) and values.dtype == np.float32
        assert np.all(values == values[0]) and np.isfinite(values).all()


def test_state_key_and_observation_anchors_differ_where_text_collides():
    # Two different states both observed as "Nothing happens.": by state_key they are separate singleton
    # groups (0), by observation one group of a win and a loss (+-).
    a = Trajectory("A", "t", "", won=True, turns=[Turn([1], [5], [-1.0], "Nothing happens.", "", "a", True, True,
                                                       1.0, "s1")])
    b = Trajectory("B", "t", "", won=False, turns=[Turn([1], [5], [-1.0], "Nothing happens.", "", "a", True, True,
                                                        0.0, "s2")])
    batch = Batch([Group("t", [a, b])])
    assert rows(HGPOConfig(mode="mean_norm"), batch) == [0.0, 0.0]
    assert rows(HGPOConfig(mode="mean_norm", anchor="observation"), batch) == pytest.approx([5.0, -5.0], rel=1e-5)


def test_registered_and_configurable_by_name():
    cls = CREDIT.get("hgpo")
    assert cls is HGPO and cls.needs_groups
    cfg = TrainConfig.model_validate({"credit": {"name": "hgpo", "length_weight_alpha": 0.5, "base_group": True}})
    assert cls.from_train_config(cfg).config == HGPOConfig(length_weight_alpha=0.5, base_group=True)
