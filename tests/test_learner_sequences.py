"""A chat trajectory forwarded once (a sequence row) trains as its turns would one row each.

Every turn's prompt + completion is the start of the next turn's prompt (chat prompts: the transcript so far
plus the env's reply), so causal attention gives each completion token the same logits in the whole
trajectory as in its own turn row. The checks: per-token log-probs and gradients of the sequence rows equal
the turn rows' (float64 to 1e-10 relative; float32 within a stated bound), for several loss aggregations;
a long trajectory cut into pieces leaves the gradient as it was; only exactly append-only turns chain;
filtered turns stay out of the loss; forwarded and unique token counts by hand.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from prover.config import LearnerConfig
from prover.learning.learner import Learner
from prover.learning.learner_rows import (
    Row,
    SequenceRow,
    row_logits,
    rows_from,
    sequence_rows,
    split_run,
    unique_tokens,
)
from prover.learning.logprobs import gather_logprobs
from prover.learning.modeling import load_model
from prover.learning.padding import turn_batches
from prover.types import Advantages, Batch, Group, Trajectory, Turn


def turn(prompt: list[int], completion: list[int], logprobs: list[float] | None = None) -> Turn:
    return Turn(prompt_ids=list(prompt), completion_ids=list(completion),
                logprobs=logprobs if logprobs is not None else [-6.0] * len(completion), observation="o",
                completion_text="c", action="a", format_valid=True, action_valid=True, reward=0.0, state_key=0)


def chat(rng: random.Random, completions: list[int], first: int = 9, observation: int = 5) -> list[Turn]:
    """Turns of one chat: the first prompt, then each prompt = the one before + its completion + an
    observation of ``observation`` tokens. Old log-probs near the tiny model's (~ -6), so ratios vary."""
    def ids(n: int) -> list[int]:
        return [rng.randrange(3, 390) for _ in range(n)]

    prompt, turns = ids(first), []
    for n in completions:
        completion = ids(n)
        turns.append(turn(prompt, completion, [-6.0 + rng.uniform(-0.3, 0.3) for _ in range(n)]))
        prompt = prompt + completion + ids(observation)
    return turns


def batch_of(trajectories: list[list[Turn]], seed: int = 1) -> tuple[Batch, Advantages]:
    """One group of ``trajectories``, with a random nonzero advantage per token (a sign that varies)."""
    rng = np.random.default_rng(seed)
    trajs = [Trajectory(traj_id=f"t{i}", task_id="task", task_text="t", turns=turns)
             for i, turns in enumerate(trajectories)]
    values = [[[(rng.uniform(0.2, 1.5, t.n_tokens) * rng.choice([-1.0, 1.0])).astype(np.float32)
                for t in turns] for turns in trajectories]]
    return Batch([Group("task", trajs)]), Advantages(values=values)


def chats(seed: int = 0) -> list[list[Turn]]:
    rng = random.Random(seed)
    return [chat(rng, [3, 5, 2, 4]), chat(rng, [4, 1, 6], first=14, observation=7), chat(rng, [2, 3, 3, 2, 5])]


def same(a: list, b: list) -> bool:
    """The very same objects, in order (rows hold arrays, so ``==`` would compare element-wise)."""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


# -- log-probs ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("dtype", "tol"), [(torch.float64, 1e-10), (torch.float32, 1e-6)])
def test_sequence_rows_give_each_token_the_log_prob_of_its_turn_row(tiny_policy_dir, float64_norms, dtype, tol):
    model = load_model(tiny_policy_dir).to(dtype).eval()
    rows = rows_from(*batch_of(chats()), skip_zero=False)
    units = sequence_rows(rows)
    assert [len(u.turn_rows) for u in units] == [4, 3, 5] and all(isinstance(u, SequenceRow) for u in units)
    with torch.no_grad():
        turn_logits, turn_targets, turn_mask = row_logits(model, rows, 0)  # today's turn rows
        per_turn = gather_logprobs(turn_logits, turn_targets)
        logits, targets, mask = row_logits(model, units, 0)  # all three chats in one forward pass
        once = gather_logprobs(logits, targets)
    assert logits.dtype == dtype and logits.shape[0] == len(rows)
    assert torch.equal(mask, turn_mask)
    got, want = once[mask], per_turn[turn_mask]
    assert len(got) == sum(len(r.completion_ids) for r in rows)
    # float32: the two passes differ in padding and length, so their sums round differently (seen: 8e-8)
    assert float((got - want).abs().max()) <= tol * float(want.abs().max())


