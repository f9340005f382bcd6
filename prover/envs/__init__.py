"""Envs: the contract (``base.TextEnv``), its checker, and the embedded envs, registered by name.

Built-ins are registered as ``module:Object`` strings so that importing prover imports no env.
"""

from __future__ import annotations

from typing import Any

from prover.envs.agent_spec import AgentSpec, ParsedAction
from prover.envs.base import ReplaySnapshot, TextEnv
from prover.envs.checker import check_env
from prover.errors import ConfigError, ContractError
from prover.registry import ENVS

ENVS.register("alfworld-sim", "prover.envs.alfworld_sim:AlfworldSimEnv")
# alfworld-sim follows ALFWorld's own tables (issue 15); alfworld-sim-v1 keeps the sim's first tables,
# whose text already matched the real engine step for step. v0 is gone: asking for it suggests v1.
ENVS.register("alfworld-sim-v1", "prover.envs.alfworld_sim:AlfworldSimV1Env")
ENVS.register("webshop-sim", "prover.envs.webshop_sim:WebshopSimEnv")
ENVS.register("searchqa-sim", "prover.envs.searchqa_sim:SearchqaSimEnv")
ENVS.register("pivot-sim", "prover.envs.pivot_sim:PivotSimEnv")
# any Gymnasium env with text observations (prover/envs/gym.py); snapshots only when declared deterministic
ENVS.register("gymnasium", "prover.envs.gym:GymnasiumTextEnv")
ENVS.register("gymnasium-deterministic", "prover.envs.gym:DeterministicGymnasiumTextEnv")


def make_env(name: str, **kwargs: Any) -> TextEnv:
    """Build the env registered as ``name`` with ``kwargs``; the result must be a ``TextEnv``."""
    cls = ENVS.get(name)
    try:
        env = cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"env {name!r} rejected its arguments {sorted(kwargs)}: {exc}") from exc
    if not isinstance(env, TextEnv):
        raise ContractError(f"env {name!r} built a {type(env).__name__}, not a prover.envs.TextEnv")
    return env


__all__ = ["AgentSpec", "ParsedAction", "ReplaySnapshot", "TextEnv", "check_env", "make_env"]
