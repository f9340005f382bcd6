"""The ``hf`` engine's prefix KV cache: the key and value columns of token sequences it has run, kept across
``generate`` calls and found by longest common prefix, as SGLang's radix cache finds them.

Under causal attention the KV of a sequence's first k tokens depends on those k tokens alone, so a stored
sequence serves the first ``lcp`` tokens of any prompt it shares them with: the next turn of a chat whose
prompt starts with this turn's prompt and completion, a group's episodes at turn 0, a branch point's
continuations. Keys carry their rotary positions, and a reused column keeps its position (the number of
real tokens before it), so laying the columns out again elsewhere is exact. That holds for full-attention
layers over a ``DynamicCache`` only (``prefix.sharing_mode`` says ``prefix``): a sliding window counts
columns and a recurrent (linear-attention) layer keeps a state, not columns, so those models get no cache.

Bounded: entries are evicted least recently used first once their bytes pass ``max_bytes``; an entry that
is a prefix of a newer one is dropped (the newer one serves all it served). The weights that made the
columns are part of what they mean: the engine clears the cache whenever its weights change.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

BLOCK = 16  # entries are indexed by the hashes of their first 16, 32, 48... tokens

KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer (keys, values), each (kv_heads, tokens, head_dim)


@dataclass
class Entry:
    tokens: np.ndarray  # (n,) the sequence whose columns ``kv`` holds
    kv: KV
    nbytes: int
    blocks: list[int]  # its block hashes, to unindex it when it goes


def block_hashes(tokens: list[int] | np.ndarray) -> list[int]:
    """The hash of each whole ``BLOCK`` of ``tokens``, chained, so the j-th names the first (j+1) blocks."""
    out, h = [], 0
    seq = [int(t) for t in tokens]
    for j in range(len(seq) // BLOCK):
        h = hash((h, tuple(seq[j * BLOCK:(j + 1) * BLOCK])))
        out.append(h)
    return out


def common_length(a: np.ndarray, b: np.ndarray) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


def kv_bytes(kv: KV) -> int:
    return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)


class PrefixCache:
    """Token sequences and their KV columns; ``max_bytes=None`` for no bound (the engine's per-chunk scratch
    when the cross-call cache is off)."""

    def __init__(self, max_bytes: int | None) -> None:
        self.max_bytes = max_bytes
        self.entries: OrderedDict[tuple[int, ...], Entry] = OrderedDict()  # least recently used first
        self.index: dict[int, dict[tuple[int, ...], None]] = {}  # block hash -> entries holding that prefix
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self.entries)

    def match(self, tokens: list[int]) -> tuple[Entry | None, int]:
        """The stored entry sharing the longest prefix with ``tokens`` (found to a whole block, then exact),
        and that prefix's length; ``(None, 0)`` when none shares a whole block."""
        hashes = block_hashes(tokens[:len(tokens) // BLOCK * BLOCK])
        for h in reversed(hashes):
            holders = self.index.get(h)
            if holders:
                key = next(reversed(holders))  # the newest: the likeliest to go on past the block
                entry = self.entries[key]
                self.entries.move_to_end(key)
                return entry, common_length(entry.tokens, np.asarray(tokens, dtype=np.int64))
        return None, 0

    def put(self, tokens: list[int], columns: Callable[[], KV]) -> None:
        """Keep the columns of ``tokens`` (``columns()`` copies them out, only when kept) unless an entry
        already covers them; drop the entry they cover, then the least recently used ones past the bound."""
        if len(tokens) < BLOCK:
            return  # no whole block to find it by, and too short to be worth a slot
        entry, lcp = self.match(tokens)
        if lcp == len(tokens):
            return  # ``entry`` serves it already (and is now the most recently used)
        kv = columns()
        nbytes = kv_bytes(kv)
        if self.max_bytes is not None and nbytes > self.max_bytes:
            return
        if entry is not None and lcp == len(entry.tokens):
            self.drop(tuple(entry.tokens.tolist()))  # a prefix of the new one: superseded
        key = tuple(tokens)
        blocks = block_hashes(tokens)
        self.entries[key] = Entry(np.asarray(tokens, dtype=np.int64), kv, nbytes, blocks)
        for h in blocks:
            self.index.setdefault(h, {})[key] = None
        self.nbytes += nbytes
        while self.max_bytes is not None and self.nbytes > self.max_bytes:
            self.drop(next(iter(self.entries)))

    def drop(self, key: tuple[int, ...]) -> None:
        entry = self.entries.pop(key, None)
        if entry is None:
            return
        self.nbytes -= entry.nbytes
        for h in entry.blocks:
            holders = self.index.get(h)
            if holders is not None:
                holders.pop(key, None)
                if not holders:
                    del self.index[h]

    def clear(self) -> None:
        """Forget everything (the weights changed: every column is stale)."""
        self.entries.clear()
        self.index.clear()
        self.nbytes = 0


def row_columns(cache_layers: list[tuple[torch.Tensor, torch.Tensor]], row: int, start: int, stop: int) -> KV:
    """Columns ``start:stop`` of one row of a batch cache, copied (so the batch's tensors can be freed)."""
    return [(k[row, :, start:stop].clone(), v[row, :, start:stop].clone()) for k, v in cache_layers]


def truncated(kv: KV, n: int) -> KV:
    return [(k[:, :n], v[:, :n]) for k, v in kv]