# -- gradients ---------------------------------------------------------------------------------------

def update(policy_dir, trajectories, *, double: bool = True, **cfg) -> tuple[dict, dict[str, torch.Tensor]]:
    """One update on the whole batch (one mini-batch); its metrics and the gradient it stepped with."""
    settings = {"lr": 1e-3, "grad_clip": 1e9, "mini_batch_rows": 64, "micro_batch_rows": 4, **cfg}
    learner = Learner(policy_dir, LearnerConfig(**settings), max_completion_tokens=6, seed=0)
    if double:
        learner.model.double()
        if learner.ref is not None:
            learner.ref.double()
    stats = learner.update(*batch_of(trajectories))
    return stats, {k: p.grad.clone() for k, p in learner.unwrapped().named_parameters()}


def assert_same_gradient(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], rtol: float) -> None:
    scale = max(float(g.abs().max()) for g in a.values())
    assert scale > 0
    for k in a:
        assert float((a[k] - b[k]).abs().max()) <= rtol * scale, k


LEARNED = ("pg_loss", "kl", "entropy", "clipfrac", "ppo_kl")


@pytest.mark.parametrize("loss_agg", ["token-mean", "traj-mean-token-mean", "seq-mean-token-mean",
                                      "seq-mean-token-sum"])
def test_sequence_rows_give_the_turn_rows_gradient(tiny_policy_dir, float64_norms, loss_agg):
    extra = {"kl_coef": 0.1, "entropy_coef": 0.01} if loss_agg == "token-mean" else {}  # the reference's pass too
    turns, turns_grad = update(tiny_policy_dir, chats(), loss_agg=loss_agg, sequence_rows=False, **extra)
    once, once_grad = update(tiny_policy_dir, chats(), loss_agg=loss_agg, **extra)
    assert turns["learner/sequence_rows"] == 0 and once["learner/sequence_rows"] == 3
    assert turns["learner/updates"] == once["learner/updates"] == 1
    for k in LEARNED:
        assert once[f"learner/{k}"] == pytest.approx(turns[f"learner/{k}"], rel=1e-10, abs=1e-13), k
    assert once["learner/clipfrac"] > 0 and turns["learner/pg_loss"] != 0  # the ratios do get clipped
    assert_same_gradient(once_grad, turns_grad, 1e-9)


def test_float32_sequence_rows_give_the_turn_rows_gradient_within_rounding(tiny_policy_dir):
    _, turns_grad = update(tiny_policy_dir, chats(), double=False, sequence_rows=False)
    _, once_grad = update(tiny_policy_dir, chats(), double=False)
    assert_same_gradient(once_grad, turns_grad, 1e-5)  # seen: 2.3e-7 of the largest gradient entry


def test_lora_sequence_rows_give_the_turn_rows_gradient(tiny_policy_dir):
    """Through peft's wrapper, and the reference as the model with its adapters off (kl_coef > 0)."""
    pytest.importorskip("peft")
    from prover.config import LoraConfig

    def lora_update(sequence_rows: bool) -> tuple[dict, dict[str, torch.Tensor]]:
        torch.manual_seed(0)  # fresh adapters draw A at random: the same A in both
        learner = Learner(tiny_policy_dir, LearnerConfig(lr=1e-3, grad_clip=1e9, kl_coef=0.1, micro_batch_rows=4,
                                                         sequence_rows=sequence_rows),
                          max_completion_tokens=6, lora=LoraConfig(enabled=True, rank=4, alpha=8.0))
        stats = learner.update(*batch_of(chats()))
        return stats, {k: p.grad.clone() for k, p in learner.unwrapped().named_parameters() if p.requires_grad}

    (turns, turns_grad), (once, once_grad) = lora_update(False), lora_update(True)
    assert once["learner/sequence_rows"] == 3 and turns["learner/sequence_rows"] == 0
    assert once["learner/pg_loss"] == pytest.approx(turns["learner/pg_loss"], rel=1e-5)
    assert_same_gradient(once_grad, turns_grad, 1e-5)


