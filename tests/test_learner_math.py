"""The learner's per-token math against hand computations (algorithms.md §1.2).

    rho = exp(logp - old);  L1 = -A rho;  L2 = -A clip(rho, 1 - 0.2, 1 + 0.2);  Lclip = max(L1, L2)
    L = min(Lclip, -A c) if A < 0 else Lclip,  c = 3
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

from prover.config import LearnerConfig
from prover.learning.learner import length_batches, rows_from
from prover.learning.learner_loss import kl_penalty, ppo_token_loss, token_losses
from prover.learning.learner_rows import Row, token_weights
from prover.types import Advantages


def t(xs):
    return torch.tensor(xs, dtype=torch.float32)


# -- token_weights ----------------------------------------------------------------------------------

TWO_ROWS = [np.ones(2, np.float32), np.ones(3, np.float32)]


def test_token_mean_weighs_every_token_of_the_mini_batch_equally():
    w = token_weights(TWO_ROWS, "token-mean", max_len=8)
    assert [list(x) for x in w] == [[pytest.approx(1 / 5)] * 2, [pytest.approx(1 / 5)] * 3]


def test_seq_mean_token_sum_weighs_each_row_sum_by_one_over_rows():
    w = token_weights(TWO_ROWS, "seq-mean-token-sum", max_len=8)
    assert [list(x) for x in w] == [[pytest.approx(1 / 2)] * 2, [pytest.approx(1 / 2)] * 3]


def test_seq_mean_token_mean_weighs_tokens_by_one_over_rows_times_row_length():
    w = token_weights(TWO_ROWS, "seq-mean-token-mean", max_len=8)
    assert [list(x) for x in w] == [[pytest.approx(1 / (2 * 2))] * 2, [pytest.approx(1 / (2 * 3))] * 3]


def test_seq_mean_token_sum_norm_uses_the_constant_max_length():
    w = token_weights(TWO_ROWS, "seq-mean-token-sum-norm", max_len=8)
    assert [list(x) for x in w] == [[pytest.approx(1 / 8)] * 2, [pytest.approx(1 / 8)] * 3]


def test_traj_mean_token_mean_weighs_each_trajectory_equally():
    # rows 0 and 1 are the two turns of a 2-turn trajectory; row 2 is a 1-turn trajectory.
    masks = [np.ones(2, np.float32), np.ones(3, np.float32), np.ones(4, np.float32)]
    w = token_weights(masks, "traj-mean-token-mean", max_len=8, traj_turns=[2, 2, 1])
    # shares 1/2, 1/2, 1; total 2: rows weigh 1/4, 1/4, 1/2, split evenly over their tokens
    assert [list(x) for x in w] == [[pytest.approx(1 / 8)] * 2, [pytest.approx(1 / 12)] * 3,
                                    [pytest.approx(1 / 8)] * 4]
    # each trajectory's tokens carry the same total weight, 1/2, however many turns it has
    assert float(w[0].sum() + w[1].sum()) == pytest.approx(0.5) == float(w[2].sum())


def test_weights_reproduce_each_aggregate_on_a_loss_matrix():
    # per-token losses: row 0 = [1, 2], row 1 = [3, 4, 5]
    losses = [np.array([1.0, 2.0]), np.array([3.0, 4.0, 5.0])]
    expected = {
        "token-mean": (1 + 2 + 3 + 4 + 5) / 5,  # 3
        "seq-mean-token-sum": ((1 + 2) + (3 + 4 + 5)) / 2,  # 7.5
        "seq-mean-token-mean": ((1 + 2) / 2 + (3 + 4 + 5) / 3) / 2,  # (1.5 + 4) / 2 = 2.75
        "seq-mean-token-sum-norm": (1 + 2 + 3 + 4 + 5) / 10,  # L_max = 10
    }
    for mode, want in expected.items():
        w = token_weights(TWO_ROWS, mode, max_len=10)
        got = sum(float((wi * li).sum()) for wi, li in zip(w, losses))
        assert got == pytest.approx(want, rel=1e-6), mode


def test_masked_tokens_get_zero_weight_and_do_not_count():
    masks = [np.array([1, 0, 1], np.float32), np.array([0, 0, 0], np.float32), np.array([1], np.float32)]
    tm = token_weights(masks, "token-mean", max_len=4)  # 3 live tokens
    assert [list(x) for x in tm] == [[pytest.approx(1 / 3), 0, pytest.approx(1 / 3)], [0, 0, 0],
                                     [pytest.approx(1 / 3)]]
    sm = token_weights(masks, "seq-mean-token-mean", max_len=4)  # 3 rows; live lengths 2, 0, 1
    assert [list(x) for x in sm] == [[pytest.approx(1 / 6), 0, pytest.approx(1 / 6)], [0, 0, 0],
                                     [pytest.approx(1 / 3)]]
    assert all(np.all(np.isfinite(x)) for x in sm)


def test_unknown_aggregation_raises():
    with pytest.raises(ValueError, match="unknown loss aggregation 'sum'"):
        token_weights(TWO_ROWS, "sum", max_len=4)


# -- ppo_token_loss ---------------------------------------------------------------------------------

def ppo(ratio, adv, **cfg):
    """Loss and clipped flag of one token with the given ratio (old = 0, logp = log ratio)."""
    loss, clipped = ppo_token_loss(t([math.log(ratio)]), t([0.0]), t([adv]), LearnerConfig(**cfg))
    return float(loss[0]), bool(clipped[0])


@pytest.mark.parametrize("ratio", [0.85, 1.0, 1.1, 1.19])
@pytest.mark.parametrize("adv", [2.0, -1.5])
def test_inside_the_clip_range_the_loss_is_minus_a_times_ratio(ratio, adv):
    loss, clipped = ppo(ratio, adv)
    assert loss == pytest.approx(-adv * ratio, rel=1e-5)
    assert not clipped


def test_positive_advantage_large_ratio_is_clipped_at_1_plus_clip_high():
    # L1 = -1.5, L2 = -1 * 1.2 = -1.2; max = -1.2
    assert ppo(1.5, 1.0) == (pytest.approx(-1.2, rel=1e-6), True)
    # A = 2: L1 = -3, L2 = -2.4
    assert ppo(1.5, 2.0) == (pytest.approx(-2.4, rel=1e-6), True)
    # with clip_high = 0.28 (DAPO): L2 = -1.28
    assert ppo(1.5, 1.0, clip_high=0.28) == (pytest.approx(-1.28, rel=1e-6), True)
    # no dual clip for A > 0, however large the ratio: L2 = -1.2
    assert ppo(10.0, 1.0) == (pytest.approx(-1.2, rel=1e-6), True)


def test_positive_advantage_small_ratio_is_not_clipped():
    # L1 = -0.5, L2 = -0.8; max = -0.5 (the unclipped term wins)
    assert ppo(0.5, 1.0) == (pytest.approx(-0.5, rel=1e-6), False)


def test_negative_advantage_small_ratio_is_clipped_at_1_minus_clip_low():
    # A = -1: L1 = 0.5, L2 = 1 * 0.8 = 0.8; max = 0.8; dual clip min(0.8, 3) = 0.8
    assert ppo(0.5, -1.0) == (pytest.approx(0.8, rel=1e-6), True)
    # A = -2, clip_low = 0.3: L1 = 1.0, L2 = 2 * 0.7 = 1.4
    assert ppo(0.5, -2.0, clip_low=0.3) == (pytest.approx(1.4, rel=1e-6), True)


def test_negative_advantage_large_ratio_is_capped_by_the_dual_clip():
    # A = -1, ratio 1.5: L1 = 1.5, L2 = 1.2, max = 1.5 < 3 -> 1.5
    assert ppo(1.5, -1.0) == (pytest.approx(1.5, rel=1e-6), False)
    # A = -1, ratio 10: L1 = 10, L2 = 1.2, max = 10 -> min(10, -A * 3) = 3
    assert ppo(10.0, -1.0)[0] == pytest.approx(3.0, rel=1e-6)
    # A = -0.5, ratio 10: max = 5 -> min(5, 1.5) = 1.5
    assert ppo(10.0, -0.5)[0] == pytest.approx(1.5, rel=1e-6)
    # c = 5: A = -1, ratio 4: max = 4 < 5 -> 4; ratio 10 -> 5
    assert ppo(4.0, -1.0, dual_clip_c=5.0)[0] == pytest.approx(4.0, rel=1e-6)
    assert ppo(10.0, -1.0, dual_clip_c=5.0)[0] == pytest.approx(5.0, rel=1e-6)


def test_zero_advantage_gives_zero_loss():
    for ratio in (0.1, 1.0, 10.0):
        assert ppo(ratio, 0.0) == (0.0, False)


def test_a_huge_log_ratio_stays_finite():
    # (logp - old) is clamped to [-20, 20] before exp, so the loss and its gradient stay finite
    logp = t([100.0, 100.0, -100.0]).requires_grad_(True)
    loss, _ = ppo_token_loss(logp, t([0.0, 0.0, 0.0]), t([-1.0, 1.0, -1.0]), LearnerConfig())
    assert loss.tolist() == [pytest.approx(3.0), pytest.approx(-1.2), pytest.approx(0.8)]
    loss.sum().backward()
    assert torch.all(torch.isfinite(logp.grad))


def test_vectorised_over_tokens():
    ratios = [1.1, 1.5, 0.5, 10.0]
    advs = [1.0, 1.0, -1.0, -1.0]
    loss, clipped = ppo_token_loss(t([math.log(r) for r in ratios]), t([0.0] * 4), t(advs), LearnerConfig())
    assert loss.tolist() == [pytest.approx(-1.1), pytest.approx(-1.2), pytest.approx(0.8), pytest.approx(3.0)]
    assert clipped.tolist() == [False, True, True, False]


def test_gradient_is_zero_where_clipped_and_minus_a_rho_inside():
    # d/dlogp of -A rho = -A rho; the clipped branch is constant in logp
    logp = t([math.log(1.1), math.log(1.5)]).requires_grad_(True)
    loss, _ = ppo_token_loss(logp, t([0.0, 0.0]), t([2.0, 2.0]), LearnerConfig())
    loss.sum().backward()
    assert logp.grad.tolist() == [pytest.approx(-2.0 * 1.1, rel=1e-5), 0.0]


# -- token_losses: one micro-batch's terms and loss ------------------------------------------------

def test_a_micro_batch_loss_by_hand():
    """Two vocabulary entries with equal logits: logp = log 1/2 and entropy log 2 at every position. One row
    whose two completion tokens sit in the last two of three columns (the first is prompt, not trained):
    token 1 has ratio 1 and A = 1 (L = -1); token 2 ratio 1.5 and A = 2 (L = max(-3, -2 * 1.2) = -2.4,
    clipped). Each weighs 1/2. The reference gives log 1/4, so k1's KL is log 2 per token."""
    half = math.log(0.5)
    row = Row([1], [2, 3], np.array([half, half - math.log(1.5)], np.float32), np.array([1.0, 2.0], np.float32),
              np.ones(2, np.float32))
    logits, targets = torch.zeros(1, 3, 2), torch.tensor([[0, 1, 0]])
    logits[0, 0, 1] = -math.inf  # the prompt column's entropy is NaN (0 * -inf): untrained, it must add nothing
    trained = torch.tensor([[False, True, True]])
    cfg = LearnerConfig(entropy_coef=0.1, kl_coef=0.2, kl_type="k1")
    losses = token_losses(logits, targets, trained, [row], [np.array([0.5, 0.5], np.float32)], cfg,
                          torch.full((1, 3), math.log(0.25)))
    sums = losses.sums()
    assert sums["pg_loss"] == pytest.approx(0.5 * -1 + 0.5 * -2.4, rel=1e-6)
    assert sums["clipfrac"] == pytest.approx(0.5)
    assert sums["entropy"] == pytest.approx(math.log(2), rel=1e-6)
    assert sums["kl"] == pytest.approx(math.log(2), rel=1e-6)
    assert sums["ppo_kl"] == pytest.approx(0.5 * -math.log(1.5), rel=1e-5)  # (old - logp) weighted
    assert float(losses.loss(cfg)) == pytest.approx(-1.7 - 0.1 * math.log(2) + 0.2 * math.log(2), rel=1e-6)
    plain = LearnerConfig()  # no entropy bonus, no KL: the loss is the PPO term alone
    assert float(losses.loss(plain)) == pytest.approx(-1.7, rel=1e-6)


