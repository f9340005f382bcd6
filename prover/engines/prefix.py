"""How the ``hf`` engine fills each row's prompt KV before ``model.generate``: once per distinct prefix,
reused from its prefix cache (``prover.engines.kv_cache``) where it can.

On models whose every layer is full attention over a ``DynamicCache`` (``sharing_mode`` says ``prefix``),
for one chunk (``batch_size`` prompts) of one ``generate`` call:

- each row needs the KV of its prompt but its last token (``model.generate`` runs that one on every row
  itself, for the row's first logits, so sampling, logits processors and stopping are transformers' own);
- exact duplicates need it once; the longest prefix of all the chunk's distinct prompts (a system prompt,
  a task header) is prefilled once on one row when it is ``MIN_COMMON_PREFIX`` tokens past what the cache
  already holds, and kept in the cache for the rows to find;
- each distinct row takes the longest prefix the cache holds and prefills only the rest, the rows batched:
  cached columns right-aligned to one column, the rests after it (right padded), positions from the count
  of real tokens before each, so every token keeps its position;
- the rows are then laid out left padded, as without any sharing, into one ``DynamicCache`` one column
  narrower than the prompts, which ``generate`` continues.

The cache outlives the call when the engine keeps one (``prefix_cache_mb``); otherwise a scratch cache
serves the chunk alone. Sliding-window layers count columns, not tokens, and recurrent layers carry pads
through their state, so on such models only exact duplicates are shared (``plan_duplicates``: each distinct
prompt prefilled once, its cache rows copied to its duplicates, in the plain left-padded layout); a model
whose cache is not a ``DynamicCache``, or that asks for its own ``cache_implementation``, shares nothing.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache

from prover.engines.decode import reserved_cache
from prover.engines.kv_cache import KV, PrefixCache, row_columns, truncated

# Below this many tokens a chunk-wide common prefix (the chat template's opening tokens) saves less than
# the extra forward pass costs; duplicates are shared whatever their length.
MIN_COMMON_PREFIX = 16
# A batch of rests pads each row to the longest rest, and a pad costs a forward pass what a token does. Past
# this share of pads, the rows split in two by rest length (each part padded to its own longest), and each
# part again. On the testbed's 32-episode evaluation (rests of 36-90 tokens) this runs 13% fewer tokens and
# prefills about 5% faster: attention over the cached columns and the per-call overhead do not shrink.
MAX_PADDING_SHARE = 0.2


@dataclass
class SharePlan:
    """Which rows of a chunk prefill their prompt (on a model that shares exact duplicates only)."""

    firsts: list[int]  # the row of each distinct prompt's first occurrence
    inverse: list[int]  # for each row, the index in ``firsts`` of its prompt
    computed: list[int]  # for each row, the prompt tokens run for it


@dataclass
class Prefilled:
    """The KV of every row's prompt but its last token, laid out left padded (None when every prompt is one
    token), and the prompt tokens run for each row (its last token included)."""

    cache: DynamicCache | None
    computed: list[int]


def cache_kwarg(model: torch.nn.Module) -> str:
    """The name a KV cache goes by in ``forward`` and ``generate``: ``cache`` from transformers 5, else
    ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def cache_of(out: Any) -> Any:
    cache = getattr(out, "cache", None)
    return cache if cache is not None else getattr(out, "past_key_values", None)


def cache_layers(cache: DynamicCache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's (keys, values), (batch, kv_heads, columns, head_dim), of a ``DynamicCache``."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache))  # transformers 4


def dynamic_cache(layers: list[tuple[torch.Tensor, torch.Tensor]]) -> DynamicCache:
    return DynamicCache(layers)  # (ddp_cache_data): one full-attention layer per (keys, values)


@torch.no_grad()
def sharing_mode(model: torch.nn.Module, device: str) -> str:
    """What this model can share: ``prefix`` (cached prefixes of any length), ``duplicates``, or ``none``.
    Decided once, from the cache a one-token forward pass builds (layer types are not in every config)."""
    if getattr(getattr(model, "generation_config", None), "cache_implementation", None):
        return "none"  # the model wants its own cache class; a DynamicCache of ours could break it
    try:
        out = model(input_ids=torch.zeros((1, 1), dtype=torch.long, device=device), use_cache=True, logits_to_keep=1)
    except (TypeError, ValueError, AttributeError, RuntimeError):  # a forward of its own (remote code)
        return "none"
    cache = cache_of(out)
    if type(cache).__name__ != "DynamicCache" or not hasattr(cache, "reorder_cache"):
        return "none"
    layers = getattr(cache, "layers", None)
    if layers is not None:  # transformers 5: one object per layer, typed by its attention (linear, sliding, full)
        full = all(type(layer).__name__ == "DynamicLayer" for layer in layers)
    else:
        full = getattr(model.config, "sliding_window", None) is None
    return "prefix" if full else "duplicates"


def common_prefix_length(prompts: list[list[int]]) -> int:
    """How many leading tokens all of ``prompts`` share."""
    first, n = prompts[0], min(len(p) for p in prompts)
    for p in prompts[1:]:
        n = next((k for k in range(n) if p[k] != first[k]), n)
    return n


def layout(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and attention mask, left padded: every row's last token in the last column."""
    length = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), length), pad_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, length - len(p):] = torch.tensor(p, dtype=torch.long)
        attn[i, length - len(p):] = 1
    return ids, attn


