"""Envs: the contract (``base.TextEnv``), its checker, and the embedded envs.

The embedded envs are ``ENVS``'s built-ins, ``module:Object`` strings in prover/registry.py, so that
importing prover (or listing the names) imports no env.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prover.envs.agent_spec import AgentSpec, ParsedAction
from prover.envs.base import ReplaySnapshot, TextEnv
from prover.envs.checker import check_env
from prover.envs.global_rng import protected_class
from prover.errors import ConfigError, ContractError
from prover.registry import ENVS

if TYPE_CHECKING:
    from prover.config import EnvConfig


def make_configured_env(env: EnvConfig) -> TextEnv:
    """The run's env from its ``env`` config section (name, kwargs, isolate_global_rng)."""
    return make_env(env.name, isolate_global_rng=env.isolate_global_rng, **env.kwargs)


def make_env(name: str, /, isolate_global_rng: bool = False, **kwargs: object) -> TextEnv:
    """Build the env registered as ``name`` with ``kwargs``; the result must be a ``TextEnv``. Its global
    RNGs are kept per instance (``prover.envs.global_rng``) when its class declares ``uses_global_rng`` or
    ``isolate_global_rng`` is set (the run's ``env.isolate_global_rng``)."""
    cls = ENVS.get(name)
    if isinstance(cls, type) and issubclass(cls, TextEnv):
        cls = protected_class(cls, isolate_global_rng)
    try:
        env = cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"env {name!r} rejected its arguments {sorted(kwargs)}: {exc}") from exc
    if not isinstance(env, TextEnv):
        raise ContractError(f"env {name!r} built a {type(env).__name__}, not a prover.envs.TextEnv")
    return env


__all__ = ["AgentSpec", "ParsedAction", "ReplaySnapshot", "TextEnv", "check_env", "make_configured_env", "make_env"]
