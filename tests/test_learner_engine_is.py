"""Truncated importance sampling for the engine/learner mismatch (``learner.engine_is_cap``), the mismatch
metrics, and how faithful a float32 engine's sampling log-probs are to the float32 learner's.

With cap C, PPO's old log-prob is the learner's own (recomputed before the update) and each token's loss is
weighted by w = min(exp(logp_old_learner - logp_engine), C) (verl's tis_imp_ratio_cap)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from prover.config import LearnerConfig
from prover.learning.learner_loss import (
    engine_is_weights,
    mismatch_metrics,
    mismatch_sums,
    ppo_token_loss,
    token_losses,
)
from prover.learning.learner_rows import Row
from prover.types import Advantages

HALF = math.log(0.5)


def two_token_case(cap: float | None):
    """Two vocabulary entries with equal logits: the policy's logp is log 1/2 at both completion tokens. The
    learner's recomputed old log-probs are log 1/2 too (rho = 1); the engine sampled them at 0.4 and 0.1.
    Advantages 1 and -2, each token weighing 1/2."""
    engine = np.log(np.array([0.4, 0.1], np.float32))
    row = Row([1], [0, 1], engine.copy(), np.array([1.0, -2.0], np.float32), np.ones(2, np.float32))
    if cap is not None:
        row.engine_logprobs, row.old_logprobs = engine, np.array([HALF, HALF], np.float32)
    logits, targets = torch.zeros(1, 2, 2), torch.tensor([[0, 1]])
    trained = torch.ones(1, 2, dtype=torch.bool)
    cfg = LearnerConfig(engine_is_cap=cap)
    return token_losses(logits, targets, trained, [row], [np.array([0.5, 0.5], np.float32)], cfg, None), cfg


def test_the_weights_are_the_learner_over_engine_ratio_capped_at_c():
    # 0.5 / 0.4 = 1.25 is kept; 0.5 / 0.1 = 5 is cut to the cap
    w = engine_is_weights(torch.tensor([HALF, HALF]), torch.log(torch.tensor([0.4, 0.1])), 2.0)
    assert w.tolist() == pytest.approx([1.25, 2.0], rel=1e-6)


def test_a_micro_batch_loss_with_the_correction_by_hand():
    """rho = 1 against the learner's old log-probs, so L = -A: -1 and 2; weighted 1.25 and 2 (capped):
    -1.25 and 4; each token weighs 1/2: the loss is 1.375."""
    losses, cfg = two_token_case(2.0)
    assert losses.pg[0].tolist() == pytest.approx([-1.25, 4.0], rel=1e-6)
    assert float(losses.loss(cfg)) == pytest.approx(0.5 * -1.25 + 0.5 * 4.0, rel=1e-6)
    assert losses.sums()["clipfrac"] == 0.0  # nothing clipped: the ratio is to the learner's own log-probs


def test_without_the_correction_the_ratio_is_to_the_engine_and_the_loss_is_plain_ppo():
    """rho = 0.5/0.4 = 1.25 with A = 1: clipped at 1.2, L = -1.2; rho = 5 with A = -2: L1 = 10, dual clip
    3 * 2 = 6: L = 6. Loss 0.5 * -1.2 + 0.5 * 6 = 2.4, bit for bit PPO's loss against the engine's log-probs."""
    losses, cfg = two_token_case(None)
    assert float(losses.loss(cfg)) == pytest.approx(0.5 * -1.2 + 0.5 * 6.0, rel=1e-6)
    ppo, _ = ppo_token_loss(torch.full((1, 2), HALF), losses.old, losses.engine.new_tensor([[1.0, -2.0]]), cfg)
    assert torch.equal(losses.pg, ppo)


def test_the_mismatch_metrics_by_hand():
    """log rho = log 1.25 and log 5 for the two tokens (policy log 1/2 over the engine's 0.4 and 0.1): both
    outside [0.8, 1.2]; with the correction on or off, it is measured against the engine."""
    for cap in (None, 2.0):
        losses, cfg = two_token_case(cap)
        metrics = mismatch_metrics(losses.mismatch(cfg))
        assert metrics["learner/engine_abs_log_rho"] == pytest.approx((math.log(1.25) + math.log(5)) / 2, rel=1e-6)
        assert metrics["learner/engine_outside_clip"] == 1.0
        assert metrics["learner/engine_max_abs_log_rho"] == pytest.approx(math.log(5), rel=1e-6)
    inside = mismatch_sums(torch.log(torch.tensor([1.1, 0.9, 1.3])), LearnerConfig(clip_high=0.28))
    assert inside["engine_outside_clip"] == 1.0 and inside["engine_tokens"] == 3.0  # 1.3 > 1.28 only
    assert mismatch_metrics(mismatch_sums(torch.zeros(0), LearnerConfig())) == {
        "learner/engine_abs_log_rho": 0.0, "learner/engine_outside_clip": 0.0, "learner/engine_max_abs_log_rho": 0.0}


# -- the learner -------------------------------------------------------------------------------------

ADVANTAGES = [0.5, -1.0, 2.0]


def policy_logprobs_by_hand(folder, batch) -> list[np.ndarray]:
    """The float32 model's log-probs of every turn's completion, each turn forwarded alone."""
    from prover.learning.logprobs import completion_logits, gather_logprobs
    from prover.learning.modeling import load_model

    model = load_model(folder, "float32")
    with torch.no_grad():
        out = []
        for turn in batch.turns():
            logits, targets, _ = completion_logits(model, [turn.prompt_ids], [turn.completion_ids], 0)
            out.append(gather_logprobs(logits, targets)[0].numpy())
    return out


def update(folder, batch, **cfg) -> dict[str, float]:
    from prover.learning.learner import Learner

    learner = Learner(folder, LearnerConfig(loss_agg="token-mean", lr=1e-3, **cfg), max_completion_tokens=3)
    adv = Advantages(values=[[[np.array(ADVANTAGES, np.float32)] * len(tr.turns) for tr in g.trajectories]
                             for g in batch.groups])
    return learner.update(batch, adv)


def by_hand(folder, batch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per token: the policy's log-prob, the engine's (Turn.logprobs), the advantage."""
    logp = np.concatenate(policy_logprobs_by_hand(folder, batch)).astype(np.float64)
    engine = np.concatenate([t.logprobs for t in batch.turns()]).astype(np.float64)
    return logp, engine, np.tile(ADVANTAGES, len(batch.turns()))


def test_with_the_cap_the_learners_recompute_is_ppos_old_log_prob(tiny_policy_dir, make_batch):
    """The engine's log-probs (-0.5 and below) are far from the untrained policy's (about log 1/400): against
    them PPO would clip every token. With the correction, rho is 1 (old = the learner's own), nothing is
    clipped, and each token's loss is -A min(exp(logp - logp_engine), 2)."""
    batch = make_batch([[(True, 2, None), (False, 1, None)]])
    out = update(tiny_policy_dir, batch, engine_is_cap=2.0)
    logp, engine, adv = by_hand(tiny_policy_dir, batch)
    assert abs(out["learner/ppo_kl"]) < 1e-5 and out["learner/clipfrac"] == 0.0
    assert out["learner/pg_loss"] == pytest.approx(np.mean(-adv * np.minimum(np.exp(logp - engine), 2.0)), rel=1e-4)
    assert out["learner/engine_abs_log_rho"] == pytest.approx(np.mean(np.abs(logp - engine)), rel=1e-5)
    assert out["learner/engine_outside_clip"] == 1.0


def test_without_the_cap_ppo_ratio_is_to_the_engines_log_prob(tiny_policy_dir, make_batch):
    """rho = exp(logp - logp_engine) is far below 0.8: A > 0 gives -A rho, A < 0 gives -A 0.8 (clipped)."""
    batch = make_batch([[(True, 2, None), (False, 1, None)]])
    out = update(tiny_policy_dir, batch)
    logp, engine, adv = by_hand(tiny_policy_dir, batch)
    rho = np.exp(logp - engine)
    assert out["learner/pg_loss"] == pytest.approx(np.mean(np.where(adv > 0, -adv * rho, -adv * 0.8)), rel=1e-4)
    assert out["learner/ppo_kl"] == pytest.approx(np.mean(engine - logp), rel=1e-5)
    assert out["learner/engine_abs_log_rho"] == pytest.approx(np.mean(np.abs(logp - engine)), rel=1e-5)
    assert out["learner/engine_max_abs_log_rho"] == pytest.approx(np.max(np.abs(logp - engine)), rel=1e-5)


def test_a_float32_engines_sampling_log_probs_match_the_float32_learners(tiny_policy_dir):
    """Sampled at temperature 1 by the hf engine's decode loop in chat episodes, scored by the learner as its
    update scores them (sequence rows): mean |log rho| under 1e-4 (a bfloat16 engine is about 1e-3 off)."""
    from prover.engines.hf import HFEngine
    from prover.envs import make_env
    from prover.learning.learner import Learner
    from prover.learning.learner_rows import rows_from, sequence_rows
    from prover.rollout import Rollout
    from prover.types import SamplingParams

    engine = HFEngine(tiny_policy_dir, dtype="float32")
    rollout = Rollout(lambda: make_env("alfworld-sim"), engine, max_turns=3, context="chat",
                      sampling=SamplingParams(max_new_tokens=8, temperature=1.0))
    batch = rollout.run([0, 1], 2, seed=3)
    ones = [[[np.ones(t.n_tokens, np.float32) for t in tr.turns] for tr in g.trajectories] for g in batch.groups]
    units = sequence_rows(rows_from(batch, Advantages(values=ones), skip_zero=False))
    assert any(len(u.turn_rows) > 1 for u in units)  # chats: sequence rows, as the update forwards them
    learner = Learner(tiny_policy_dir, LearnerConfig())
    log_rho = np.concatenate([lp - row.old_logprobs for u, lps in zip(units, learner.policy_logprobs(units))
                              for row, lp in zip(u.turn_rows, lps)])
    assert len(log_rho) >= 40
    assert np.mean(np.abs(log_rho)) < 1e-4 and np.max(np.abs(log_rho)) < 1e-3


def test_one_optimizer_step_takes_the_old_log_probs_from_its_own_forward_pass(tiny_policy_dir, make_batch,
                                                                              monkeypatch):
    """One epoch of one mini-batch differentiates at the weights the recompute would use, so the update skips
    that extra forward pass (verl's dp_actor ``on_policy``) and must land on the same weights as with it; two
    epochs still recompute (their second pass runs at moved weights)."""
    from prover.learning.learner import Learner

    batch = make_batch([[(True, 2, None), (False, 1, None), (False, 2, None)]])
    for k, turn in enumerate(batch.turns()):  # half the turns far less likely to the engine: their weight is capped
        turn.logprobs = [lp - 30.0 * (k % 2) for lp in turn.logprobs]
    recomputes = []
    real_recompute = Learner.policy_logprobs
    monkeypatch.setattr(Learner, "policy_logprobs", lambda self, units: recomputes.append(1) or
                        real_recompute(self, units))

    def trained_weights(**cfg) -> list[torch.Tensor]:
        learner = Learner(tiny_policy_dir, LearnerConfig(loss_agg="token-mean", lr=1e-2, engine_is_cap=2.0, **cfg),
                          max_completion_tokens=3)
        adv = Advantages(values=[[[np.array(ADVANTAGES, np.float32)] * len(tr.turns) for tr in g.trajectories]
                                 for g in batch.groups])
        learner.update(batch, adv)
        return [p.detach().clone() for p in learner.unwrapped().parameters()]

    skipped = trained_weights()
    assert recomputes == []
    real_own = Learner._own_old_logprobs
    monkeypatch.setattr(Learner, "_own_old_logprobs", lambda self, units, n_chunks: real_own(self, units, 2))
    recomputed = trained_weights()
    assert recomputes == [1]
    start = [p.detach() for p in Learner(tiny_policy_dir, LearnerConfig()).unwrapped().parameters()]
    moved = max(float((a - s).abs().max()) for a, s in zip(skipped, start))
    assert moved > 1e-4  # the step moved the weights: the comparison below is not of two untrained models
    assert max(float((a - b).abs().max()) for a, b in zip(skipped, recomputed)) < 1e-3 * moved
    monkeypatch.setattr(Learner, "_own_old_logprobs", real_own)
    trained_weights(ppo_epochs=2)
    assert recomputes == [1, 1]
