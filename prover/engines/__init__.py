"""Inference engines, each a subclass of ``base.Engine``, named in ``ENGINES``'s built-ins (prover/registry.py)."""

from __future__ import annotations

from pathlib import Path

from prover.engines.base import Engine
from prover.registry import ENGINES


def make_engine(name: str, model_path: str | Path, **kwargs: object) -> Engine:
    """Build the engine registered as ``name`` on the policy folder ``model_path``, as the run does:
    ``Engine(model_path, dtype=model.dtype, **engine.kwargs)``."""
    return ENGINES.get(name)(model_path, **kwargs)


__all__ = ["Engine", "make_engine"]
