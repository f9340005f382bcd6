"""Envs: the contract (``base.TextEnv``), its checker, and the embedded envs.

The embedded envs are ``ENVS``'s built-ins, ``module:Object`` strings in prover/registry.py, so that
importing prover (or listing the names) imports no env.
"""

from __future__ import annotations

from typing import Any

from prover.envs.agent_spec import AgentSpec, ParsedAction
from prover.envs.base import ReplaySnapshot, TextEnv
from prover.envs.checker import check_env
from prover.errors import ConfigError, ContractError
from prover.registry import ENVS


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
