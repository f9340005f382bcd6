"""A chat warm start forwarded once per episode trains as its turns would one row each.

The warm start's expert rows in a chat context are the turns of growing chats: each turn's prompt +
completion is the start of the next turn's prompt. ``Learner.sft`` forwards each run of such rows in a batch
once (a sequence row) when prompts carry no loss. The checks: the loss is the token-mean NLL of the completion
tokens, computed here by forwarding each turn alone; its gradient and a few steps' weights equal those of one
row per turn (float64); a chain cut by a batch boundary trains each half in its own batch; only exactly
chained rows chain; the batches hold ``batch_rows`` turns each, as one row per turn cuts them.
"""

from __future__ import annotations

import random

import pytest
import torch

import prover.learning.learner as learner_mod
from prover.config import LearnerConfig
from prover.learning.learner import Learner
from prover.learning.learner_rows import chains_of, sft_rows
from prover.learning.padding import chain_batches


def episode(rng: random.Random, completions: list[int], first: int = 9, reply: int = 5) -> list[tuple]:
    """(prompt, completion) pairs of one chat: each prompt is the one before + its completion + a reply."""
    def ids(n: int) -> list[int]:
        return [rng.randrange(3, 390) for _ in range(n)]

    prompt, pairs = ids(first), []
    for n in completions:
        completion = ids(n)
        pairs.append((prompt, completion))
        prompt = prompt + completion + ids(reply)
    return pairs


def expert_rows(seed: int = 0) -> list[tuple]:
    rng = random.Random(seed)
    return (episode(rng, [3, 5, 2, 4]) + episode(rng, [4, 1, 6], first=14, reply=7)
            + [([5, 6, 7], [8, 9])] + episode(rng, [2, 3, 3, 2, 5]))  # a one-turn episode among them


def learner(policy_dir, **cfg) -> Learner:
    settings = {"lr": 1e-3, "grad_clip": 1e9, "micro_batch_rows": 4, **cfg}
    out = Learner(policy_dir, LearnerConfig(**settings), seed=0)
    out.model.double()
    return out


def trained(policy_dir, rows, batch_rows: int, **cfg) -> tuple[dict, dict[str, torch.Tensor], dict]:
    """One epoch of SFT: its stats, the last batch's gradient and the weights after it."""
    lrn = learner(policy_dir, **cfg)
    stats = lrn.sft(rows, epochs=1, batch_rows=batch_rows, prompt_weight=0.0)
    named = dict(lrn.unwrapped().named_parameters())
    return stats, {k: p.grad.clone() for k, p in named.items()}, {k: p.detach().clone() for k, p in named.items()}


def token_mean_nll(policy_dir, rows) -> float:
    """The definition: each turn's prompt + completion forwarded alone, -log p of each completion token given
    everything before it, averaged over all completion tokens."""
    model = learner(policy_dir).model.eval()
    total, n = 0.0, 0
    with torch.no_grad():
        for prompt, completion in rows:
            ids = torch.tensor([prompt + completion])
            logp = torch.log_softmax(model(input_ids=ids).logits[0], dim=-1)
            for j, token in enumerate(completion):
                total -= float(logp[len(prompt) + j - 1, token])
                n += 1
    return total / n


def assert_close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], rtol: float) -> None:
    scale = max(float(g.abs().max()) for g in a.values())
    assert scale > 0
    for k in a:
        assert float((a[k] - b[k]).abs().max()) <= rtol * scale, k


def test_one_forward_per_episode_gives_the_loss_and_gradient_of_one_row_per_turn(tiny_policy_dir, float64_norms):
    rows = expert_rows()
    once, once_grad, _ = trained(tiny_policy_dir, rows, batch_rows=len(rows))
    per_turn, turn_grad, _ = trained(tiny_policy_dir, rows, batch_rows=len(rows), sequence_rows=False)
    want = token_mean_nll(tiny_policy_dir, rows)
    assert once["sft/loss_first"] == pytest.approx(want, rel=1e-10)
    assert per_turn["sft/loss_first"] == pytest.approx(want, rel=1e-10)
    assert_close(once_grad, turn_grad, 1e-9)
    # the episodes' last rows, and the one-turn episode, are all that is forwarded
    assert once["sft/forwarded_tokens"] == sum(len(p) + len(c) for p, c in (rows[3], rows[6], rows[7], rows[12]))
    assert per_turn["sft/forwarded_tokens"] == sum(len(p) + len(c) for p, c in rows)


def test_episodes_cut_by_batch_boundaries_train_as_their_turns_do(tiny_policy_dir, float64_norms, monkeypatch):
    """The same batches in both modes (4 turns each, so episodes 1 and 4 are cut): three AdamW steps leave
    the same weights, and each batch's loss is the same."""
    rows = expert_rows()
    batches = [list(range(b, min(b + 4, len(rows)))) for b in range(0, len(rows), 4)]
    monkeypatch.setattr(learner_mod, "chain_batches", lambda chains, size, rng: batches)
    monkeypatch.setattr(learner_mod, "length_batches", lambda lengths, size, rng: batches)
    once, _, once_weights = trained(tiny_policy_dir, rows, batch_rows=4, micro_batch_rows=2)
    per_turn, _, turn_weights = trained(tiny_policy_dir, rows, batch_rows=4, micro_batch_rows=2, sequence_rows=False)
    assert once["sft/loss_last"] == pytest.approx(per_turn["sft/loss_last"], rel=1e-10)
    start = dict(learner(tiny_policy_dir).unwrapped().named_parameters())
    moved = {k: turn_weights[k] - start[k].detach() for k in start}
    assert_close({k: once_weights[k] - start[k].detach() for k in start}, moved, 1e-8)


def test_only_exactly_chained_rows_chain():
    rows = expert_rows()
    assert chains_of(sft_rows(rows)) == [[0, 1, 2, 3], [4, 5, 6], [7], [8, 9, 10, 11, 12]]
    broken = [(list(p), list(c)) for p, c in rows]
    for later in (2, 3):  # one token of turn 1's completion differs in turn 2's prompt (and so in turn 3's)
        broken[later][0][len(broken[1][0]) + 1] += 1
    assert chains_of(sft_rows(broken))[:2] == [[0, 1], [2, 3]]
    windowed = [([1, 2, 3], [4]), ([1, 2, 9, 4], [5]), ([1, 2, 9, 4, 5], [6])]  # a prompt that drops a token
    assert chains_of(sft_rows(windowed)) == [[0], [1, 2]]


def test_chain_batches_hold_batch_rows_turns_with_each_episode_in_order():
    chains = [[0, 1, 2, 3], [4, 5, 6], [7], [8, 9, 10, 11, 12]]
    batches = chain_batches(chains, 5, random.Random(0))
    assert [len(b) for b in batches] == [5, 5, 3]  # as many steps as 13 rows in batches of 5
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(13))
    for chain in chains:
        assert [i for i in flat if i in chain] == chain
    orders = {tuple(i for b in chain_batches(chains, 5, random.Random(s)) for i in b) for s in range(8)}
    assert len(orders) > 1  # the episodes are shuffled
