"""GraphGPO against worked vectors computed by hand from its definition (prover/credit/graphgpo.py,
docs/methods/graphgpo.md), and the credit contract: zero-variance, empty and all-failed groups give zeros,
never NaN; every token of a turn carries one value."""

from __future__ import annotations

import math

import numpy as np
import pytest

from prover.config import TrainConfig
from prover.credit.base import CreditContext
from prover.credit.graphgpo import GraphGPO, GraphGPOConfig, goal_distances, graphgpo_row_advantages
from prover.registry import CREDIT
from prover.types import Batch, Group, Trajectory, Turn


def traj(name: str, states: list[str], won: bool, n_tokens: int = 2, last_reward: float = 1.0,
         valid: bool = True, text: dict[str, str] | None = None) -> Trajectory:
    turns = [Turn(prompt_ids=[1], completion_ids=[5] * n_tokens, logprobs=[-1.0] * n_tokens,
                  observation=(text or {}).get(s, s), completion_text="", action="a", format_valid=valid,
                  action_valid=True, reward=last_reward if (won and k == len(states) - 1) else 0.0,
                  state_key=("s", s)) for k, s in enumerate(states)]
    return Trajectory(traj_id=name, task_id="t", task_text="", turns=turns, won=won)


def worked_batch() -> Batch:
    # A wins through a, b, c; B fails through a, d, b; C fails through a, e (reward 1 at a win's last turn).
    return Batch([Group("t", [traj("A", ["a", "b", "c"], True), traj("B", ["a", "d", "b"], False),
                              traj("C", ["a", "e"], False)])])


def rows(cfg: GraphGPOConfig, batch: Batch | None = None) -> list[float]:
    adv = GraphGPO(cfg).assign(batch or worked_batch(), CreditContext(TrainConfig()))
    return [float(a[0]) for a in adv.flat()]


# By hand. Edges (one per turn): A a->b, b->c, c->GOAL (A scored 10 > 0); B a->d, d->b, b->endB (B's own dead
# end); C a->e, e->endC. Backwards from GOAL: c 1, b 2 (b->c), a 3 and d 3 (a->b, d->b); e, endB and endC
# cannot reach GOAL, so they get 1 + the largest finite distance (3) = 4.
#   row:      A0   A1   A2   B0   B1   B2   C0   C1
#   d_old:     3    2    1    3    3    2    3    4
#   d_new:     2    1    0    3    2    4    4    4
# Step groups by anchor state: a {A0, B0, C0}; b {A1, B2}; c {A2}, d {B1}, e {C1} singletons (step term 0).
# Episode term over the 8 step rows: scores A 10 (x3), B and C 0 (x5): mean 30/8 = 3.75 -> A +6.25, B, C -3.75.


def test_worked_vector_mean_norm():
    # R = 10 * 0.1^d_new: A0 0.1, A1 1, A2 10, B0 0.01, B1 0.1, B2 0.001, C0 0.001, C1 0.001
    # a: mean (0.1 + 0.01 + 0.001)/3 = 0.037 -> A0 +0.063, B0 -0.027, C0 -0.036
    # b: mean (1 + 0.001)/2 = 0.5005 -> A1 +0.4995, B2 -0.4995
    # A0 = 6.25 + 0.063 = 6.313; A1 = 6.25 + 0.4995 = 6.7495; A2 = 6.25
    # B0 = -3.75 - 0.027 = -3.777; B1 = -3.75; B2 = -3.75 - 0.4995 = -4.2495; C0 = -3.786; C1 = -3.75
    want = [6.313, 6.7495, 6.25, -3.777, -3.75, -4.2495, -3.786, -3.75]
    assert rows(GraphGPOConfig(mode="mean_norm")) == pytest.approx(want, rel=1e-6, abs=1e-6)
    got = graphgpo_row_advantages(worked_batch(), CreditContext(TrainConfig()), GraphGPOConfig(mode="mean_norm"))
    assert got.tolist() == pytest.approx(want, rel=1e-12, abs=1e-12)  # float64 rows, before the float32 tokens


