"""Shared prompt prefixes in the ``hf`` engine: prefilled once, their KV cache copied to the rows that share them.

What is shared, within one chunk (``batch_size`` prompts) of one ``generate`` call:

- exact duplicate prompts (a group's episodes at turn 0, a branch point's K continuations): each distinct
  prompt is prefilled once and its cache rows are copied to its duplicates;
- the longest common prefix of all the chunk's prompts (the system prompt and instructions every prompt
  starts with), prefilled once for the whole chunk, on models whose every layer is full attention over a
  ``DynamicCache``. Rows are then laid out ``[prefix, pad..., rest]`` rather than ``[pad..., prompt]`` so
  that the prefix sits in the same columns of every row; the pads in the middle are masked keys, exactly
  as left pads are, and positions come from the attention mask, so every real token keeps its position.

What is not shared: a prefix common to only some of the chunk's prompts (a group's task header at later
turns), anything across chunks or across calls (no cache outlives a chunk), and the last token of every
prompt, which ``model.generate`` runs on each row itself to get that row's first logits (so sampling,
logits processors and stopping are transformers' own, unchanged).

A chunk with logits processors (a grammar) shares duplicates only: a processor may read the prompt's
columns, and should not find pads between the prefix and the rest there.

Sliding-window layers count columns, not tokens, and recurrent layers carry pads through their state, so
on such models only exact duplicates are shared (their rows keep the plain left-padded layout); a model
whose cache is not a ``DynamicCache``, or that asks for its own ``cache_implementation``, shares nothing.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch

# Below this many tokens a chunk-wide common prefix (the chat template's opening tokens) saves less than
# the extra forward pass costs; duplicates are shared whatever their length.
MIN_COMMON_PREFIX = 16


@dataclass
class SharePlan:
    """How a chunk's prompts share their prefill."""

    lcp: int  # leading tokens every row shares, prefilled once (0: none)
    firsts: list[int]  # the row of each distinct prompt's first occurrence
    inverse: list[int]  # for each row, the index in ``firsts`` of its prompt
    requested: int  # prompt tokens asked for (the sum of the prompts' lengths)
    computed: int  # prompt tokens the model runs: the prefix once, each distinct rest once, every last token


def cache_kwarg(model: Any) -> str:
    """The name a KV cache goes by in ``forward`` and ``generate``: ``cache`` from transformers 5, else
    ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _cache_of(out: Any) -> Any:
    cache = getattr(out, "cache", None)
    return cache if cache is not None else getattr(out, "past_key_values", None)


@torch.no_grad()
def sharing_mode(model: Any, device: str) -> str:
    """What this model can share: ``prefix`` (duplicates and a common prefix), ``duplicates``, or ``none``.
    Decided once, from the cache a one-token forward pass builds (layer types are not in every config)."""
    if getattr(getattr(model, "generation_config", None), "cache_implementation", None):
        return "none"  # the model wants its own cache class; a DynamicCache of ours could break it
    try:
        out = model(input_ids=torch.zeros((1, 1), dtype=torch.long, device=device), use_cache=True, logits_to_keep=1)
    except (TypeError, ValueError, AttributeError, RuntimeError):  # a forward of its own (remote code)
        return "none"
    cache = _cache_of(out)
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


def plan_sharing(prompts: list[list[int]], mode: str) -> SharePlan | None:
    """The plan for one chunk, or None when it shares nothing (then the chunk takes the plain path)."""
    if mode == "none" or len(prompts) < 2 or min(len(p) for p in prompts) < 1:
        return None
    seen: dict[tuple[int, ...], int] = {}
    firsts, inverse = [], []
    for i, p in enumerate(prompts):
        key = tuple(p)
        if key not in seen:
            seen[key] = len(firsts)
            firsts.append(i)
        inverse.append(seen[key])
    lcp = 0
    if mode == "prefix":
        # every row keeps at least its last token for generate to run
        lcp = min(common_prefix_length(prompts), min(len(p) for p in prompts) - 1)
        lcp = lcp if lcp >= MIN_COMMON_PREFIX else 0
    requested = sum(len(p) for p in prompts)
    computed = lcp + sum(len(prompts[i]) - lcp - 1 for i in firsts) + len(prompts)
    if computed >= requested:
        return None
    return SharePlan(lcp, firsts, inverse, requested, computed)


def layout(prompts: list[list[int]], lcp: int, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and attention mask, rows ``[prompt[:lcp], pad..., prompt[lcp:]]``: with ``lcp=0`` the
    plain left padding, so every row's last token sits in the last column."""
    length = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), length), pad_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        rest = p[lcp:]
        ids[i, :lcp] = torch.tensor(p[:lcp], dtype=torch.long)
        ids[i, length - len(rest):] = torch.tensor(rest, dtype=torch.long)
        attn[i, :lcp] = 1
        attn[i, length - len(rest):] = 1
    return ids, attn


def positions(attn: torch.Tensor) -> torch.Tensor:
    """Each token's position: real tokens before it; pads get 0, as ``generate`` gives them."""
    return (attn.cumsum(-1) - 1).masked_fill(attn == 0, 0)


@torch.no_grad()
def prefill(model: Any, ids: torch.Tensor, attn: torch.Tensor, plan: SharePlan, kwarg: str) -> Any:
    """The KV cache of every row's prompt but its last column, computed as ``plan`` says: the common prefix
    on one row, copied to the distinct prompts; their rests on one row each, copied to the duplicates.
    ``ids`` and ``attn`` are on the model's device, laid out by ``layout(prompts, plan.lcp, ...)``."""
    pos = positions(attn)
    width, lcp = ids.shape[1] - 1, plan.lcp  # generate runs the last column itself, on every row
    firsts = torch.tensor(plan.firsts, dtype=torch.long, device=ids.device)
    cache = None
    if lcp:
        cache = _forward(model, ids[:1, :lcp], attn[:1, :lcp], pos[:1, :lcp], None, kwarg)
        cache.reorder_cache(torch.zeros_like(firsts))  # one copy per distinct prompt
    if width > lcp:
        rows = (ids[firsts, lcp:width], attn[firsts, :width], pos[firsts, lcp:width])
        cache = _forward(model, *rows, cache, kwarg)
    # beam search's row selection: every cache layer has it (linear-attention states too)
    cache.reorder_cache(torch.tensor(plan.inverse, dtype=torch.long, device=ids.device))
    return cache


def _forward(model: Any, ids: torch.Tensor, attn: torch.Tensor, pos: torch.Tensor, cache: Any, kwarg: str) -> Any:
    """Run ``ids`` after what ``cache`` holds (``attn`` covers both); returns the grown cache."""
    extra = {kwarg: cache} if cache is not None else {}
    out = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=True, logits_to_keep=1, **extra)
    return cache if cache is not None else _cache_of(out)
