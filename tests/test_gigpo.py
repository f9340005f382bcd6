"""GiGPO against a worked vector computed by hand from its definition (docs/methods/gigpo.md)."""

from __future__ import annotations

import difflib
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from prover.config import TrainConfig
from prover.credit.base import CreditContext
from prover.credit.gigpo import GiGPO, GiGPOConfig, anchor_groups, discounted_returns, gigpo_row_advantages
from prover.credit.grpo import segment_stats
from prover.types import Batch, Group, Trajectory, Turn


def traj(name: str, states: list[str], won: bool, n_tokens: int = 2) -> Trajectory:
    turns = [Turn(prompt_ids=[1], completion_ids=[5] * n_tokens, logprobs=[-1.0] * n_tokens, observation=s,
                  completion_text="", action="a", format_valid=True, action_valid=True,
                  reward=1.0 if (won and k == len(states) - 1) else 0.0, state_key=("s", s))
             for k, s in enumerate(states)]
    return Trajectory(traj_id=name, task_id="t", task_text="", turns=turns, won=won)


def worked_batch() -> Batch:
    # A wins (reward 10 at its last turn) through o0, o1, o2; B fails through o0, o3.
    return Batch([Group("t", [traj("A", ["o0", "o1", "o2"], True), traj("B", ["o0", "o3"], False)])])


def per_turn(adv) -> list[float]:
    return [float(a[0]) for a in adv.flat()]


@pytest.mark.parametrize("anchor", ["state_key", "observation"])
def test_worked_vector_mean_norm(anchor):
    adv = GiGPO(GiGPOConfig(mode="mean_norm", anchor=anchor)).assign(worked_batch(), CreditContext(TrainConfig()))
    # A^E: scores [10,10,10,0,0], mean over the 5 rows = 6 -> [4,4,4,-6,-6]
    # A^S: returns [0.95^2*10, 0.95*10, 10, 0, 0] = [9.025, 9.5, 10, 0, 0]; only o0 is shared
    #      (A0, B0): mean 4.5125 -> [4.5125, 0, 0, -4.5125, 0]
    assert per_turn(adv) == pytest.approx([8.5125, 4, 4, -10.5125, -6])


def test_worked_vector_mean_std_norm():
    adv = GiGPO(GiGPOConfig(mode="mean_std_norm")).assign(worked_batch(), CreditContext(TrainConfig()))
    ae = 4 / np.sqrt(30), -6 / np.sqrt(30)  # unbiased std of [10,10,10,0,0] is sqrt(120/4)
    as_ = 4.5125 / np.sqrt(2 * 4.5125**2)  # unbiased std of [9.025, 0] is sqrt(2 * 4.5125^2)
    want = [ae[0] + as_, ae[0], ae[0], ae[1] - as_, ae[1]]
    assert per_turn(adv) == pytest.approx(want, rel=1e-5)
    assert per_turn(adv) == pytest.approx([1.4374, 0.7303, 0.7303, -1.8026, -1.0954], abs=1e-4)


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_worked_vector_in_float64_bit_for_bit(mode):
    # The worked vector again, compared exactly. Every sum below is of integers or of two terms, so
    # these are the only correctly rounded results of the docstring's formulas, whatever the order:
    # A^E (eq. 3): scores [10,10,10,0,0], mean 6, deviations [4,4,4,-6,-6],
    #      unbiased std sqrt((3 * 16 + 2 * 36) / 4) = sqrt(30)
    # R_t (eq. 5, backwards): A: R_2 = 10, R_1 = 0.95 * 10 = 9.5, R_0 = 0.95 * 9.5 (9.025 rounded);
    #      B: 0, 0
    # A^S (eq. 7): only o0 is shared, by A0 and B0: mean R_0 / 2, deviations +-R_0 / 2 ("h"),
    #      unbiased std sqrt(h^2 + h^2); every other row is alone in its state: A^S = 0
    # A (eq. 8, omega 1): [A^E_A + A^S_A0, A^E_A, A^E_A, A^E_B - A^S_A0, A^E_B]
    h = 0.95 * (0.95 * 10.0) / 2
    if mode == "mean_norm":
        ea, eb, s = 4.0, -6.0, h
    else:
        f = math.sqrt(30) + 1e-6
        ea, eb, s = 4 / f, -6 / f, h / (math.sqrt(h * h + h * h) + 1e-6)
    got = gigpo_row_advantages(worked_batch(), CreditContext(TrainConfig()), GiGPOConfig(mode=mode))
    assert got.dtype == np.float64
    assert got.tolist() == [ea + s, ea, ea, eb - s, eb]


