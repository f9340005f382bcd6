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
is a prefix of a newer one is dropped (the newer one serves all it served). Plain LRU would fail a batched
chat whose rows' columns outgrow the bound: every turn looks up all rows, then stores all rows, so the rows
stored first are evicted by the rows stored last and the next turn finds none (on alfworld-sim, a 64-row
evaluation went from ~50 s a turn to ~380 s once its chats passed the bound). So a generate call first says
which prompts it runs (``begin_call``); their entries are pinned for the call, eviction takes only entries
that no prompt of the running call uses, and when those are gone a new entry is declined: the entry it
would have superseded, a shorter prefix of the same chat, stays and still serves the next turn all but its
newest tokens. The weights that made the columns are part of what they mean: the engine clears the cache
whenever its weights change.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from prover.system.memory import available_bytes

BLOCK = 16  # entries are indexed by the hashes of their first 16, 32, 48... tokens
# of the memory free when the engine starts: decoding a call lays its rows' KV out again (about as much
# again as the cache serves it), and the rest is the learner's and the envs'
AUTO_SHARE = 1 / 3
FALLBACK_BYTES = 2**30  # where the system does not say what is free

KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer (keys, values), each (kv_heads, tokens, head_dim)


@dataclass
class Entry:
    tokens: np.ndarray  # (n,) the sequence whose columns ``kv`` holds
    kv: KV
    nbytes: int
    blocks: list[int]  # its block hashes, to unindex it when it goes
    call: int = 0  # the last generate call that used it (``PrefixCache.begin_call``)


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


def auto_cache_bytes(device: str) -> int:
    """``AUTO_SHARE`` of the memory free on ``device`` now: host memory for the CPU, the GPU's own for CUDA."""
    free = torch.cuda.mem_get_info(torch.device(device))[0] if device.startswith("cuda") else available_bytes()
    return int(AUTO_SHARE * free) if free is not None else FALLBACK_BYTES


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
        self.call = 0

    def __len__(self) -> int:
        return len(self.entries)

    def begin_call(self, prompts: list[list[int]]) -> None:
        """A generate call of ``prompts`` starts: the entries serving them are pinned until the next call."""
        self.call += 1
        for p in prompts:
            self.match(p)

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
                entry.call = self.call
                return entry, common_length(entry.tokens, np.asarray(tokens, dtype=np.int64))
        return None, 0

    def put(self, tokens: list[int], columns: Callable[[], KV]) -> None:
        """Keep the columns of ``tokens`` (``columns()`` copies them out, only when kept) unless an entry
        already covers them; drop the entry they cover, then the least recently used unpinned ones past the
        bound; decline them, keeping the covered entry, where the unpinned ones cannot make room."""
        if len(tokens) < BLOCK:
            return  # no whole block to find it by, and too short to be worth a slot
        entry, lcp = self.match(tokens)
        if lcp == len(tokens):
            return  # ``entry`` serves it already (and is now the most recently used)
        kv = columns()
        nbytes = kv_bytes(kv)
        superseded = entry if entry is not None and lcp == len(entry.tokens) else None
        evict = self._evictions(nbytes - (superseded.nbytes if superseded is not None else 0))
        if evict is None:
            return
        for old in ([tuple(superseded.tokens.tolist())] if superseded is not None else []) + evict:
            self.drop(old)
        key = tuple(tokens)
        blocks = block_hashes(tokens)
        self.entries[key] = Entry(np.asarray(tokens, dtype=np.int64), kv, nbytes, blocks, self.call)
        for h in blocks:
            self.index.setdefault(h, {})[key] = None
        self.nbytes += nbytes

    def _evictions(self, growth: int) -> list[tuple[int, ...]] | None:
        """The unpinned entries to drop, least recently used first, for ``growth`` more bytes to fit; None
        when even all of them would not make room. (``match`` has just pinned the entry a put supersedes.)"""
        over = self.nbytes + growth - self.max_bytes if self.max_bytes is not None else 0
        evict: list[tuple[int, ...]] = []
        for key, e in self.entries.items():
            if over <= 0:
                break
            if e.call < self.call:
                evict.append(key)
                over -= e.nbytes
        return evict if over <= 0 else None

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