# -- kl_penalty -------------------------------------------------------------------------------------

def kl(logp, ref, kind):
    return kl_penalty(t(logp), t(ref), kind).tolist()


def test_kl_estimators_by_hand():
    logp, ref = [-1.0, -2.0, -0.3], [-1.5, -1.0, -0.3]
    # logp - ref = [0.5, -1, 0]
    assert kl(logp, ref, "k1") == [pytest.approx(0.5), pytest.approx(-1.0), 0.0]
    assert kl(logp, ref, "abs") == [pytest.approx(0.5), pytest.approx(1.0), 0.0]
    assert kl(logp, ref, "k2") == [pytest.approx(0.125), pytest.approx(0.5), 0.0]  # 0.5 * d^2
    # k3 with d = ref - logp = [-0.5, 1, 0]: exp(d) - d - 1
    assert kl(logp, ref, "k3") == [pytest.approx(math.exp(-0.5) + 0.5 - 1, rel=1e-5),  # 0.106531
                                   pytest.approx(math.e - 2, rel=1e-5),  # 0.718282
                                   0.0]


def test_k3_is_clamped_to_ten():
    # d = 5: exp(5) - 6 = 142.4 -> 10; d = -20: exp(-20) + 19 = 19.000000002 -> 10; d = 2: e^2 - 3 = 4.389
    assert kl([0.0, 0.0, 0.0], [5.0, -20.0, 2.0], "k3") == [10.0, 10.0, pytest.approx(math.exp(2) - 3, rel=1e-5)]