def test_a_trajectory_cut_into_pieces_keeps_its_gradient(tiny_policy_dir, float64_norms):
    whole, whole_grad = update(tiny_policy_dir, chats(), micro_batch_rows=64)  # each chat one row
    cut, cut_grad = update(tiny_policy_dir, chats(), micro_batch_rows=2, max_row_tokens=25)
    assert cut["learner/sequence_rows"] > whole["learner/sequence_rows"] == 3
    assert cut["learner/forwarded_tokens"] > whole["learner/forwarded_tokens"]  # the context, again
    for k in LEARNED:
        assert cut[f"learner/{k}"] == pytest.approx(whole[f"learner/{k}"], rel=1e-10, abs=1e-13), k
    assert_same_gradient(cut_grad, whole_grad, 1e-9)


def test_pieces_are_prefixes_that_train_their_own_turns():
    rows = rows_from(*batch_of([chat(random.Random(3), [2, 2, 2, 2, 2], first=4, observation=3)]), skip_zero=False)
    ends = [len(r.ids) for r in rows]  # 6, 11, 16, 21, 26: each turn adds its observation and completion
    assert ends == [6, 11, 16, 21, 26]
    pieces = split_run(rows, max_row_tokens=10)
    # piece 1 holds turns while they end within 10 tokens of 0; piece 2 within 10 of 6; piece 3 of 16
    assert [[len(r.ids) for r in p] for p in pieces] == [[6], [11, 16], [21, 26]]
    units = sequence_rows(rows, max_row_tokens=10)
    assert isinstance(units[0], Row) and [len(u.ids) for u in units] == [6, 16, 26]
    for u in units:
        assert u.ids == rows[-1].ids[:len(u.ids)]  # a prefix of the whole chat
    assert same([t for u in units for t in u.turn_rows], rows)  # every turn trained once, in its own piece
    assert [len(p) for p in split_run(rows, max_row_tokens=100)] == [5]
    assert [len(p) for p in split_run(rows, None)] == [5]


# -- what chains ---------------------------------------------------------------------------------------

def test_windowed_prompts_stay_turn_rows():
    """Today's prompts: the task, then a window of history that slides; no turn starts with the last one."""
    task = [11, 12, 13]  # then the step number, the last action and the observation
    windowed = [turn(task + [1, 20], [30]), turn(task + [2, 30, 21], [31]), turn(task + [3, 31, 22], [32])]
    rows = rows_from(*batch_of([windowed]), skip_zero=False)
    assert same(sequence_rows(rows), rows)  # the very rows of today, in their order


def test_a_chat_that_breaks_once_chains_on_each_side_of_the_break():
    turns = chat(random.Random(5), [2, 3, 2, 2])
    broken = list(turns[2].prompt_ids)
    broken[len(turns[1].prompt_ids) + 1] += 1  # one token of turn 1's completion differs in turn 2's prompt
    for t in turns[2:]:
        t.prompt_ids = broken[:len(turns[2].prompt_ids)] + list(t.prompt_ids[len(turns[2].prompt_ids):])
    rows = rows_from(*batch_of([turns]), skip_zero=False)
    units = sequence_rows(rows)
    assert [len(u.turn_rows) for u in units] == [2, 2]
    assert same([t for u in units for t in u.turn_rows], rows)


def test_only_a_trajectorys_own_turns_chain():
    first = chat(random.Random(6), [2, 2])
    copy = [turn(first[1].prompt_ids + first[1].completion_ids + [5], [7, 8])]  # appends to another episode
    units = sequence_rows(rows_from(*batch_of([first, copy]), skip_zero=False))
    assert [len(u.turn_rows) for u in units] == [2, 1]


def test_filtered_turns_are_context_not_loss():
    turns = chat(random.Random(7), [2, 3, 2, 2])
    batch, adv = batch_of([turns])
    adv.values[0][0][1] = np.zeros(3, np.float32)  # turn 1: nothing to learn, left out by skip_zero
    adv.values[0][0][3] = np.full(2, np.nan, np.float32)  # turn 3: NaN, dropped by the update
    rows = [r for r in rows_from(batch, adv, skip_zero=True) if np.isfinite(r.advantages).all()]
    (unit,) = sequence_rows(rows)
    assert same(unit.turn_rows, rows) and [len(r.completion_ids) for r in rows] == [2, 2]
    assert unit.ids == turns[2].prompt_ids + turns[2].completion_ids  # ends where the last trained turn does
    assert unit.spans == [(len(turns[0].prompt_ids), len(turns[0].prompt_ids) + 2),
                          (len(turns[2].prompt_ids), len(turns[2].prompt_ids) + 2)]


