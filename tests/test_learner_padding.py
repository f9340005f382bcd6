"""Padding in the learner's forward passes: the share the RL update and the SFT report, and that ordering a
mini-batch's rows by length over its micro-batches (less padding) leaves the update as it was: the same
loss, the same per-token normalisation, the same gradient, within float rounding."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import prover.learning.learner as learner_mod
from prover.config import LearnerConfig
from prover.learning.learner import Learner, padding_counts, padding_share
from prover.learning.logprobs import completion_logits, gather_logprobs
from prover.types import Advantages, Batch, Group, Trajectory, Turn

PROMPTS = [3, 9, 4, 12, 5, 10]  # rows of lengths 5, 12, 5, 16, 7, 13 with COMPLETIONS
COMPLETIONS = [2, 3, 1, 4, 2, 3]
ADVANTAGES = [[1.0, 0.5], [-1.0, 2.0, 0.25], [3.0], [-0.5, -0.5, 1.0, 2.0], [0.75, -2.0], [1.5, 1.0, -1.0]]


def test_padding_counts_and_share_by_hand():
    assert padding_counts([3, 5]) == {"tokens": 8.0, "padded_tokens": 10.0}
    assert padding_share({"tokens": 8.0, "padded_tokens": 10.0}) == pytest.approx(0.2)
    assert padding_share({"tokens": 0.0, "padded_tokens": 0.0}) == 0.0  # nothing ran


def batch_for(learner: Learner) -> tuple[Batch, Advantages]:
    """Single-turn trajectories of PROMPTS / COMPLETIONS tokens whose old log-probs are the learner's own,
    so every ratio is 1 and each token's PPO loss is minus its advantage."""
    rng = random.Random(0)
    prompts = [[rng.randrange(3, 300) for _ in range(n)] for n in PROMPTS]
    completions = [[rng.randrange(3, 300) for _ in range(n)] for n in COMPLETIONS]
    with torch.no_grad():
        logits, targets, mask = completion_logits(learner.unwrapped(), prompts, completions, learner.pad_id)
        lp = gather_logprobs(logits, targets)
    trajs = [Trajectory(traj_id=f"t{i}", task_id="task", task_text="t", turns=[Turn(
        prompt_ids=p, completion_ids=c, logprobs=lp[i][mask[i]].tolist(), observation="o", completion_text="c",
        action="a", format_valid=True, action_valid=True, reward=0.0, state_key=i)])
        for i, (p, c) in enumerate(zip(prompts, completions))]
    return Batch([Group("task", trajs)]), Advantages(values=[[[np.array(a, np.float32)] for a in ADVANTAGES]])


def updated(policy_dir, micro_rows: int, loss_agg: str = "token-mean") -> tuple[dict, list[torch.Tensor]]:
    """One update on the whole batch (one mini-batch): its metrics and the gradient it stepped with."""
    learner = Learner(policy_dir, LearnerConfig(lr=1e-3, mini_batch_rows=8, micro_batch_rows=micro_rows,
                                                loss_agg=loss_agg, grad_clip=1e6), max_completion_tokens=4, seed=0)
    stats = learner.update(*batch_for(learner))
    return stats, [p.grad.clone() for p in learner.model.parameters()]  # the last mini-batch's, kept


@pytest.mark.parametrize("loss_agg", ["token-mean", "traj-mean-token-mean"])
def test_micro_batches_by_length_leave_the_loss_and_gradient_unchanged(tiny_policy_dir, monkeypatch, loss_agg):
    whole, whole_grad = updated(tiny_policy_dir, 8, loss_agg)  # one micro-batch: no order to speak of
    by_length, by_length_grad = updated(tiny_policy_dir, 2, loss_agg)
    monkeypatch.setattr(learner_mod, "micro_batch_order", lambda lengths: list(range(len(lengths))))
    shuffled, shuffled_grad = updated(tiny_policy_dir, 2, loss_agg)  # the rows' shuffled order, as before
    # ratio 1 everywhere: the loss is minus the aggregate of the advantages, however the rows were split
    flat = np.concatenate([np.asarray(a) for a in ADVANTAGES])
    want = -flat.mean() if loss_agg == "token-mean" else -np.mean([np.mean(a) for a in ADVANTAGES])
    for stats in (whole, by_length, shuffled):
        assert stats["learner/pg_loss"] == pytest.approx(want, abs=1e-5)
    for a, b, c in zip(whole_grad, by_length_grad, shuffled_grad):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-7) and torch.allclose(a, c, rtol=1e-4, atol=1e-7)


def test_the_update_reports_the_padding_of_its_micro_batches(tiny_policy_dir, monkeypatch):
    lengths = [p + c for p, c in zip(PROMPTS, COMPLETIONS)]  # 5, 12, 5, 16, 7, 13
    # by length, in pairs: (5, 5), (7, 12), (13, 16): 66 tokens computed for 58
    stats, _ = updated(tiny_policy_dir, 2)
    assert stats["learner/padding_share"] == pytest.approx(1 - 58 / 66)
    assert sum(lengths) == 58
    monkeypatch.setattr(learner_mod, "micro_batch_order", lambda lengths: list(range(len(lengths))))
    unsorted, _ = updated(tiny_policy_dir, 2)
    assert unsorted["learner/padding_share"] > stats["learner/padding_share"]
    whole, _ = updated(tiny_policy_dir, 8)  # one forward pass of 6 rows of 16
    assert whole["learner/padding_share"] == pytest.approx(1 - 58 / 96)


@pytest.mark.parametrize("prompt_weight", [0.0, 1.0])
def test_sft_reports_the_padding_of_its_batches(tiny_policy_dir, prompt_weight):
    learner = Learner(tiny_policy_dir, LearnerConfig(lr=1e-3, micro_batch_rows=32), seed=0)
    rows = [([7] * p, [8] * c) for p, c in zip(PROMPTS, COMPLETIONS)]
    one_batch = learner.sft(rows, epochs=1, batch_rows=len(rows), prompt_weight=prompt_weight)
    assert one_batch["sft/padding_share"] == pytest.approx(1 - 58 / 96)
    same_length = learner.sft([([7] * 6, [8] * 2)] * 4, epochs=1, batch_rows=2, prompt_weight=prompt_weight)
    assert same_length["sft/padding_share"] == 0.0
