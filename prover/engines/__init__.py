"""Inference engines, each a subclass of ``base.Engine``, registered by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prover.engines.base import Engine
from prover.registry import ENGINES

ENGINES.register("hf", "prover.engines.hf:HFEngine")
ENGINES.register("sglang", "prover.engines.sglang:SGLangEngine")


def make_engine(name: str, model_path: str | Path, **kwargs: Any) -> Engine:
    """Build the engine registered as ``name`` on the policy folder ``model_path``, as the run does:
    ``Engine(model_path, dtype=model.dtype, **engine.kwargs)``."""
    return ENGINES.get(name)(model_path, **kwargs)


__all__ = ["Engine", "make_engine"]