def test_segment_statistics_are_verls_torch_mean_and_std_exactly():
    # verl-agent takes a group's statistics as torch.mean(torch.tensor(scores)) and
    # torch.std(torch.tensor([scores])), scores a list of 0-d float64 tensors in row order. The batched
    # segment_stats must give those very bits (np.mean / np.std differ in the last ones), for lengths on
    # torch's scalar, vector and cascade (>= 512) paths, with the segments' rows interleaved.
    rng = np.random.default_rng(0)
    lengths = [1, 2, 3, 5, 7, 8, 9, 17, 33, 100, 513, 1100, 9, 3]
    codes = rng.permutation(np.repeat(np.arange(len(lengths)), lengths))
    values = rng.normal(size=codes.size) * 10 - 0.1
    values[codes == 13] = 0.1  # equal values: 3 * 0.1 / 3 != 0.1, so the std is not 0, yet all are equal
    count, mean, std, same = segment_stats(values, codes, len(lengths))
    for k, n in enumerate(lengths):
        scores = list(torch.from_numpy(values[codes == k]))
        assert count[k] == n and mean[k] == torch.mean(torch.tensor(scores)).item()
        if n > 1:
            assert std[k] == torch.std(torch.tensor([scores])).item()
    assert same.tolist() == [True] + [False] * 12 + [True]  # one value, or all equal


def test_writing_into_one_turns_values_changes_no_other_turn():
    # the per-token arrays are slices of one buffer (grpo.broadcast_rows): they must not overlap
    trajs = [traj("A", ["o0", "o1", "o2"], True, n_tokens=3), traj("B", ["o0", "o3"], False)]
    adv = GiGPO().assign(Batch([Group("t", trajs)]), CreditContext(TrainConfig()))
    before = [a.copy() for a in adv.flat()]
    adv.flat()[1][:] = 99.0
    assert [np.array_equal(a, b) for a, b in zip(adv.flat(), before)] == [True, False, True, True, True]


def test_trajectory_statistics_take_one_score_per_episode():
    adv = GiGPO(GiGPOConfig(mode="mean_norm", episode_stats="trajectory", omega=0.0)).assign(
        worked_batch(), CreditContext(TrainConfig()))
    assert per_turn(adv) == pytest.approx([5, 5, 5, -5, -5])  # mean of (10, 0) is 5


def test_every_token_of_a_turn_gets_its_turn_value():
    batch = Batch([Group("t", [traj("A", ["o0", "o1"], True, n_tokens=4), traj("B", ["o0"], False, n_tokens=3)])])
    adv = GiGPO().assign(batch, CreditContext(TrainConfig()))
    for a, turn in zip(adv.flat(), batch.turns()):
        assert a.shape == (turn.n_tokens,) and np.all(a == a[0])


def test_discounted_returns_by_hand():
    assert discounted_returns(np.array([0.0, 0.0, 10.0]), 0.5) == pytest.approx([2.5, 5.0, 10.0])
    assert discounted_returns(np.array([1.0, 1.0]), 1.0) == pytest.approx([2.0, 1.0])


def test_similarity_clusters_join_the_first_similar_representative():
    keys = ["you see a mug 1", "you see a mug 2", "nothing happens", "you see a cup 1"]
    assert anchor_groups(keys, 0.9) == [[0, 1], [2], [3]]
    assert anchor_groups(keys, None) == [[0], [1], [2], [3]]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.lists(st.sampled_from(["o0", "o1", "o2"]), min_size=1, max_size=5)),
                min_size=1, max_size=5),
       st.sampled_from(["mean_norm", "mean_std_norm"]))
def test_finite_and_exact_zeros_where_defined(spec, mode):
    batch = Batch([Group("t", [traj(f"T{i}", s, w) for i, (w, s) in enumerate(spec)])])
    adv = GiGPO(GiGPOConfig(mode=mode)).assign(batch, CreditContext(TrainConfig()))
    values = per_turn(adv)
    assert all(np.isfinite(values))
    if len({w for w, _ in spec}) == 1 and all(not w for w, _ in spec):
        assert values == [0.0] * len(values)  # all failed: no episode signal and zero returns


def test_similarity_compares_the_new_observation_with_the_representative():
    # difflib's ratio is not symmetric. verl-agent's build_step_group calls are_similar(obs, rep), i.e.
    # SequenceMatcher(None, new observation, cluster representative).ratio() >= thresh.
    # Both strings have 73 characters; ratio = 2 * matched / 146:
    #   ratio(new, rep) = 2 * 51 / 146 = 0.69863   ratio(rep, new) = 2 * 48 / 146 = 0.65753
    rep = "On the countertop 1, you see a mug 1, a knife 2, a apple 3, and a bowl 1."
    new = "On the countertop 1, you see a apple 3, a mug 1, a bowl 1, and a knife 2."
    assert difflib.SequenceMatcher(None, new, rep).ratio() == pytest.approx(102 / 146)
    assert difflib.SequenceMatcher(None, rep, new).ratio() == pytest.approx(96 / 146)
    # thresh 0.68: rep first -> `new` is compared as ratio(new, rep) = 0.699 >= 0.68 and joins
    assert anchor_groups([rep, new], 0.68) == [[0, 1]]
    # `new` first -> `rep` is the newcomer: ratio(rep, new) = 0.658 < 0.68, a cluster of its own
    assert anchor_groups([new, rep], 0.68) == [[0], [1]]