def positions(attn: torch.Tensor) -> torch.Tensor:
    """Each token's position: real tokens before it; pads get 0, as ``generate`` gives them."""
    return (attn.cumsum(-1) - 1).masked_fill(attn == 0, 0)


# -- models that share exact duplicates only (sliding windows, recurrent layers) --------------------------
def plan_duplicates(prompts: list[list[int]]) -> SharePlan | None:
    """Each distinct prompt's first row, and every row's distinct prompt; None when all are distinct."""
    seen: dict[tuple[int, ...], int] = {}
    firsts, inverse = [], []
    for i, p in enumerate(prompts):
        key = tuple(p)
        if key not in seen:
            seen[key] = len(firsts)
            firsts.append(i)
        inverse.append(seen[key])
    if len(firsts) == len(prompts) or min(len(p) for p in prompts) < 2:
        return None
    first_rows = set(firsts)
    return SharePlan(firsts, inverse, [len(p) if i in first_rows else 1 for i, p in enumerate(prompts)])


@torch.no_grad()
def prefill_duplicates(model: torch.nn.Module, ids: torch.Tensor, attn: torch.Tensor, plan: SharePlan,
                       kwarg: str) -> DynamicCache:
    """The KV cache of every row's prompt but its last column, each distinct prompt's on one row and copied
    to its duplicates. ``ids`` and ``attn`` are on the model's device, laid out by ``layout``."""
    width = ids.shape[1] - 1  # generate runs the last column itself, on every row
    firsts = torch.tensor(plan.firsts, dtype=torch.long, device=ids.device)
    out = model(input_ids=ids[firsts, :width], attention_mask=attn[firsts, :width],
                position_ids=positions(attn[firsts, :width]), use_cache=True, logits_to_keep=1)
    cache = cache_of(out)
    # beam search's row selection: every cache layer has it (linear-attention states too)
    cache.reorder_cache(torch.tensor(plan.inverse, dtype=torch.long, device=ids.device))
    return cache


# -- full attention: prefixes from the cache, the rest batched -------------------------------------------
@torch.no_grad()
def prefill_from(model: torch.nn.Module, prompts: list[list[int]], store: PrefixCache, kwarg: str,
                 capacity: int | None = None) -> Prefilled:
    """Every row's prompt KV but its last token, from ``store`` where it holds a prefix, the rest computed
    (once per distinct prompt; the chunk's common prefix once, kept in ``store``). With ``capacity``, laid out
    in a reserved cache of that many columns (``decode.reserved_cache``), which the decode loop fills on."""
    heads = [p[:-1] for p in prompts]
    computed = [1] * len(prompts)  # every row's last token, run by generate
    firsts: dict[tuple[int, ...], int] = {}
    for i, h in enumerate(heads):
        firsts.setdefault(tuple(h), i)
    distinct = [i for i in firsts.values() if heads[i]]
    if len(distinct) > 1:
        share = common_prefix_length([heads[i] for i in distinct])
        held = max(store.match(heads[i])[1] for i in distinct)
        if share - held >= MIN_COMMON_PREFIX:
            header = heads[distinct[0]][:share]
            (kv, ran), = extend(model, [header], store, kwarg)
            store.put(header, lambda: kv)
            computed[distinct[0]] += ran
    by_head: dict[tuple[int, ...], KV | None] = {(): None}
    for i, (kv, ran) in zip(distinct, extend(model, [heads[i] for i in distinct], store, kwarg)):
        by_head[tuple(heads[i])] = kv
        computed[i] += ran
    return Prefilled(left_padded([by_head[tuple(h)] for h in heads], [len(h) for h in heads], capacity=capacity),
                     computed)


