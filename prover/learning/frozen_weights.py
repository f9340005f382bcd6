"""Frozen linear weights cast to bfloat16 once, for the learner's bfloat16 autocast (``learner.frozen_bf16``).

Autocast runs a float32 linear layer in bfloat16 by casting its weight at every forward pass; it keeps the
cast for the rest of the autocast region only for a weight that trains (a leaf that requires a gradient). A
frozen weight (LoRA's base layers, an LM head that does not train) is cast again at every micro-batch's
forward: for SmolLM2-135M that is 134M values read as float32 and written as bfloat16 each time.

``bf16_copies`` casts every frozen ``nn.Linear`` weight once for the length of a block (the learner's: one
update, over all its micro-batches and epochs). Under bfloat16 autocast such a layer then
multiplies by its copy, which is the very tensor autocast would have made (the same rounding of the same
weight, handed to the same kernel), so the products, the loss and the gradients are bit for bit autocast's
(tests/test_frozen_weights.py). Anywhere else (float32, another autocast dtype, a weight that trains) the layer
is a plain ``nn.Linear``. The copies are made again when the weight or the bias was written in place (a load
of weights bumps a tensor's version) or moved.

Memory: the copies take half the frozen weights' float32 size for the length of the update and are freed after
it; autocast's own casts of one micro-batch took as much from its forward to its backward (each is saved for
the backward's input gradient), so the update's peak is about the same, and between updates (while the rollout
runs) nothing more is held.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import cast

import torch
import torch.nn.functional as F


class FrozenBf16Linear(torch.nn.Linear):
    """An ``nn.Linear`` that, under bfloat16 autocast and while its weight is frozen, multiplies by a bfloat16
    copy of the weight made once (a plain attribute: not a parameter, not a buffer, never saved or
    broadcast)."""

    _bf16: tuple[torch.Tensor, torch.Tensor | None] | None
    _bf16_of: tuple | None  # the weight's and the bias's versions and the device when the copies were made

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        device = x.device.type
        if (self.weight.requires_grad or not torch.is_autocast_enabled(device)
                or torch.get_autocast_dtype(device) != torch.bfloat16):
            return super().forward(x)
        weight, bias = self.bf16_weights()
        return F.linear(x, weight, bias)  # autocast casts x to bfloat16 as it always did; the weights already are

    def bf16_weights(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The bfloat16 weight and bias, cast again if either was written or moved since."""
        state = (self.weight._version, None if self.bias is None else self.bias._version, self.weight.device)
        if self._bf16 is None or self._bf16_of != state:
            with torch.no_grad():
                bias = None if self.bias is None else self.bias.detach().to(torch.bfloat16)
                self._bf16 = (self.weight.detach().to(torch.bfloat16), bias)
            self._bf16_of = state
        return self._bf16


def keep_bf16_copies(model: torch.nn.Module) -> list[torch.nn.Linear]:
    """Make every frozen plain ``nn.Linear`` of ``model`` a ``FrozenBf16Linear`` with its copy cast now; returns
    them. Subclasses of ``nn.Linear`` (adapted layers, or layers that already have a copy) are left as they are."""
    layers: list[torch.nn.Linear] = []
    for module in model.modules():
        if type(module) is torch.nn.Linear and not module.weight.requires_grad:
            module.__class__ = FrozenBf16Linear
            frozen = cast(FrozenBf16Linear, module)
            frozen._bf16, frozen._bf16_of = None, None
            frozen.bf16_weights()
            layers.append(frozen)
    return layers


@contextlib.contextmanager
def bf16_copies(model: torch.nn.Module, enabled: bool = True) -> Iterator[int]:
    """Within the block every frozen plain ``nn.Linear`` of ``model`` has its copy (``keep_bf16_copies``, cast
    on entry); on exit they are plain layers again and the copies are freed, so nothing is held between
    updates. A block inside another leaves the outer one's copies alone. Yields how many layers got one."""
    layers = keep_bf16_copies(model) if enabled else []
    try:
        yield len(layers)
    finally:
        for layer in layers:
            layer.__class__ = torch.nn.Linear
            del layer._bf16, layer._bf16_of
