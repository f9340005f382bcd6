"""counting-hf: the built-in ``hf`` engine behind the engine contract, counting what it is asked to do.

An engine is a subclass of ``prover.engines.Engine`` (prover/engines/base.py) that sets ``tokenizer`` and
implements ``generate``, ``logprobs`` and ``update_weights``. The run builds it as
``Engine(model_path, dtype=model.dtype, **engine.kwargs)``. Two parts of the base are used here: ``Config``
(the model of ``engine.kwargs``, checked when the config loads, so a typo fails before any work) and
``take_counts`` (called after each phase; its metrics are logged per phase: ``cost/engine_requests``
becomes ``cost/rollout_engine_requests`` and ``cost/branch_engine_requests``). A third, ``close``, is
called when the run ends; the base's does nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from prover.engines import Engine
from prover.engines.hf import HFEngine
from prover.types import Generation, SamplingParams


class CountingKwargs(BaseModel):
    """``engine.kwargs`` of counting-hf."""

    model_config = ConfigDict(extra="forbid")
    batch_size: int = Field(64, ge=1, description="Prompts per generate call of the wrapped hf engine.")


class CountingEngine(Engine):
    """The hf engine (transformers, CPU or one GPU), counting requests, prompt tokens and generated tokens."""

    name = "counting-hf"
    Config = CountingKwargs

    def __init__(self, model_path: str | Path, dtype: str = "float32", batch_size: int = 64) -> None:
        self.inner = HFEngine(model_path, dtype=dtype, batch_size=batch_size)
        self.tokenizer = self.inner.tokenizer  # the rollout builds prompts with it
        self.counts = {"requests": 0, "prompt_tokens": 0, "generated_tokens": 0}

    def generate(self, prompts: list[list[int]], params: SamplingParams,
                 seed: int | None = None) -> list[Generation]:
        gens = self.inner.generate(prompts, params, seed=seed)
        self.counts["requests"] += len(prompts)
        self.counts["prompt_tokens"] += sum(map(len, prompts))
        self.counts["generated_tokens"] += sum(len(g.token_ids) for g in gens)
        return gens

    def logprobs(self, prompts: list[list[int]], completions: list[list[int]]) -> list[np.ndarray]:
        return self.inner.logprobs(prompts, completions)

    def update_weights(self, learner: Any) -> None:
        self.inner.update_weights(learner)  # the next rollout samples from the updated policy

    def take_counts(self) -> dict[str, float]:
        """Counts since the last call (one phase of a step), then start again from zero."""
        out = {f"cost/engine_{key}": float(value) for key, value in self.counts.items()}
        self.counts = dict.fromkeys(self.counts, 0)
        return out
