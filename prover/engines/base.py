"""The engine contract: batched token-in, token-out generation with per-token log-probs.

An engine serves the *sampling* policy. Rollout hands it prompt token ids and gets completion token
ids with their log-probs back; nothing is re-tokenized. After each learner update the trainer calls
``update_weights`` so the next rollout samples from the new policy. ``EngineContract`` below is the
spec, method by method: what the rollout, the brancher and the trainer may rely on.

The run builds an engine as ``Engine(model_path, dtype=model.engine_dtype or model.dtype, **engine.kwargs)``. What every
engine has from the ``Engine`` base class: its settings (``engine.kwargs``) under the one rule of every plugin
kind (``prover.plugin_config.Configurable``: ``Config``, derived from the constructor unless declared, checked
by ``validate_kwargs`` when the config loads), ``take_counts`` (no counts) and ``close`` (nothing to
release). The registry refuses, when it loads an engine, a class that leaves ``generate``, ``logprobs`` or
``update_weights`` unimplemented.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from prover.plugin_config import Configurable
from prover.registry import required
from prover.types import Generation, SamplingParams

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase


class WeightSource(Protocol):
    """What an engine reads from the learner in ``update_weights`` (``prover.learning.learner.Learner`` is one)."""

    def policy_state_dict(self) -> dict[str, torch.Tensor]:
        """The full policy weights under the base model's names (LoRA adapters merged in). Under FSDP or
        ZeRO-3 every process must call it; a process other than the main one may get an empty dict."""
        ...


@runtime_checkable
class EngineContract(Protocol):
    """The engine contract, method by method. ``Engine`` below is the base class that implements its
    optional parts; an engine plugin subclasses it.

    Attributes: ``tokenizer``, the policy's ``transformers`` tokenizer with its chat template (the rollout
    encodes prompts with it and decodes completions); ``context_length``, the model's positions when
    known, by which the rollout bounds prompts (None: unknown); ``own_weights``, True when the weights
    live in this process, so a second copy built in a worker process samples on its own and takes its
    weights from ``update_weights`` (asynchronous rollouts need it), False for engines over shared servers.
    """

    tokenizer: PreTrainedTokenizerBase
    context_length: int | None
    own_weights: ClassVar[bool]

    def generate(self, prompts: list[list[int]], params: SamplingParams,
                 seed: int | None = None) -> list[Generation]:
        """One completion per prompt, in order: its token ids, the sampling log-prob of each, and why it
        stopped. Sampling follows ``params`` (temperature, top-p, max new tokens, stop tokens); the same
        ``seed`` gives the same completions where the engine can (None: the engine's own state). Raises
        ``prover.errors.EngineError`` when the engine cannot answer (a server down); never returns fewer
        completions than prompts."""
        ...

    def logprobs(self, prompts: list[list[int]], completions: list[list[int]]) -> list[np.ndarray]:
        """The log-prob of each completion token given its prompt under the engine's current weights, one
        (len(completion),) float array per pair, in order (for checks and re-scoring)."""
        ...

    def update_weights(self, learner: WeightSource) -> None:
        """Make the engine's policy equal to the learner's (``learner.policy_state_dict()``). Under several
        processes every one calls it; on return the next ``generate`` samples from the new weights. Raises
        ``prover.errors.CapabilityError`` when it cannot take them (e.g. sharded weights it cannot gather)."""
        ...

    def take_counts(self) -> dict[str, float]:
        """Counts since the last call, e.g. ``cost/engine_requests``; the trainer logs them per phase
        (``cost/engine_x`` becomes ``cost/rollout_engine_x``) and the call resets them."""
        ...

    def close(self) -> None:
        """Release what the engine holds (servers, threads, process groups) when the run ends; idempotent."""
        ...


class Engine(Configurable):
    """Base class of every engine (``EngineContract`` is the spec). Subclasses implement ``generate``,
    ``logprobs`` and ``update_weights``, set ``tokenizer``, and may set ``Config`` (the pydantic model of their
    ``engine.kwargs``; without one it is derived from the constructor's keyword arguments, less ``RUN_ARGS``)."""

    tokenizer: PreTrainedTokenizerBase
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

    @required
    def generate(self, prompts: list[list[int]], params: SamplingParams,
                 seed: int | None = None) -> list[Generation]:
        raise NotImplementedError

    @required
    def logprobs(self, prompts: list[list[int]], completions: list[list[int]]) -> list[np.ndarray]:
        raise NotImplementedError

    @required
    def update_weights(self, learner: WeightSource) -> None:
        raise NotImplementedError

    def take_counts(self) -> dict[str, float]:
        """Counts since the last call (the trainer logs them per phase: ``cost/engine_x`` becomes
        ``cost/rollout_engine_x``); none by default."""
        return {}

    def close(self) -> None:
        """Release what the engine holds (servers, threads, process groups) when the run ends."""

