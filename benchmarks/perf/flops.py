"""FLOPs of a transformers causal LM's forward passes, counted from its config and the shapes each call gets.

Used by benchmarks/perf/limits.py. ``Meter.watch(model)`` hooks a model; every forward pass then adds to the tally
of the phase the meter is in (``with meter.phase("learner"):``), split by kind: ``prefill`` (the engine's
prompt passes: a shared prefix, the distinct rests, and generate's first step), ``decode`` (generate's later
steps) or ``train`` (a pass with gradients, counted with its backward: 3x the forward).

Per token a forward pass costs 2 FLOPs per weight of the decoder's matrices, 2 x hidden x vocab for each
position that goes through the LM head (``logits_to_keep``), and 4 x heads x head_dim per layer for each
(query, key) pair of attention (QK^T and AV). Two counts are kept: ``flops``, the work the real tokens need
(each real query against the real keys before it), and ``padded_flops``, the work the call computes on its
padded rectangle (every row as long as the longest, every query against every key column, as dense
attention with a mask does). Their difference is the padding's cost.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import torch


@dataclass
class ModelShape:
    """What a forward pass costs per token, from a model's config."""

    body: float  # matrix FLOPs per token through the decoder layers
    head: float  # per position through the LM head
    pair: float  # per (query, key) pair of attention, all layers

    @classmethod
    def of(cls, config: Any) -> ModelShape:
        d, layers, inter = config.hidden_size, config.num_hidden_layers, config.intermediate_size
        heads = config.num_attention_heads
        kv = getattr(config, "num_key_value_heads", None) or heads
        hd = getattr(config, "head_dim", None) or d // heads
        per_layer = d * heads * hd * 2 + d * kv * hd * 2 + 3 * d * inter  # q, o; k, v; gate, up, down
        return cls(body=2.0 * layers * per_layer, head=2.0 * d * config.vocab_size, pair=4.0 * layers * heads * hd)


@dataclass
class Tally:
    flops: float = 0.0  # needed by the real tokens (fwd + bwd for train)
    padded_flops: float = 0.0  # computed on the padded rectangle (fwd + bwd for train)
    forward_flops: float = 0.0  # padded, forward passes only: what forward_s ran
    tokens: float = 0.0  # real tokens the passes ran (queries)
    padded_tokens: float = 0.0  # rows x columns
    forward_s: float = 0.0  # seconds inside the model's forward
    calls: int = 0

    def add(self, other: Tally, share: float = 1.0) -> None:
        """Add ``other``, its real-token counts scaled by ``share`` (decode rows that had already stopped)."""
        for k in ("padded_flops", "forward_flops", "padded_tokens", "forward_s", "calls"):
            setattr(self, k, getattr(self, k) + getattr(other, k))
        self.flops += other.flops * share
        self.tokens += other.tokens * share


def call_cost(shape: ModelShape, kwargs: dict, train: bool) -> Tally:
    """The tally of one forward call from its keyword arguments (input_ids, attention_mask, logits_to_keep)."""
    ids = kwargs["input_ids"]
    rows, width = ids.shape
    mask = kwargs.get("attention_mask")
    if mask is not None and mask.dim() == 2:  # (rows, cached + new columns), 1 for a real token
        keys, mask = mask.shape[1], mask.to(torch.float64)
        real_k, real_q = mask.sum(-1), mask[:, -width:].sum(-1)
    else:
        keys = width
        real_k = real_q = torch.full((rows,), float(width), dtype=torch.float64)
    keep = int(kwargs.get("logits_to_keep") or 0)
    keep = width if keep <= 0 else min(keep, width)
    pairs = float((real_q * real_k - real_q * (real_q - 1) / 2).sum())  # each real query, the keys up to it
    tokens = float(real_q.sum())
    useful = tokens * shape.body + float(real_q.clamp(max=keep).sum()) * shape.head + pairs * shape.pair
    computed = rows * width * shape.body + rows * keep * shape.head + rows * width * keys * shape.pair
    times = 3.0 if train else 1.0
    return Tally(flops=times * useful, padded_flops=times * computed, forward_flops=computed, tokens=tokens,
                 padded_tokens=float(rows * width), calls=1)


class Meter:
    """Tallies by "phase/kind"; wall seconds by phase (``phase``) and by phase and kind for generate."""

    def __init__(self) -> None:
        self.tallies: dict[str, Tally] = {}
        self.walls: dict[str, float] = {}
        self.current = "other"
        self._step: int | None = None  # forwards so far inside generate; None outside it
        self._chunk = Tally()  # this chunk's decode passes, until its rows' real lengths are known
        self._t0 = 0.0

    def tally(self, key: str) -> Tally:
        return self.tallies.setdefault(key, Tally())

    @contextmanager
    def phase(self, name: str):
        previous, self.current = self.current, name
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.walls[name] = self.walls.get(name, 0.0) + time.perf_counter() - t0
            self.current = previous

    def watch(self, model: torch.nn.Module) -> None:
        shape = ModelShape.of(model.config)

        def before(module: Any, args: tuple, kwargs: dict) -> None:
            if "input_ids" not in kwargs and args:
                kwargs = {**kwargs, "input_ids": args[0]}
            self._pending = call_cost(shape, kwargs, torch.is_grad_enabled())
            self._t0 = time.perf_counter()

        def after(module: Any, args: tuple, kwargs: dict, out: Any) -> None:
            cost = self._pending
            cost.forward_s = time.perf_counter() - self._t0
            if torch.is_grad_enabled():
                self.tally(f"{self.current}/train").add(cost)
            elif self._step is None or self._step == 0:
                self.tally(f"{self.current}/prefill").add(cost)
            else:
                self._chunk.add(cost)
            if self._step is not None:
                self._step += 1

        model.register_forward_pre_hook(before, with_kwargs=True)
        model.register_forward_hook(after, with_kwargs=True)

    def watch_engine(self, engine: Any) -> None:
        """Hook an ``hf`` engine: its model, ``generate`` (prefill is its first step) and its chunks (how many
        decode steps each row needed before its stop token)."""
        self.watch(engine.model)
        generate, chunk = engine.model.generate, engine._generate_chunk

        def metered_generate(*args: Any, **kwargs: Any) -> Any:
            self._step, t0 = 0, time.perf_counter()
            prefill_s = self.tally(f"{self.current}/prefill").forward_s
            try:
                return generate(*args, **kwargs)
            finally:
                spent = time.perf_counter() - t0 - (self.tally(f"{self.current}/prefill").forward_s - prefill_s)
                key = f"{self.current}/decode"
                self.walls[key] = self.walls.get(key, 0.0) + spent  # decode steps and generate's own Python
                self._step = None

        def metered_chunk(prompts: list, *args: Any, **kwargs: Any) -> list:
            self._chunk = Tally()
            gens = chunk(prompts, *args, **kwargs)
            steps = max((len(g.token_ids) for g in gens), default=1) - 1  # the first token came from prefill
            live = sum(len(g.token_ids) - 1 for g in gens)  # steps a row ran before its stop
            self.tally(f"{self.current}/decode").add(self._chunk, live / (steps * len(gens)) if steps else 0.0)
            return gens

        engine.model.generate, engine._generate_chunk = metered_generate, metered_chunk

    def as_dict(self) -> dict:
        return {"tallies": {k: asdict(v) for k, v in self.tallies.items()}, "walls": dict(self.walls)}