def extend(model: torch.nn.Module, seqs: list[list[int]], store: PrefixCache, kwarg: str) -> list[tuple[KV, int]]:
    """Each of ``seqs``' KV, and how many of its tokens were run: the longest prefix ``store`` holds is
    taken from it, the rests of all of them run in one batch."""
    found = [store.match(s) for s in seqs]
    reuse = [min(lcp, len(s)) for (_, lcp), s in zip(found, seqs)]
    kvs = [truncated(e.kv, n) if e is not None and n else None for (e, _), n in zip(found, reuse)]
    todo = [j for j, s in enumerate(seqs) if len(s) > reuse[j]]
    for part in rest_groups([len(seqs[j]) - reuse[j] for j in todo]):
        rows = [todo[p] for p in part]
        for j, kv in zip(rows, run_rests(model, [seqs[j] for j in rows], [kvs[j] for j in rows],
                                         [reuse[j] for j in rows], kwarg)):
            kvs[j] = kv
    return [(kv, len(s) - n) for kv, s, n in zip(kvs, seqs, reuse)]  # type: ignore[misc]


def rest_groups(rests: list[int]) -> list[list[int]]:
    """The positions of ``rests`` in the batches ``extend`` runs: sorted by length and split where the two
    parts pad fewest tokens, each part again, while a part pads more than ``MAX_PADDING_SHARE`` of its tokens."""
    order = sorted(range(len(rests)), key=rests.__getitem__)
    return _split_by_padding(order, rests) if order else []


def _split_by_padding(order: list[int], rests: list[int]) -> list[list[int]]:
    lengths = [rests[i] for i in order]  # ascending
    n, longest = len(lengths), lengths[-1]
    if n < 2 or n * longest - sum(lengths) <= MAX_PADDING_SHARE * n * longest:
        return [order]
    cut = min(range(1, n), key=lambda k: k * lengths[k - 1] + (n - k) * longest)
    return _split_by_padding(order[:cut], rests) + _split_by_padding(order[cut:], rests)


def run_rests(model: torch.nn.Module, seqs: list[list[int]], cached: list[KV | None], reuse: list[int],
              kwarg: str) -> list[KV]:
    """Run ``seq[reuse:]`` of each row after its cached columns: those right-aligned to column C (the
    longest), the rests from C on, right padded; returns each row's columns, cached and new."""
    device = next(model.parameters()).device
    width, rest = max(reuse), max(len(s) - n for s, n in zip(seqs, reuse))
    ids = torch.zeros((len(seqs), rest), dtype=torch.long)
    attn = torch.zeros((len(seqs), width + rest), dtype=torch.long)
    pos = torch.zeros_like(ids)
    for b, (s, n) in enumerate(zip(seqs, reuse)):
        r = len(s) - n
        ids[b, :r] = torch.tensor(s[n:], dtype=torch.long)
        attn[b, width - n:width + r] = 1
        pos[b, :r] = torch.arange(n, n + r)
    extra = {kwarg: left_padded(cached, reuse, width)} if width else {}
    out = model(input_ids=ids.to(device), attention_mask=attn.to(device), position_ids=pos.to(device),
                use_cache=True, logits_to_keep=1, **extra)
    grown = cache_of(out)
    layers = cache_layers(grown if grown is not None else extra[kwarg])
    return [row_columns(layers, b, width - n, width + len(s) - n) for b, (s, n) in enumerate(zip(seqs, reuse))]


def left_padded(kvs: list[KV | None], lengths: list[int], width: int | None = None,
                capacity: int | None = None) -> DynamicCache | None:
    """One ``DynamicCache`` of ``width`` columns (default: the longest row) with row b's ``lengths[b]``
    columns last and zeros (masked keys) before them; None when it would have no columns. With ``capacity``,
    its layers reserve that many columns (``decode.reserved_cache``), the rows written straight into them."""
    width = max(lengths) if width is None else width
    ref = next((kv for kv in kvs if kv is not None), None)
    if not width or ref is None:
        return None
    columns = width if capacity is None else capacity
    layers = []
    for layer, (k0, v0) in enumerate(ref):
        keys = k0.new_zeros((len(kvs), k0.shape[0], columns, k0.shape[2]))
        values = v0.new_zeros((len(kvs), v0.shape[0], columns, v0.shape[2]))
        for b, (kv, n) in enumerate(zip(kvs, lengths)):
            if n:
                keys[b, :, width - n:width], values[b, :, width - n:width] = kv[layer]  # type: ignore[index]
        layers.append((keys, values))
    return dynamic_cache(layers) if capacity is None else reserved_cache(layers, width)