# -- counts ----------------------------------------------------------------------------------------------

def test_forwarded_and_unique_tokens_by_hand(tiny_policy_dir):
    # first prompt 4, completions 2, observations 3: turn rows of 6, 11 and 16 tokens; the chat is 16 long
    turns = chat(random.Random(8), [2, 2, 2], first=4, observation=3)
    rows = rows_from(*batch_of([turns]), skip_zero=False)
    assert unique_tokens(rows) == 16
    once, _ = update(tiny_policy_dir, [turns], double=False)
    per_turn, _ = update(tiny_policy_dir, [turns], double=False, sequence_rows=False)
    assert (once["learner/forwarded_tokens"], once["learner/unique_tokens"]) == (16, 16)
    assert (per_turn["learner/forwarded_tokens"], per_turn["learner/unique_tokens"]) == (6 + 11 + 16, 16)
    # windowed: [1 2 3 4]+[5 6], then [1 2 9 9 9]+[7 8], which shares its first 2 tokens: 6 + (7 - 2)
    windowed = rows_from(*batch_of([[turn([1, 2, 3, 4], [5, 6]), turn([1, 2, 9, 9, 9], [7, 8])]]), skip_zero=False)
    assert unique_tokens(windowed) == 11


def test_turn_batches_by_hand():
    assert turn_batches([1] * 5, 2) == [[0, 1], [2, 3], [4]]  # turn rows: chunks of the cap, as always
    assert turn_batches([3, 2, 4, 1, 5], 5) == [[0, 1], [2, 3], [4]]
    assert turn_batches([7, 1, 1], 4) == [[0], [1, 2]]  # more turns than the cap: a batch of its own
    assert turn_batches([], 3) == []


def test_bfloat16_autocast_changes_the_update_by_bfloat16_rounding_only(tiny_policy_dir):
    """``learner.autocast=bfloat16`` runs the forward pass's products in bfloat16: the gradient moves off
    float32's by about bfloat16's rounding (8 bits of mantissa: 2^-8 relative per product), not more, and it
    does move (the setting is not ignored). The weights stay float32."""
    _, plain = update(tiny_policy_dir, chats(), double=False)
    stats, cast = update(tiny_policy_dir, chats(), double=False, autocast="bfloat16")
    scale = max(float(g.abs().max()) for g in plain.values())
    worst = max(float((plain[k] - cast[k]).abs().max()) for k in plain)
    assert 1e-6 * scale < worst < 0.1 * scale
    assert all(g.dtype == torch.float32 for g in cast.values()) and stats["learner/nonfinite_updates"] == 0


def test_cut_pieces_change_the_update_once_the_rows_span_several_mini_batches(tiny_policy_dir, float64_norms):
    """What learner.max_row_tokens's description says: one mini-batch, the same gradient (above); several,
    the pieces are shuffled as rows of their own, so the optimizer steps see other turns and the weights end
    elsewhere."""
    from prover.config import LearnerConfig as Fields

    def weights_after(**cfg) -> tuple[dict, dict[str, torch.Tensor]]:
        learner = Learner(tiny_policy_dir, LearnerConfig(lr=1e-3, grad_clip=1e9, micro_batch_rows=4, **cfg),
                          max_completion_tokens=6, seed=0)
        learner.model.double()
        stats = learner.update(*batch_of(chats()))
        return stats, {k: p.detach().clone() for k, p in learner.unwrapped().named_parameters()}

    (whole, w_whole), (cut, w_cut) = weights_after(mini_batch_rows=5), weights_after(mini_batch_rows=5,
                                                                                      max_row_tokens=25)
    assert whole["learner/rows"] == cut["learner/rows"] == 12 and whole["learner/updates"] > 1
    drift = max(float((w_whole[k] - w_cut[k]).abs().max()) for k in w_whole)
    assert drift > 1e-6  # far above float64 rounding: a different update, not the same one rounded otherwise
    described = Fields.model_fields["max_row_tokens"].description
    assert "gradient is unchanged" not in described and "mini-batch" in described and "differs" in described
