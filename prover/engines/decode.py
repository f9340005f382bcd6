"""The ``hf`` engine's decode loop: one forward pass per new token for every row of a chunk, the KV in one
buffer reserved for the whole call, and only the sampled tokens' log-probs kept.

It does what ``model.generate`` does for plain sampling (transformers' ``GenerationMixin._sample``): each step
casts the last position's logits to float32, applies the caller's logits processors, then temperature,
top-k and top-p with transformers' own warpers, and draws with ``torch.multinomial`` from the softmax (or
takes the argmax when greedy); a row that has stopped gets the pad token until every row has. With the
same seed it draws the same tokens as ``generate``. Four things differ, each for speed or faithfulness:

1. The KV cache is reserved once (``ReservedLayer``): a step writes its column in place, where
   ``DynamicCache`` concatenates, copying the whole cache, every step.
2. Only the sampled token's log-prob is kept each step (one gather and one logsumexp), never the step's
   whole vocabulary of logits (``output_logits`` keeps B x V floats a step until the call ends).
3. Sampling is exactly ``SamplingParams``: a checkpoint's ``generation_config.json`` (Qwen's sets top-k 20,
   top-p 0.8 and a repetition penalty) changes nothing, so the recorded log-probs are those of the
   distribution sampled from, before the top-k/top-p truncation, as the learner assumes.
4. Once a row's stop token is fed, the row leaves the step (``fused_logits``, where the fused step indexes
   the cache by row): ``generate`` feeds it pads, attending over its whole context, until every row stops. In
   a batch of chats that is most of a turn's attention. The running rows' tokens and log-probs are unchanged.

Models whose every layer is full attention over a ``DynamicCache`` only (``prefix.sharing_mode`` says
``prefix``); the engine hands other models to ``generate``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer
from transformers.generation.logits_process import (
    LogitsProcessor,
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from prover.engines.fused_step import FusedStep
from prover.types import SamplingParams


class ReservedLayer(DynamicLayer):
    """One full-attention layer's keys and values in buffers of ``capacity`` columns reserved up front; its
    ``keys``/``values`` are views of the columns written so far, so the attention reads what
    ``DynamicLayer`` would hand it, without the per-step copy of the whole cache."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        b, h, _, d = key_states.shape
        self.device = key_states.device
        self.key_buffer = key_states.new_empty((b, h, self.capacity, d))
        self.value_buffer = value_states.new_empty((b, value_states.shape[1], self.capacity, value_states.shape[3]))
        self.keys, self.values = self.key_buffer[:, :, :0], self.value_buffer[:, :, :0]
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object,
               **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start = self.keys.shape[-2]
        end = start + key_states.shape[-2]
        if end > self.capacity:
            raise RuntimeError(f"reserved KV of {self.capacity} columns cannot take column {end}")
        self.key_buffer[:, :, start:end].copy_(key_states)
        self.value_buffer[:, :, start:end].copy_(value_states)
        self.keys, self.values = self.key_buffer[:, :, :end], self.value_buffer[:, :, :end]
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        raise NotImplementedError("a reserved KV cache keeps its rows")  # the loop never reorders rows

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotImplementedError("a reserved KV cache keeps its rows")


def reserved_cache(layers: list[tuple[torch.Tensor, torch.Tensor]], used: int) -> DynamicCache:
    """A ``DynamicCache`` of ``ReservedLayer``s over ``layers``' buffers (per layer (keys, values), (batch,
    kv_heads, capacity, head_dim)) whose first ``used`` columns hold KV."""
    cache = DynamicCache()
    cache.layers = []
    for keys, values in layers:
        layer = ReservedLayer(keys.shape[2])
        layer.device, layer.key_buffer, layer.value_buffer = keys.device, keys, values
        layer.keys, layer.values = keys[:, :, :used], values[:, :, :used]
        layer.is_initialized = True
        cache.layers.append(layer)
    return cache


def empty_reserved_cache(count: int, capacity: int) -> DynamicCache:
    """``count`` ``ReservedLayer``s holding nothing yet, each reserving ``capacity`` columns on its first update."""
    cache = DynamicCache()
    cache.layers = [ReservedLayer(capacity) for _ in range(count)]
    return cache


@dataclass
class Decoded:
    """What the loop generated: ``tokens`` (B, n) with pads after a row's stop token, ``logprobs`` (B, n) of
    each token under the temperature-scaled, unrestricted distribution, and the cache (every fed column)."""

    tokens: torch.Tensor
    logprobs: torch.Tensor
    cache: DynamicCache