def test_k3_gradient_stays_finite_for_a_huge_log_ratio():
    logp = t([-100.0, 0.0]).requires_grad_(True)
    ref = t([0.0, 0.0])
    out = kl_penalty(logp, ref, "k3")
    assert out.tolist() == [10.0, 0.0]
    out.sum().backward()
    # the clamped value is constant in logp: its gradient is 0, not NaN
    assert torch.all(torch.isfinite(logp.grad))


def test_k3_gradient_by_hand():
    # d/dlogp [exp(ref - logp) - (ref - logp) - 1] = -exp(ref - logp) + 1; at ref - logp = 1: 1 - e
    logp = t([-2.0]).requires_grad_(True)
    kl_penalty(logp, t([-1.0]), "k3").sum().backward()
    assert logp.grad.tolist() == [pytest.approx(1 - math.e, rel=1e-5)]


# -- rows_from --------------------------------------------------------------------------------------

def adv_like(batch, values):
    """Advantages with one constant value per turn, in batch.turns() order."""
    it = iter(values)
    return Advantages(values=[[[np.full(turn.n_tokens, next(it), np.float32) for turn in tr.turns]
                               for tr in g.trajectories] for g in batch.groups])


def test_rows_from_skips_all_zero_rows_only_when_asked(make_batch):
    batch = make_batch([[(True, 2, None), (False, 1, None)], [(False, 1, None)]])
    turns = batch.turns()
    adv = adv_like(batch, [0.5, 0.0, -0.25, 0.0])
    kept = rows_from(batch, adv, skip_zero=True)
    assert [r.prompt_ids for r in kept] == [turns[0].prompt_ids, turns[2].prompt_ids]
    assert [list(r.advantages) for r in kept] == [[0.5] * 3, [-0.25] * 3]
    everything = rows_from(batch, adv, skip_zero=False)
    assert [r.prompt_ids for r in everything] == [tr.prompt_ids for tr in turns]
    assert [float(r.advantages[0]) for r in everything] == [0.5, 0.0, -0.25, 0.0]


