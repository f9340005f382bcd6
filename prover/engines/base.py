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

The run builds an engine as ``Engine(model_path, dtype=model.engine_dtype or model.dtype, **engine.kwargs)``. What every
engine has from this base: its settings (``engine.kwargs``) under the one rule of every plugin kind
(``prover.plugin_config.Configurable``: ``Config``, derived from the constructor unless declared, checked
by ``validate_kwargs`` when the config loads), ``take_counts`` (no counts) and ``close`` (nothing to
release).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from prover.plugin_config import Configurable
from prover.types import Generation, SamplingParams


class Engine(Configurable):
    """Base class. Subclasses implement ``generate``, ``logprobs`` and ``update_weights``, set
    ``tokenizer``, and may set ``Config`` (the pydantic model of their ``engine.kwargs``; without one it is
    derived from the constructor's keyword arguments, less ``RUN_ARGS``)."""

    tokenizer: Any
    context_length: int | None = None  # the model's positions, when known: the rollout bounds prompts by it
    # the weights live in this process, so a second copy built in a worker process samples on its own and
    # takes weights from ``update_weights`` with a state dict (asynchronous rollouts need it); False for
    # engines over shared servers, where one push changes what every copy samples
    own_weights: ClassVar[bool] = False
    name: ClassVar[str] = ""  # how config errors name the engine; the class name when empty
    # set by the run from model.path / model.engine_dtype (else model.dtype), never through engine.kwargs
    RUN_ARGS: ClassVar[dict[str, str]] = {"model_path": "model.path", "dtype": "model.engine_dtype or model.dtype"}

    @classmethod
    def validate_kwargs(cls, kwargs: dict[str, Any]) -> Any:
        """``engine.kwargs`` checked when the config loads, so a typo is one ConfigError naming the field,
        not a TypeError after the warm start; returns the parsed settings."""
        return cls.parse_settings(kwargs, "engine.kwargs")

    def generate(self, prompts: list[list[int]], params: SamplingParams,
                 seed: int | None = None) -> list[Generation]:
        raise NotImplementedError

    def logprobs(self, prompts: list[list[int]], completions: list[list[int]]) -> list[np.ndarray]:
        raise NotImplementedError

    def update_weights(self, learner: Any) -> None:
        raise NotImplementedError

    def take_counts(self) -> dict[str, float]:
        """Counts since the last call (the trainer logs them per phase: ``cost/engine_x`` becomes
        ``cost/rollout_engine_x``); none by default."""
        return {}

    def close(self) -> None:
        """Release what the engine holds (servers, threads, process groups) when the run ends."""

