"""GRPO advantages against hand computations from the definition (docs/methods/grpo.md).

Row score of turn t of trajectory i:  scale * won_i - invalid_penalty * (not format_valid_t)
                                      = 10 * won - 0.1 * invalid   (the defaults)
norm=std:  A = (score - mean) / (std + 1e-6), std unbiased (divide by n - 1)
norm=mean: A =  score - mean
stats=trajectory: mean/std over the G scores R_i = 10 * won_i (no penalty);
stats=step:       mean/std over every turn row's score of the group.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prover.config import TrainConfig
from prover.credit.base import CreditContext
from prover.credit.grpo import GRPO, GRPOConfig, grpo_turn_advantages
from prover.errors import ConfigError
from prover.registry import CREDIT

EPS = 1e-6


def assign(batch, cfg, **method):
    return GRPO(GRPOConfig(**method)).assign(batch, CreditContext(config=cfg))


def turn_values(adv):
    """values[g][i][t] -> the single value of each turn (asserting it is the same on every token)."""
    out = []
    for group in adv.values:
        out.append([])
        for traj in group:
            row = []
            for tok in traj:
                assert tok.size > 0
                assert np.all(tok == tok[0]), f"advantage differs across the tokens of a turn: {tok}"
                row.append(float(tok[0]))
            out[-1].append(row)
    return out


def approx(x):
    return pytest.approx(x, rel=1e-6, abs=1e-6)


# A mixed group, used by several worked examples:
#   traj 0: won,  2 turns, second turn invalid  -> row scores [10, 9.9]     R_0 = 10
#   traj 1: lost, 1 turn,  invalid              -> row scores [-0.1]        R_1 = 0
#   traj 2: lost, 3 turns, all valid            -> row scores [0, 0, 0]     R_2 = 0
MIXED = [[(True, 2, [True, False]), (False, 1, [False]), (False, 3, [True, True, True])]]


def test_norm_std_trajectory_stats_worked_example(make_batch, train_cfg):
    adv = assign(make_batch(MIXED), train_cfg, norm="std", stats="trajectory")
    # mean over R = [10, 0, 0]: 10/3. Unbiased variance: ((10 - 10/3)^2 + 2 * (10/3)^2) / (3 - 1)
    #   = (400/9 + 200/9) / 2 = 100/3, so std = 10 / sqrt(3) = 5.7735...
    mean = 10 / 3
    std = 10 / math.sqrt(3)
    d = std + EPS
    assert turn_values(adv) == [[
        [approx((10 - mean) / d), approx((9.9 - mean) / d)],
        [approx((-0.1 - mean) / d)],
        [approx(-mean / d)] * 3,
    ]]
    # the same numbers written out: 2/sqrt(3), 6.5667/5.7735, -3.4333/5.7735, -1/sqrt(3)
    v = turn_values(adv)[0]
    assert v[0][0] == pytest.approx(2 / math.sqrt(3), rel=1e-5)
    assert v[0][1] == pytest.approx(1.137380, rel=1e-5)
    assert v[1][0] == pytest.approx(-0.594671, rel=1e-5)
    assert v[2][0] == pytest.approx(-1 / math.sqrt(3), rel=1e-5)


def test_norm_mean_trajectory_stats_worked_example(make_batch, train_cfg):
    adv = assign(make_batch(MIXED), train_cfg, norm="mean", stats="trajectory")
    mean = 10 / 3
    assert turn_values(adv) == [[
        [approx(10 - mean), approx(9.9 - mean)],
        [approx(-0.1 - mean)],
        [approx(-mean)] * 3,
    ]]


def test_the_default_only_centres_one_win_of_four(make_batch, train_cfg):
    # the shared GRPO base (grpo, budget-matched-grpo, prover, criticsearch) defaults to norm=mean
    # (Prime-RL, the ProVer paper): R = 10 * won = [10, 0, 0, 0], mean 2.5 -> [7.5, -2.5, -2.5, -2.5]
    # (verl's std division would give 7.5 / 5 = 1.5: unbiased std sqrt((7.5^2 + 3 * 2.5^2) / 3) = 5)
    spec = [[(True, 1, None), (False, 1, None), (False, 1, None), (False, 1, None)]]
    v = turn_values(GRPO().assign(make_batch(spec), CreditContext(config=train_cfg)))
    assert train_cfg.reward.scale == 10
    assert v == [[[approx(7.5)], [approx(-2.5)], [approx(-2.5)], [approx(-2.5)]]]


def test_norm_std_step_stats_worked_example(make_batch, train_cfg):
    adv = assign(make_batch(MIXED), train_cfg, norm="std", stats="step")
    # the pool is every row of the group: [10, 9.9, -0.1, 0, 0, 0]
    # mean = 19.8 / 6 = 3.3
    # squared deviations: 6.7^2 + 6.6^2 + 3.4^2 + 3 * 3.3^2 = 44.89 + 43.56 + 11.56 + 32.67 = 132.68
    # unbiased variance = 132.68 / 5 = 26.536
    std = math.sqrt(26.536)
    d = std + EPS
    assert turn_values(adv) == [[
        [approx(6.7 / d), approx(6.6 / d)],
        [approx(-3.4 / d)],
        [approx(-3.3 / d)] * 3,
    ]]
    assert turn_values(adv)[0][0][0] == pytest.approx(1.300640, rel=1e-5)


def test_norm_mean_step_stats_worked_example(make_batch, train_cfg):
    adv = assign(make_batch(MIXED), train_cfg, norm="mean", stats="step")
    assert turn_values(adv) == [[[approx(6.7), approx(6.6)], [approx(-3.4)], [approx(-3.3)] * 3]]


def test_two_groups_are_normalised_separately(make_batch, train_cfg):
    # group 0: R = [10, 0] -> mean 5, unbiased std = sqrt((25 + 25) / 1) = sqrt(50)
    # group 1: R = [10, 10, 0, 0] -> mean 5, unbiased std = sqrt(4 * 25 / 3) = 10 / sqrt(3)
    spec = [[(True, 1, None), (False, 1, None)],
            [(True, 1, None), (True, 2, None), (False, 1, None), (False, 1, None)]]
    v = turn_values(assign(make_batch(spec), train_cfg, norm="std", stats="trajectory"))
    s0, s1 = math.sqrt(50) + EPS, 10 / math.sqrt(3) + EPS
    assert v[0] == [[approx(5 / s0)], [approx(-5 / s0)]]
    assert v[1] == [[approx(5 / s1)], [approx(5 / s1)] * 2, [approx(-5 / s1)], [approx(-5 / s1)]]


def test_eps_is_added_to_the_std(make_batch, train_cfg):
    # R = [10, 0]: mean 5, unbiased std = sqrt((5^2 + 5^2) / 1) = sqrt(50) = 7.0711; eps = 0.5
    # A = +-5 / (7.0711 + 0.5) = +-0.660409
    v = turn_values(assign(make_batch([[(True, 1, None), (False, 1, None)]]), train_cfg, norm="std", eps=0.5))
    assert v == [[[approx(5 / (math.sqrt(50) + 0.5))], [approx(-5 / (math.sqrt(50) + 0.5))]]]
    assert v[0][0][0] == pytest.approx(0.660409, rel=1e-5)


def test_float64_values_equal_the_hand_computed_ones_bit_for_bit(make_batch, train_cfg):
    # Sums of integers only, so no summation order changes a bit. R = [10, 0, 0, 0]; rows [10] [0] [0, 0] [0].
    # stats=trajectory: mean 2.5, unbiased std sqrt((7.5^2 + 3 * 2.5^2) / 3) = sqrt(25) = 5.
    # stats=step, pool [10, 0, 0, 0, 0]: mean 2, squared deviations 64 + 4 * 4 = 80, std sqrt(80 / 4) = sqrt(20).
    group = make_batch([[(True, 1, None), (False, 1, None), (False, 2, None), (False, 1, None)]]).groups[0]
    ctx = CreditContext(config=train_cfg)
    for stats, (hi, lo, d) in {"trajectory": (7.5, -2.5, 5 + EPS), "step": (8, -2, math.sqrt(20) + EPS)}.items():
        got = grpo_turn_advantages(group, ctx, GRPOConfig(norm="std", stats=stats))
        assert all(a.dtype == np.float64 for a in got)
        assert [a.tolist() for a in got] == [[hi / d], [lo / d], [lo / d] * 2, [lo / d]]


def test_reward_scale_and_penalty_come_from_the_run_config(make_batch, train_cfg):
    train_cfg.reward.scale = 1.0
    train_cfg.reward.invalid_penalty = 0.5
    # scores: traj 0 rows [1, 0.5]; traj 1 rows [-0.5]; R = [1, 0]; mean 0.5
    v = turn_values(assign(make_batch([[(True, 2, [True, False]), (False, 1, [False])]]), train_cfg,
                           norm="mean", stats="trajectory"))
    assert v == [[[approx(0.5), approx(0.0)], [approx(-1.0)]]]


# -- singleton groups -------------------------------------------------------------------------------

def test_singleton_raw_keeps_the_raw_row_scores(make_batch, train_cfg):
    # a group of one: one trajectory (stats=trajectory) or one row (stats=step)
    spec = [[(True, 2, [False, True])], [(False, 2, [True, False])]]
    one_row = [[(True, 1, [False])], [(False, 1, [False])]]
    for norm in ("std", "mean"):
        v = turn_values(assign(make_batch(spec), train_cfg, norm=norm, stats="trajectory", singleton="raw"))
        assert v == [[[approx(9.9), approx(10.0)]], [[approx(0.0), approx(-0.1)]]], norm
        v = turn_values(assign(make_batch(one_row), train_cfg, norm=norm, stats="step", singleton="raw"))
        assert v == [[[approx(9.9)]], [[approx(-0.1)]]], norm


def test_singleton_zero_gives_exact_zeros(make_batch, train_cfg):
    spec = [[(True, 2, [False, True])], [(False, 1, [False])]]
    one_row = [[(True, 1, [False])], [(False, 1, [False])]]
    for norm in ("std", "mean"):
        v = turn_values(assign(make_batch(spec), train_cfg, norm=norm, stats="trajectory", singleton="zero"))
        assert v == [[[0.0, 0.0]], [[0.0]]], norm
        v = turn_values(assign(make_batch(one_row), train_cfg, norm=norm, stats="step", singleton="zero"))
        assert v == [[[0.0]], [[0.0]]], norm


def test_step_stats_normalise_one_trajectory_among_its_own_rows(make_batch, train_cfg):
    # verl-agent's compute_grpo_outcome_advantage (compute_mean_std_cross_steps=True) counts ROWS: a group of
    # one trajectory with 3 turns is a pool of 3 rows, not a singleton.
    # won, turn 1 format-invalid, scale 10, penalty 0.1: rows [10, 9.9, 10], mean 29.9 / 3 = 9.96667
    # centred: [1/30, -2/30, 1/30] = [0.03333, -0.06667, 0.03333]
    # unbiased var = ((1/30)^2 + (2/30)^2 + (1/30)^2) / 2 = (6/900) / 2 = 1/300, std = 1/sqrt(300) = 0.057735
    # std version: (1/30) / (0.057735 + 1e-6) = 0.57734, (-2/30) / (0.057735 + 1e-6) = -1.15468
    spec = [[(True, 3, [True, False, True])]]
    for singleton in ("raw", "zero"):  # not a singleton: the switch does not apply
        v = turn_values(assign(make_batch(spec), train_cfg, norm="mean", stats="step", singleton=singleton))
        assert v == [[[approx(1 / 30), approx(-2 / 30), approx(1 / 30)]]]
    d = 1 / np.sqrt(300) + EPS
    v = turn_values(assign(make_batch(spec), train_cfg, norm="std", stats="step"))
    assert v == [[[approx(1 / 30 / d), approx(-2 / 30 / d), approx(1 / 30 / d)]]]
    assert v[0][0][0] == pytest.approx(0.57734, abs=1e-4) and v[0][0][1] == pytest.approx(-1.15468, abs=1e-4)
    # and the converse: two trajectories but one row in all (the loser has no turn) is a singleton: raw 10
    # (verl: mean 0, std 1) with singleton=raw, 0 with singleton=zero
    spec = [[(True, 1, None), (False, 0, None)]]
    v = turn_values(assign(make_batch(spec), train_cfg, norm="std", stats="step"))
    assert v == [[[approx(10.0)], []]]
    assert turn_values(assign(make_batch(spec), train_cfg, stats="step", singleton="zero")) == [[[0.0], []]]


def test_singleton_setting_does_not_touch_larger_groups(make_batch, train_cfg):
    spec = [[(True, 1, None), (False, 1, None)]]
    raw = turn_values(assign(make_batch(spec), train_cfg, norm="mean", singleton="raw"))
    zero = turn_values(assign(make_batch(spec), train_cfg, norm="mean", singleton="zero"))
    assert raw == zero == [[[approx(5.0)], [approx(-5.0)]]]


# -- zero-variance groups ---------------------------------------------------------------------------

@pytest.mark.parametrize("won", [True, False])
def test_zero_variance_group_gives_exact_zeros_with_norm_std(make_batch, train_cfg, won):
    # equal R_i; the format penalties alone must not be blown up by dividing by eps
    spec = [[(won, 2, [True, False]), (won, 1, [False]), (won, 3, None)]]
    adv = assign(make_batch(spec), train_cfg, norm="std", stats="trajectory")
    for traj in adv.values[0]:
        for tok in traj:
            assert tok.dtype == np.float32
            assert np.array_equal(tok, np.zeros(3, np.float32))


def test_zero_variance_group_with_norm_mean_keeps_only_the_penalties(make_batch, train_cfg):
    spec = [[(True, 2, [True, False]), (True, 1, [False])]]
    v = turn_values(assign(make_batch(spec), train_cfg, norm="mean", stats="trajectory"))
    # R = [10, 10], mean 10: rows minus 10 -> [0, -0.1], [-0.1]
    assert v == [[[approx(0.0), approx(-0.1)], [approx(-0.1)]]]


def test_zero_variance_rows_with_step_stats_give_exact_zeros(make_batch, train_cfg):
    spec = [[(False, 2, None), (False, 3, None), (False, 1, None)]]
    adv = assign(make_batch(spec), train_cfg, norm="std", stats="step")
    assert all(np.array_equal(tok, np.zeros(3, np.float32)) for traj in adv.values[0] for tok in traj)


def test_step_stats_pool_the_penalised_row_scores(make_batch, train_cfg):
    # equal R_i = 10, but the step pool is the rows [10, 9.9]: mean 9.95,
    # unbiased std = sqrt((0.05^2 + 0.05^2) / 1) = 0.05 * sqrt(2); A = +-0.05 / (0.0707107 + 1e-6) = +-0.707097
    spec = [[(True, 1, [True]), (True, 1, [False])]]
    v = turn_values(assign(make_batch(spec), train_cfg, norm="std", stats="step"))
    d = 0.05 * math.sqrt(2) + EPS
    assert v == [[[approx(0.05 / d)], [approx(-0.05 / d)]]]
    # the same group with trajectory stats has zero variance: exactly zero
    assert turn_values(assign(make_batch(spec), train_cfg, norm="std", stats="trajectory")) == [[[0.0], [0.0]]]


# -- shape and broadcast ----------------------------------------------------------------------------

def test_every_token_of_a_turn_gets_the_turn_value(make_batch, train_cfg):
    spec = [[(True, 2, [True, False], [4, 1]), (False, 3, None, [2, 5, 3])]]
    batch = make_batch(spec)
    adv = assign(batch, train_cfg, norm="std", stats="trajectory")
    # R = [10, 0]: mean 5, unbiased std sqrt(50); rows: [10, 9.9], [0, 0, 0]
    d = math.sqrt(50) + EPS
    expect = [[5 / d, 4.9 / d], [-5 / d] * 3]
    for i, traj in enumerate(batch.groups[0].trajectories):
        for t, turn in enumerate(traj.turns):
            a = adv.values[0][i][t]
            assert a.shape == (turn.n_tokens,)
            assert a == pytest.approx(np.full(turn.n_tokens, expect[i][t]), rel=1e-6)
    assert len(adv.flat()) == len(batch.turns()) == 5
    assert adv.loss_mask is None


def test_a_turn_without_tokens_gets_an_empty_array(make_batch, train_cfg):
    adv = assign(make_batch([[(True, 2, None, [0, 3]), (False, 1, None)]]), train_cfg)
    assert adv.values[0][0][0].shape == (0,)
    assert adv.values[0][0][1].shape == (3,)


# -- registry and config ----------------------------------------------------------------------------

def test_grpo_is_registered_and_built_from_the_run_config():
    assert CREDIT.get("grpo") is GRPO
    cfg = TrainConfig(credit={"name": "grpo", "norm": "mean", "stats": "step", "singleton": "zero", "eps": 1e-4})
    method = GRPO.from_train_config(cfg)
    assert method.config == GRPOConfig(norm="mean", stats="step", singleton="zero", eps=1e-4)
    assert GRPO.from_train_config(TrainConfig()).config == GRPOConfig()
    assert GRPOConfig() == GRPOConfig(norm="mean", stats="trajectory", singleton="raw", eps=1e-6)


def test_unknown_method_field_is_a_config_error_naming_it():
    cfg = TrainConfig(credit={"name": "grpo", "nrom": "std"})
    with pytest.raises(ConfigError) as err:
        GRPO.parse_config(cfg)
    msg = str(err.value)
    assert "'credit.nrom'" in msg
    assert "credit.norm" in msg  # lists the method's real fields
    assert "\n" not in msg


def test_bad_method_value_is_a_config_error_naming_it():
    with pytest.raises(ConfigError, match=r"'credit\.norm'"):
        GRPO.parse_config(TrainConfig(credit={"name": "grpo", "norm": "median"}))
    with pytest.raises(ConfigError, match=r"'credit\.eps'"):
        GRPO.parse_config(TrainConfig(credit={"name": "grpo", "eps": 0}))


# -- properties -------------------------------------------------------------------------------------

def traj_strategy(min_turns: int = 1):
    @st.composite
    def build(draw):
        won = draw(st.booleans())
        n = draw(st.integers(min_value=max(min_turns, 1 if won else 0), max_value=4))
        fmt = draw(st.lists(st.booleans(), min_size=n, max_size=n))
        tokens = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
        return (won, n, fmt, tokens)
    return build()


def groups_strategy(min_size: int, min_turns: int = 1):
    return st.lists(st.lists(traj_strategy(min_turns), min_size=min_size, max_size=6), min_size=1, max_size=3)


METHODS = st.fixed_dictionaries({
    "norm": st.sampled_from(["std", "mean"]),
    "stats": st.sampled_from(["trajectory", "step"]),
    "singleton": st.sampled_from(["raw", "zero"]),
})
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(spec=groups_strategy(min_size=2), norm=st.sampled_from(["std", "mean"]))
def test_trajectory_advantages_sum_to_zero_without_penalty(make_batch, spec, norm):
    cfg = TrainConfig()
    cfg.reward.invalid_penalty = 0.0
    batch = make_batch([[(w, n, f, [max(k, 1) for k in tok]) for w, n, f, tok in group] for group in spec])
    adv = GRPO(GRPOConfig(norm=norm, stats="trajectory")).assign(batch, CreditContext(config=cfg))
    for g, group in enumerate(batch.groups):
        per_traj = []
        for i in range(len(group.trajectories)):
            turns = [float(a[0]) for a in adv.values[g][i]]
            # without penalties every turn of a trajectory carries the trajectory's advantage A_i
            assert turns == [turns[0]] * len(turns)
            per_traj.append(turns[0])
        assert sum(per_traj) == pytest.approx(0.0, abs=1e-5)
        # and A_i is the definition's value
        scores = [10.0 * tr.won for tr in group.trajectories]
        mean = sum(scores) / len(scores)
        std = math.sqrt(sum((s - mean) ** 2 for s in scores) / (len(scores) - 1))
        for got, s in zip(per_traj, scores):
            want = 0.0 if std == 0 else (s - mean) / (std + EPS) if norm == "std" else s - mean
            assert got == pytest.approx(want, rel=1e-5, abs=1e-6)


@FAST
@given(spec=groups_strategy(min_size=2, min_turns=0), norm=st.sampled_from(["std", "mean"]),
       penalty=st.sampled_from([0.0, 0.1, 3.0]))
def test_step_stats_rows_of_a_group_sum_to_zero(make_batch, spec, norm, penalty):
    cfg = TrainConfig()
    cfg.reward.invalid_penalty = penalty
    batch = make_batch([[(w, n, f, [1] * n) for w, n, f, _ in group] for group in spec])  # one token per row
    adv = GRPO(GRPOConfig(norm=norm, stats="step")).assign(batch, CreditContext(config=cfg))
    for group in adv.values:
        rows = [float(a[0]) for traj in group for a in traj]
        if len(rows) == 1:  # one row is a group of one under step stats: its raw score (verl)
            continue
        assert sum(rows) == pytest.approx(0.0, abs=1e-4)


@FAST
@given(spec=groups_strategy(min_size=1, min_turns=0), method=METHODS,
       penalty=st.sampled_from([0.0, 0.1, 5.0]), scale=st.sampled_from([1.0, 10.0]))
def test_advantages_are_finite_and_shaped_like_the_batch(make_batch, spec, method, penalty, scale):
    cfg = TrainConfig()
    cfg.reward.invalid_penalty = penalty
    cfg.reward.scale = scale
    batch = make_batch(spec)
    adv = GRPO(GRPOConfig(**method)).assign(batch, CreditContext(config=cfg))
    assert len(adv.values) == len(batch.groups)
    for g, group in enumerate(batch.groups):
        assert len(adv.values[g]) == len(group.trajectories)
        for i, traj in enumerate(group.trajectories):
            assert len(adv.values[g][i]) == len(traj.turns)
            for t, turn in enumerate(traj.turns):
                a = adv.values[g][i][t]
                assert a.shape == (turn.n_tokens,)
                assert np.all(np.isfinite(a))
                assert a.size == 0 or np.all(a == a[0])
    # all-equal groups under norm=std, and singletons under singleton=zero, are exactly zero
    for g, group in enumerate(batch.groups):
        trajs = group.trajectories
        flat = [a for traj in adv.values[g] for a in traj]
        pooled = len(trajs) if method["stats"] == "trajectory" else len(flat)  # trajectories or rows
        if pooled == 1 and method["singleton"] == "zero":
            assert all(not np.any(a) for a in flat)
        if (len(trajs) > 1 and method["norm"] == "std" and method["stats"] == "trajectory"
                and len({tr.won for tr in trajs}) == 1):
            assert all(not np.any(a) for a in flat)
