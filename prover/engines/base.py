"""The engine contract: batched token-in, token-out generation with per-token log-probs.

An engine serves the *sampling* policy. Rollout hands it prompt token ids and gets completion token
ids with their log-probs back; nothing is re-tokenized. After each learner update the trainer calls
``update_weights`` so the next rollout samples from the new policy.

``generate(prompts, params, seed) -> list[Generation]``
    One completion per prompt, in order. ``seed`` makes sampling reproducible where the engine can.
``logprobs(prompts, completions) -> list[np.ndarray]``
    Log-probs of given completions under the engine's current weights (for checks and re-scoring).
``update_weights(learner)``
    Make the engine's policy equal to ``learner.model``.
``tokenizer``
    The policy's tokenizer (a ``transformers`` tokenizer with a chat template).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from prover.types import Generation, SamplingParams


@runtime_checkable
class Engine(Protocol):
    tokenizer: Any

    def generate(self, prompts: list[list[int]], params: SamplingParams,
                 seed: int | None = None) -> list[Generation]: ...

    def logprobs(self, prompts: list[list[int]], completions: list[list[int]]) -> list[np.ndarray]: ...

    def update_weights(self, learner: Any) -> None: ...
