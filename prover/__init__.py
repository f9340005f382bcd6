"""prover: RL for LLM agents with fine-grained credit assignment (ProVer and its baselines).

The public API. Importing this module imports no plugin, no model code and no optional dependency;
heavy parts load when first used.
"""

from __future__ import annotations

from typing import Any

from prover.envs import make_env
from prover.registry import CREDIT, ENGINES, ENVS, JUDGES, REGISTRIES, Registry

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:  # lazy: the trainer pulls in torch
    if name in ("Trainer", "train"):
        from prover import trainer
        return getattr(trainer, name)
    if name == "TrainConfig":
        from prover.config import TrainConfig
        return TrainConfig
    if name == "make_credit":
        from prover.credit import make_credit
        return make_credit
    if name == "make_judge":
        from prover.judges import make_judge
        return make_judge
    if name == "make_engine":
        from prover.engines import make_engine
        return make_engine
    raise AttributeError(f"module 'prover' has no attribute {name!r}")


__all__ = ["CREDIT", "ENGINES", "ENVS", "JUDGES", "REGISTRIES", "Registry", "make_env", "__version__"]