def test_worked_vector_mean_std_norm():
    # a: deviations 0.063, -0.027, -0.036; squares 0.003969 + 0.000729 + 0.001296 = 0.005994, / (3-1):
    #    std = sqrt(0.002997) = 0.0547449 -> A0 +1.150793, B0 -0.493197, C0 -0.657596
    # b: two values -> +-1/sqrt(2) = +-0.707107
    # episode: squares 3*6.25^2 + 5*3.75^2 = 117.1875 + 70.3125 = 187.5, / 7 -> std sqrt(26.785714) = 5.175492
    #    A +6.25/5.175492 = +1.207615; B, C -3.75/5.175492 = -0.724569
    s_a, s_e, h = math.sqrt(0.005994 / 2) + 1e-6, math.sqrt(187.5 / 7) + 1e-6, 0.4995 / (math.sqrt(0.499001) + 1e-6)
    ea, eb = 6.25 / s_e, -3.75 / s_e
    want = [ea + 0.063 / s_a, ea + h, ea, eb - 0.027 / s_a, eb, eb - h, eb - 0.036 / s_a, eb]
    assert want[0] == pytest.approx(1.207615 + 1.150793, rel=1e-5)
    assert rows(GraphGPOConfig()) == pytest.approx(want, rel=1e-6, abs=1e-6)


def test_worked_vector_normalize_distance():
    # R = 10 * 0.1^(d_new - d_old + 1): exponents A 0, 0, 0; B 1, 0, 3; C 2, 1
    #    -> A0 10, A1 10, A2 10, B0 1, B1 10, B2 0.01, C0 0.1, C1 1
    # a: mean (10 + 1 + 0.1)/3 = 3.7 -> A0 +6.3, B0 -2.7, C0 -3.6
    # b: mean (10 + 0.01)/2 = 5.005 -> A1 +4.995, B2 -4.995
    step = [6.3, 4.995, 0.0, -2.7, 0.0, -4.995, -3.6, 0.0]
    cfg = GraphGPOConfig(mode="mean_norm", normalize_distance=True, episode_advantage_w=0.0)
    assert rows(cfg) == pytest.approx(step, rel=1e-6, abs=1e-6)
    # with the episode term (+6.25 on A, -3.75 on B and C): A0 12.55, A1 11.245, B0 -6.45, B2 -8.745, C0 -7.35
    want = [12.55, 11.245, 6.25, -6.45, -3.75, -8.745, -7.35, -3.75]
    assert rows(GraphGPOConfig(mode="mean_norm", normalize_distance=True)) == pytest.approx(want, rel=1e-6)


def test_weights_gamma_and_goal_return():
    # gamma 0.5, c 4: R = 4 * 0.5^d_new: A0 1, B0 0.5, C0 0.25 -> a mean 1.75/3 = 0.583333: A0 +0.416667;
    # b: A1 4 * 0.5 = 2, B2 4 * 0.0625 = 0.25 -> +-0.875. w_S 2, w_E 0.5: A0 = 2*0.416667 + 0.5*6.25 = 3.958333
    cfg = GraphGPOConfig(mode="mean_norm", gamma=0.5, goal_return=4.0, step_advantage_w=2.0, episode_advantage_w=0.5)
    got = rows(cfg)
    assert got[0] == pytest.approx(2 * (1 - 1.75 / 3) + 0.5 * 6.25, rel=1e-6)
    assert got[1] == pytest.approx(2 * 0.875 + 0.5 * 6.25, rel=1e-6) and got[5] == pytest.approx(-1.75 - 1.875)


def test_goal_distances_unreachable_is_one_past_the_farthest():
    # 0 -> 1 -> 2 (goal); 3 -> 4 (dead end): 1 and 0 at 1 and 2; 3 and 4 unreachable -> 2 + 1 = 3
    got = goal_distances(np.array([0, 1, 3]), np.array([1, 2, 4]), 5, goal=2)
    assert got.tolist() == [2, 1, 0, 3, 3]
    assert goal_distances(np.array([0]), np.array([2]), 3, goal=1).tolist() == [1, 0, 1]  # no goal: all 1


def test_a_failed_run_through_a_winning_state_shares_its_distance():
    # B fails, but through b, which leads to the goal in A: d(b) = 1, d(a) = d(x) = 2, B's dead end 2 + 1 = 3.
    # B0 (x->b) earns 10 * 0.1^1 = 1 as A0 (a->b) does (both singleton step groups: 0). At b, A1 (b->GOAL) earns
    # 10 and B1 (b->end) 10 * 0.1^3 = 0.01: mean 5.005 -> +-4.995.
    batch = Batch([Group("t", [traj("A", ["a", "b"], True), traj("B", ["x", "b"], False)])])
    got = rows(GraphGPOConfig(mode="mean_norm", episode_advantage_w=0.0), batch)
    assert got == pytest.approx([0.0, 4.995, 0.0, -4.995], rel=1e-6)