def test_trajectory_statistics_use_the_unpenalised_trajectory_score(make_batch):
    # scale 10, penalty 0.1; every turn has its own state (make_batch), so A^S = 0 and only A^E remains.
    # A won, its FIRST turn format-invalid: rows [9.9, 10]; B lost, one valid turn: row [0].
    # Statistics over R_i = 10 * won = [10, 0]: mean 5, unbiased std sqrt((5^2 + 5^2) / 1) = sqrt(50)
    # = 7.07107.
    # (The first turn's penalised score would give [9.9, 0]: mean 4.95.)
    batch = make_batch([[(True, 2, [False, True]), (False, 1, None)]])
    ctx = CreditContext(TrainConfig())
    mean = GiGPO(GiGPOConfig(mode="mean_norm", episode_stats="trajectory")).assign(batch, ctx)
    assert per_turn(mean) == pytest.approx([4.9, 5.0, -5.0])  # rows [9.9, 10, 0] - 5
    std = GiGPO(GiGPOConfig(mode="mean_std_norm", episode_stats="trajectory")).assign(batch, ctx)
    d = np.sqrt(50) + 1e-6
    assert per_turn(std) == pytest.approx([4.9 / d, 5 / d, -5 / d])  # [0.69296, 0.70711, -0.70711]
    # all lost, a later turn invalid: R = [0, 0] has no variance, so A^E is exactly 0 (not -0.1 / 1e-6)
    lost = make_batch([[(False, 2, [True, False]), (False, 1, None)]])
    zero = GiGPO(GiGPOConfig(mode="mean_std_norm", episode_stats="trajectory")).assign(lost, ctx)
    assert per_turn(zero) == [0.0] * 3


def test_anchor_group_metrics_of_the_worked_batch():
    # o0 is shared by A and B; o1, o2, o3 are one turn each: 4 groups of 5 turns, 3 of them singletons
    adv = GiGPO(GiGPOConfig()).assign(worked_batch(), CreditContext(TrainConfig()))
    assert adv.metrics == {"credit/anchor_groups": 4.0, "credit/anchor_group_size": 5 / 4,
                           "credit/singleton_anchor_share": 3 / 4}


def test_anchor_groups_never_span_task_groups_in_the_metrics():
    # the same states in two tasks' groups are two anchor groups each: (o0 x2, o1) per task -> 4 groups of 6 turns
    groups = [Group(t, [traj(f"{t}A", ["o0", "o1"], True), traj(f"{t}B", ["o0"], False)]) for t in ("t1", "t2")]
    adv = GiGPO(GiGPOConfig()).assign(Batch(groups), CreditContext(TrainConfig()))
    assert adv.metrics == {"credit/anchor_groups": 4.0, "credit/anchor_group_size": 6 / 4,
                           "credit/singleton_anchor_share": 2 / 4}


def test_a_history_key_makes_almost_every_anchor_group_a_singleton():
    # a key that is the history so far (GymnasiumTextEnv's) is shared only by the opening turns: with
    # 4 episodes of 5 turns that part after turn 0, there are 1 + 4 x 4 = 17 groups, 16 of them singletons
    trajs = [traj(name, ["start"] + [f"{name}{k}" for k in range(1, 5)], name == "A") for name in "ABCD"]
    adv = GiGPO(GiGPOConfig()).assign(Batch([Group("t", trajs)]), CreditContext(TrainConfig()))
    assert adv.metrics["credit/anchor_groups"] == 17.0
    assert adv.metrics["credit/singleton_anchor_share"] == 16 / 17


def test_groups_jsonl_shows_each_turns_state_key():
    from prover.rundir.samples import KEY_CHARS, saved_groups

    batch = worked_batch()
    batch.groups[0].trajectories[1].turns[1].state_key = 7  # a number stays a number
    batch.groups[0].trajectories[0].turns[2].state_key = "x" * (KEY_CHARS + 5)  # a long str is cut
    adv = GiGPO(GiGPOConfig()).assign(batch, CreditContext(TrainConfig()))
    [rec] = saved_groups(batch, adv, step=1, n=1)
    keys = [[t["state_key"] for t in tr["turns"]] for tr in rec["trajectories"]]
    # A's and B's first turns print alike: the one shared anchor group of the worked batch
    assert keys == [["('s', 'o0')", "('s', 'o1')", "x" * KEY_CHARS], ["('s', 'o0')", 7]]
