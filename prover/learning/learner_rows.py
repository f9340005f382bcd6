"""What the learner forwards: rows built from a batch and its advantages, and their logits.

A turn row (``Row``) is one turn: its prompt, its completion and, per completion token, the sampling
log-prob, the advantage and the loss mask. It is what every turn of a windowed prompt trains as.

A sequence row (``SequenceRow``) is several turns of one trajectory whose token ids are append-only: each
turn's prompt + completion is, exactly, the start of the next turn's prompt (as chat prompts are).
It is forwarded once, as its last turn's prompt + completion, and each turn's completion is trained at its
own positions with its own advantages, log-probs and mask; every other token is context. Causal attention
makes the logits at a position depend on the tokens before it alone, so they are the turn row's logits,
up to float rounding (tests/test_learner_sequences.py).

Nothing is switched on: ``sequence_rows`` chains the turn rows that are append-only and leaves the others
as they are, so a windowed batch yields exactly the turn rows it always did. The loss is still aggregated
over turns (``token_weights``): a sequence row carries each of its turns' weights at that turn's tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from prover.learning.logprobs import completion_logits, sequence_logits
from prover.types import Advantages, Batch, shared_prefix_length

if TYPE_CHECKING:
    import torch


@dataclass
class Row:
    """One training row: a turn's exact ids and, per completion token, old log-prob, advantage, mask."""

    prompt_ids: list[int]
    completion_ids: list[int]
    old_logprobs: np.ndarray  # (c,)
    advantages: np.ndarray  # (c,)
    loss_mask: np.ndarray  # (c,) 1 = trained on
    traj_turns: int = 1  # turns of the trajectory this row belongs to
    padding: bool = False  # an empty row that only keeps processes in step (see Learner.update)
    traj: int = -1  # index of its trajectory in the batch: only a trajectory's own rows chain
    # with learner.engine_is_cap: the engine's sampling log-probs, once old_logprobs holds the learner's own
    engine_logprobs: np.ndarray | None = None

    @property
    def ids(self) -> list[int]:
        return list(self.prompt_ids) + list(self.completion_ids)

    @property
    def turn_rows(self) -> list[Row]:
        return [self]

    @property
    def spans(self) -> list[tuple[int, int]]:
        """Where each trained completion lies in ``ids``: [start, end)."""
        return [(len(self.prompt_ids), len(self.prompt_ids) + len(self.completion_ids))]


@dataclass
class SequenceRow:
    """Append-only turn rows of one trajectory, forwarded once as the last one's prompt + completion."""

    turns: list[Row]
    padding: bool = False  # never: padding rows are turn rows

    @property
    def ids(self) -> list[int]:
        return self.turns[-1].ids

    @property
    def turn_rows(self) -> list[Row]:
        return self.turns

    @property
    def spans(self) -> list[tuple[int, int]]:
        return [span for t in self.turns for span in t.spans]


def rows_from(batch: Batch, adv: Advantages, skip_zero: bool) -> list[Row]:
    """One turn row per turn that has tokens and (with ``skip_zero``) a nonzero advantage on a live token."""
    masks = adv.flat_mask()
    traj_of = [(k, len(tr.turns)) for k, tr in enumerate(tr for g in batch.groups for tr in g.trajectories)
               for _ in tr.turns]
    rows = []
    for k, (turn, a) in enumerate(zip(batch.turns(), adv.flat())):
        m = masks[k] if masks is not None else np.ones(turn.n_tokens, dtype=np.float32)
        if turn.n_tokens == 0 or (skip_zero and not np.any(a * m)):
            continue
        rows.append(Row(turn.prompt_ids, turn.completion_ids, np.asarray(turn.logprobs, np.float32),
                        np.asarray(a, np.float32), np.asarray(m, np.float32), traj_of[k][1], traj=traj_of[k][0]))
    return rows


def appends(before: Row, after: Row) -> bool:
    """``after``'s prompt starts with ``before``'s prompt + completion, token for token."""
    ids = before.ids
    return before.traj == after.traj >= 0 and list(after.prompt_ids[:len(ids)]) == ids


def sequence_rows(rows: list[Row], max_row_tokens: int | None = None) -> list[Row | SequenceRow]:
    """``rows`` (in batch order) with every run of consecutive append-only turn rows of one trajectory made
    one sequence row. A trajectory that stops being append-only at some turn is cut there: the turns on
    each side chain among themselves. A run of one stays the turn row it was.

    ``max_row_tokens``: a run whose tokens past the previous piece would exceed it is cut at turn
    boundaries into pieces; each piece is a prefix of the trajectory (it re-forwards the pieces before it
    as context) and trains only its own turns. Within one mini-batch the gradient is the uncut row's; the
    pieces are units of their own when the learner shuffles rows into mini-batches, so with several
    mini-batches a trajectory's pieces can land in different optimizer steps."""
    runs: list[list[Row]] = []
    for row in rows:
        if runs and appends(runs[-1][-1], row):
            runs[-1].append(row)
        else:
            runs.append([row])
    return [piece[0] if len(piece) == 1 else SequenceRow(piece)
            for run in runs for piece in split_run(run, max_row_tokens)]


