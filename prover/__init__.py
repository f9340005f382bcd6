"""prover: RL for LLM agents with fine-grained credit assignment (ProVer and its baselines).

The public API. Importing this module imports no plugin, no model code and no optional dependency
(not even the env contract, which pulls in gymnasium): every name below but the registries is loaded
on first use.
"""

from __future__ import annotations

from typing import Any

from prover.registry import CREDIT, ENGINES, ENVS, JUDGES, REGISTRIES, RETRIEVERS, Registry

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:  # each name loads on first use (the trainer pulls in torch)
    if name == "make_env":
        from prover.envs import make_env  # lazy: the env contract loads gymnasium and numpy
        return make_env
    if name == "make_credit":
        from prover.credit import make_credit  # lazy: the credit contract loads numpy and pydantic
        return make_credit
    if name == "make_judge":
        from prover.judges import make_judge  # lazy: the judge contract loads numpy and pydantic
        return make_judge
    if name == "make_engine":
        from prover.engines import make_engine  # lazy: the engine contract loads numpy and pydantic
        return make_engine
    if name in ("Trainer", "train"):
        from prover import trainer  # lazy: the whole training machinery, torch when it runs
        return getattr(trainer, name)
    if name == "TrainConfig":
        from prover.config import TrainConfig  # lazy: the schema loads pydantic
        return TrainConfig
    raise AttributeError(f"module 'prover' has no attribute {name!r}")


# the four factories, but not the trainer, so that `from prover import *` stays free of torch
__all__ = ["CREDIT", "ENGINES", "ENVS", "JUDGES", "REGISTRIES", "RETRIEVERS", "Registry", "__version__",
           "make_credit", "make_engine", "make_env", "make_judge"]