def warpers(params: SamplingParams, processors: list[LogitsProcessor] | None) -> LogitsProcessorList:
    """The caller's processors, then what sampling applies, in ``generate``'s order."""
    chain = LogitsProcessorList(processors or [])
    if params.temperature > 0:
        if params.temperature != 1.0:
            chain.append(TemperatureLogitsWarper(params.temperature))
        if params.top_k:
            chain.append(TopKLogitsWarper(top_k=params.top_k))
        if params.top_p < 1.0:
            chain.append(TopPLogitsWarper(top_p=params.top_p))
    return chain


@torch.inference_mode()  # no autograd bookkeeping at all: about 8% of a one-row step (no_grad keeps version counts)
def decode(model: torch.nn.Module, ids: torch.Tensor, attn: torch.Tensor, cache: DynamicCache, kwarg: str,
           params: SamplingParams, stops: list[int], pad_id: int,
           processors: list[LogitsProcessor] | None = None, fused: FusedStep | None = None,
           drop_stopped: bool = True) -> Decoded:
    """Generate up to ``params.max_new_tokens`` tokens for each row of ``ids`` (left padded, mask ``attn``),
    continuing ``cache``, which holds the KV of the first ``cache.get_seq_length()`` columns and has room for
    ``ids.shape[1] + max_new_tokens - 1`` in all. ``fused`` runs the steps of one new column a row in place
    of the model's forward (``prover.engines.fused_step``); ``drop_stopped=False`` feeds stopped rows pads as
    ``generate`` does (departure 4 off, for comparisons)."""
    rows, length = ids.shape
    steps = params.max_new_tokens
    seqs = torch.full((rows, length + steps), pad_id, dtype=torch.long, device=ids.device)
    seqs[:, :length] = ids
    mask = torch.ones((rows, length + steps), dtype=attn.dtype, device=ids.device)
    mask[:, :length] = attn
    logps = torch.zeros((rows, steps), dtype=torch.float32, device=ids.device)
    chain = warpers(params, processors)
    stop_ids = torch.tensor(stops, dtype=torch.long, device=ids.device)
    running = torch.ones(rows, dtype=torch.bool, device=ids.device)
    feeding = running.clone()  # rows whose newest token is theirs (a stop token included): its KV is kept
    fed, n = cache.get_seq_length(), 0
    pos = (mask[:, :length].cumsum(-1)[:, fed:] - 1).clamp(min=0)  # real tokens before each fed column
    while n < steps:
        end = length + n
        if fused is not None and end - fed == 1:
            logits = fused_logits(fused, seqs[:, fed:end], mask[:, :end], pos, cache,
                                  feeding if drop_stopped else None)
        else:
            logits = model(input_ids=seqs[:, fed:end], attention_mask=mask[:, :end], position_ids=pos,
                           use_cache=True, logits_to_keep=1, **{kwarg: cache}).logits[:, -1].float()
        scores = chain(seqs[:, :end], logits.clone()) if chain else logits  # a processor may write in place
        if params.temperature > 0:
            token = torch.multinomial(torch.softmax(scores, dim=-1), num_samples=1).squeeze(1)
            logits = logits / params.temperature
        else:
            token = torch.argmax(scores, dim=-1)
        token = torch.where(running, token, pad_id)
        logps[:, n] = logits.gather(-1, token[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)
        seqs[:, end] = token
        feeding = running.clone()
        running &= ~torch.isin(token, stop_ids)
        fed, n = end, n + 1
        pos = pos[:, -1:] + 1  # every generated column is unmasked
        if not running.any():
            break
    return Decoded(seqs[:, length:length + n], logps[:, :n], cache)


def fused_logits(fused: FusedStep, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor,
                 cache: DynamicCache, feeding: torch.Tensor | None) -> torch.Tensor:
    """The float32 logits of a one-column step. Rows that no longer feed tokens are left out of the step where
    ``fused`` can index the cache by row: their logits are zeros, which is never read, as their tokens are pads
    and their KV past the stop is never kept. Sampling draws from every row either way (``torch.multinomial``
    draws one exponential per entry whatever the values), so the running rows' tokens are those of a step that
    fed every row. ``feeding`` None: every row."""
    if feeding is None or bool(feeding.all()) or not fused.takes_rows(ids, mask, cache.layers):
        return fused(ids, mask, positions, cache.layers).float()
    live = feeding.nonzero().squeeze(1)
    part = fused(ids[live], mask[live], positions[live], cache.layers, live).float()
    logits = part.new_zeros((ids.shape[0], part.shape[1]))
    logits[live] = part
    return logits