def split_run(run: list[Row], max_row_tokens: int | None) -> list[list[Row]]:
    """``run`` cut at turn boundaries so that each piece adds at most ``max_row_tokens`` tokens to the end
    of the piece before it (a piece holds at least one turn)."""
    if max_row_tokens is None:
        return [run]
    pieces: list[list[Row]] = []
    done = 0  # where the pieces before the last one end
    for row in run:
        if pieces and len(row.prompt_ids) + len(row.completion_ids) - done <= max_row_tokens:
            pieces[-1].append(row)
            continue
        if pieces:
            done = len(pieces[-1][-1].prompt_ids) + len(pieces[-1][-1].completion_ids)
        pieces.append([row])
    return pieces


def sft_rows(pairs: list[tuple[list[int], list[int]]]) -> list[Row]:
    """Behaviour-cloning (prompt, completion) pairs as turn rows that weigh every completion token 1; a pair
    whose prompt starts with the pair before it (prompt + completion, token for token: the turns of one
    chat) gets that pair's ``traj``, so ``sequence_rows`` chains them, and any other pair starts a new one."""
    rows: list[Row] = []
    for prompt, completion in pairs:
        ones = np.ones(len(completion), np.float32)
        follows = bool(rows) and list(prompt[:len(rows[-1].ids)]) == rows[-1].ids
        rows.append(Row(list(prompt), list(completion), np.zeros_like(ones), ones, ones,
                        traj=rows[-1].traj if follows else len(rows)))
    return rows


def chains_of(rows: list[Row]) -> list[list[int]]:
    """Indices of ``rows`` grouped into runs of consecutive rows of one ``traj``."""
    chains: list[list[int]] = []
    for i, row in enumerate(rows):
        if chains and rows[chains[-1][-1]].traj == row.traj:
            chains[-1].append(i)
        else:
            chains.append([i])
    return chains


def unique_tokens(rows: list[Row]) -> int:
    """The distinct tokens of the turn rows (in batch order): per trajectory, each row's prompt + completion
    less the prefix it shares with the trajectory's row before it. Forwarding a whole trajectory once
    forwards exactly this many; one row per turn forwards every prompt again."""
    total, before = 0, None
    for row in rows:
        ids = row.ids
        same_trajectory = before is not None and before.traj == row.traj >= 0
        total += len(ids) - (shared_prefix_length(before.ids, ids) if same_trajectory else 0)
        before = row
    return total


def token_weights(masks: list[np.ndarray], mode: str, max_len: int,
                  traj_turns: list[int] | None = None) -> list[np.ndarray]:
    """Per-token weights that turn a sum over a mini-batch into ``mode``'s aggregate (one mask per turn)."""
    n_rows = max(len(masks), 1)
    if mode == "traj-mean-token-mean":  # each trajectory weighs the same, however many turns it has
        share = [1.0 / t for t in (traj_turns or [1] * len(masks))]
        total = sum(share) + 1e-8
        return [m * s / (total * (float(m.sum()) + 1e-8)) for m, s in zip(masks, share)]
    if mode == "token-mean":
        total = sum(float(m.sum()) for m in masks) + 1e-8
        return [m / total for m in masks]
    if mode == "seq-mean-token-sum":
        return [m / n_rows for m in masks]
    if mode == "seq-mean-token-mean":
        return [m / (n_rows * (float(m.sum()) + 1e-8)) for m in masks]
    if mode == "seq-mean-token-sum-norm":  # Dr.GRPO: a constant normaliser
        return [m / max_len for m in masks]
    raise ValueError(f"unknown loss aggregation {mode!r}")


def row_token_weights(rows: list[Row | SequenceRow], mode: str, max_len: int) -> list[list[np.ndarray]]:
    """Each row's token weights in a mini-batch, one array per turn row: ``token_weights`` over the real rows'
    turns (the loss is aggregated over turns), and a padding row's zero mask, which weighs nothing."""
    turns = [t for r in rows if not r.padding for t in r.turn_rows]
    weights = iter(token_weights([t.loss_mask for t in turns], mode, max_len, [t.traj_turns for t in turns]))
    return [[r.loss_mask] if r.padding else [next(weights) for _ in r.turn_rows] for r in rows]


def row_logits(model: torch.nn.Module, rows: list[Row | SequenceRow], pad_id: int
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Logits, targets and mask for the turns of ``rows``, one grid row per turn in order, as
    ``completion_logits`` lays them out. Turn rows alone go through ``completion_logits`` as they always
    did; with a sequence row among them, every row is forwarded once (``sequence_logits``)."""
    if all(isinstance(r, Row) for r in rows):
        return completion_logits(model, [r.prompt_ids for r in rows], [r.completion_ids for r in rows], pad_id)
    return sequence_logits(model, [r.ids for r in rows],
                           [(i, s, e) for i, r in enumerate(rows) for s, e in r.spans], pad_id)


def per_turn(grid: torch.Tensor, rows: list[Row | SequenceRow]) -> list[list[np.ndarray]]:
    """A (turns, C) grid laid out as ``row_logits`` lays out its targets (one grid row per turn, each
    completion in its last columns) as each row's turns' completion values, one array per turn row."""
    values, turns = grid.detach().float().cpu().numpy(), iter(range(len(grid)))
    width = values.shape[1]
    return [[values[k, width - len(t.completion_ids):] for t, k in zip(r.turn_rows, turns)] for r in rows]
