"""Rows batched by length, and how much of a padded forward pass is padding: the SFT's and the learner's
batching (``prover.learning.learner``), kept apart so the learner's file holds the update itself."""

from __future__ import annotations

import random


def length_batches(lengths: list[int], batch_rows: int, rng: random.Random, pool: int = 32) -> list[list[int]]:
    """Row indices in batches of ``batch_rows`` rows of similar length, so little compute goes to padding.

    The rows are shuffled, each run of ``pool`` batches' worth is sorted by length and cut into batches,
    and the batches are shuffled: every batch is still a random draw of rows, of one length band.
    """
    order = list(range(len(lengths)))
    rng.shuffle(order)
    span = batch_rows * pool
    batches = []
    for start in range(0, len(order), span):
        band = sorted(order[start:start + span], key=lambda i: lengths[i])
        batches += [band[b:b + batch_rows] for b in range(0, len(band), batch_rows)]
    rng.shuffle(batches)
    return batches


def chain_batches(chains: list[list[int]], batch_rows: int, rng: random.Random) -> list[list[int]]:
    """Row indices in batches of ``batch_rows`` rows (the last may hold fewer), as ``length_batches`` cuts
    them, so an epoch takes as many steps: the chains (each a list of consecutive row indices) in a random
    order, each kept in its order, cut every ``batch_rows`` rows. A chain cut by a batch boundary trains its
    first turns in one batch and the rest in the next."""
    order = list(range(len(chains)))
    rng.shuffle(order)
    flat = [i for c in order for i in chains[c]]
    return [flat[b:b + batch_rows] for b in range(0, len(flat), batch_rows)]


def micro_batch_order(lengths: list[int]) -> list[int]:
    """The order of a mini-batch's rows over its micro-batches: by length, so rows of similar length share a
    micro-batch and little compute goes to padding (the loss is a weighted sum over the whole mini-batch, so
    the order is free)."""
    return sorted(range(len(lengths)), key=lambda i: lengths[i])


def turn_batches(turns: list[int], cap: int) -> list[list[int]]:
    """Consecutive rows (indices) in batches of at most ``cap`` turns, row ``i`` holding ``turns[i]``: a
    batch takes whole rows while they fit, and a row of more than ``cap`` turns is a batch of its own. Rows
    of one turn each (turn rows) make batches of exactly ``cap`` rows, as the learner always cut them."""
    batches: list[list[int]] = []
    held = 0
    for i, n in enumerate(turns):
        if batches and held + n <= cap:
            batches[-1].append(i)
            held += n
        else:
            batches.append([i])
            held = n
    return batches


def padding_counts(lengths: list[int]) -> dict[str, float]:
    """The tokens of one padded forward pass over sequences of ``lengths``: ``tokens`` real, ``padded_tokens``
    computed (rows times the longest), whose difference is padding."""
    return {"tokens": float(sum(lengths)), "padded_tokens": float(len(lengths) * max(lengths, default=0))}


def padding_share(counts: dict[str, float]) -> float:
    """The share of computed tokens that were padding."""
    return 1.0 - counts["tokens"] / counts["padded_tokens"] if counts.get("padded_tokens") else 0.0