def test_zero_variance_groups_give_exact_zeros_even_when_the_mean_does_not_round_back():
    # Three wins through the same states, score 0.1 each (reward 0.01, scale 10): 6 rows of 0.1 and
    # (6 * 0.1) / 6 != 0.1; every step group and the episode pool have no spread, so exactly 0.
    assert sum([0.1] * 6) / 6 != 0.1
    batch = Batch([Group("t", [traj(n, ["a", "b"], True, last_reward=0.01) for n in "PQR"])])
    for cfg in (GraphGPOConfig(), GraphGPOConfig(mode="mean_norm", normalize_distance=True)):
        assert graphgpo_row_advantages(batch, CreditContext(TrainConfig()), cfg).tolist() == [0.0] * 6


@pytest.mark.parametrize("cfg", [GraphGPOConfig(), GraphGPOConfig(mode="mean_norm", normalize_distance=True),
                                 GraphGPOConfig(anchor="observation", similarity_thresh=0.9)])
def test_empty_all_failed_and_singleton_groups_give_zeros_or_finite_values(cfg):
    # all failed: no goal, every distance 1, every return 10 * 0.1 = 1: no spread anywhere, so 0
    failed = [traj("F1", ["a", "b"], False), traj("F2", ["a", "c", "d"], False)]
    lone = traj("L", ["z"], True)  # a task with one one-turn episode: its step group is a singleton
    batch = Batch([Group("empty", []), Group("failed", failed), Group("lone", [lone])])
    adv = GraphGPO(cfg).assign(batch, CreditContext(TrainConfig()))
    values = adv.flat()
    assert len(values) == 6 and all(np.isfinite(v).all() for v in values)
    assert all(np.all(v == 0.0) for v in values[:5])
    assert adv.values[0] == []
    # the lone row: its episode pool of one row keeps its raw score, 10 (departure 5)
    assert float(values[5][0]) == pytest.approx(10.0, rel=1e-6)


def test_empty_batch_and_every_token_of_a_turn_carries_one_value():
    assert GraphGPO().assign(Batch([]), CreditContext(TrainConfig())).flat() == []
    batch = Batch([Group("t", [traj("A", ["a", "b", "c"], True, n_tokens=3), traj("B", ["a", "b"], False, n_tokens=5),
                               traj("C", ["a", "c"], True, n_tokens=1, valid=False)])])
    adv = GraphGPO().assign(batch, CreditContext(TrainConfig()))
    for values, turn in zip(adv.flat(), batch.turns()):
        assert values.shape == (turn.n_tokens,) and values.dtype == np.float32
        assert np.all(values == values[0]) and np.isfinite(values).all()


def test_similar_observations_merge_graph_nodes_but_not_step_groups():
    # A wins via "room 1" -> goal; B passes "room 1." (a different state, nearly the same text) and fails.
    # Exact: B0's next node "room 1." cannot reach the goal (3 -> 10*0.1^3 = 0.01 vs A0's 10*0.1^1 = 1).
    # Merged at 0.9 (ratio 12/13 = 0.92): B0 also moves to the node one edge from the goal (1 and 1).
    text = {"r1": "room 1", "r1.": "room 1."}
    batch = Batch([Group("t", [traj("A", ["s", "r1"], True, text=text), traj("B", ["s", "r1."], False, text=text)])])
    base = dict(mode="mean_norm", episode_advantage_w=0.0, anchor="observation")
    assert rows(GraphGPOConfig(**base), batch)[0] == pytest.approx(0.495, rel=1e-6)  # s: (1 - 0.01)/2
    merged = rows(GraphGPOConfig(**base, similarity_thresh=0.9), batch)
    # s: 1 and 1 -> 0; "room 1" and "room 1." stay separate step groups (singletons) -> 0
    assert merged == [0.0, 0.0, 0.0, 0.0]


def test_registered_and_configurable_by_name():
    cls = CREDIT.get("graphgpo")
    assert cls is GraphGPO and cls.needs_groups
    cfg = TrainConfig.model_validate({"credit": {"name": "graphgpo", "normalize_distance": True, "gamma": 0.2}})
    assert cls.from_train_config(cfg).config == GraphGPOConfig(normalize_distance=True, gamma=0.2)