def test_rows_carry_the_turn_exactly(make_batch):
    batch = make_batch([[(True, 1, None, [4])]])
    (row,) = rows_from(batch, adv_like(batch, [1.0]), skip_zero=True)
    turn = batch.turns()[0]
    assert row.prompt_ids == turn.prompt_ids and row.completion_ids == turn.completion_ids
    assert row.old_logprobs.dtype == np.float32
    assert row.old_logprobs.tolist() == pytest.approx(turn.logprobs)
    assert row.loss_mask.tolist() == [1.0] * 4  # no loss mask: every completion token is trained on


def test_rows_from_keeps_a_row_with_one_nonzero_token(make_batch):
    batch = make_batch([[(False, 1, None)]])
    adv = Advantages(values=[[[np.array([0.0, 0.0, 1e-3], np.float32)]]])
    assert len(rows_from(batch, adv, skip_zero=True)) == 1


def test_rows_from_uses_the_loss_mask(make_batch):
    batch = make_batch([[(False, 1, None), (False, 1, None)]])
    adv = Advantages(values=[[[np.array([1.0, 2.0, 0.0], np.float32)], [np.array([1.0, 1.0, 1.0], np.float32)]]],
                     loss_mask=[[[np.array([0.0, 0.0, 1.0], np.float32)], [np.array([1.0, 0.0, 1.0], np.float32)]]])
    # row 0: its only live token has advantage 0 -> nothing to learn; row 1 keeps its mask
    kept = rows_from(batch, adv, skip_zero=True)
    assert len(kept) == 1 and kept[0].loss_mask.tolist() == [1.0, 0.0, 1.0]
    assert [r.loss_mask.tolist() for r in rows_from(batch, adv, skip_zero=False)] == [[0.0, 0.0, 1.0],
                                                                                       [1.0, 0.0, 1.0]]


def test_rows_from_always_drops_turns_without_tokens(make_batch):
    batch = make_batch([[(True, 2, None, [0, 2])]])
    rows = rows_from(batch, adv_like(batch, [1.0, 1.0]), skip_zero=False)
    assert [len(r.completion_ids) for r in rows] == [2]


# -- length_batches ---------------------------------------------------------------------------------

def test_length_batches_use_every_row_once_in_batches_of_the_asked_size():
    lengths = [7, 3, 9, 1, 4, 4, 8, 2, 6, 5, 0]
    batches = length_batches(lengths, 3, random.Random(1), pool=2)
    assert sorted(i for b in batches for i in b) == list(range(11))
    assert sorted(len(b) for b in batches) == [2, 3, 3, 3]  # 11 rows: one short batch, in the last band


def test_length_batches_cut_a_sorted_band_so_a_batch_holds_neighbouring_lengths():
    # lengths 0..15 in one band (pool 4 x 4 rows = 16): the batches are the four runs of sorted lengths
    lengths = list(range(16))
    random.Random(0).shuffle(lengths)
    batches = length_batches(lengths, 4, random.Random(2), pool=4)
    assert sorted(sorted(lengths[i] for i in b) for b in batches) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11],
                                                                        [12, 13, 14, 15]]
