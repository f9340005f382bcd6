"""The checks of a validated config that span sections: every registry name resolves, the env's and the
engine's settings fit their classes, the credit method and judge accept the run, the prompt fits the model,
and the asynchronous rollout (``rollout.max_off_policy_steps``) has what it needs. ``prover.config_load`` runs
them when a config loads (``load_config``, which re-exports both functions); they fail before any work starts."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from prover.config import TrainConfig
from prover.envs.base import TextEnv
from prover.episodes.turn_prompts import prompt_budget
from prover.errors import ConfigError, ContractError
from prover.learning.model_folder import model_positions
from prover.registry import CREDIT, ENGINES, ENVS, JUDGES


def check_env_settings(name: str, kwargs: dict[str, Any]) -> BaseModel:
    """The env ``name`` resolved to a TextEnv class and ``kwargs`` checked by its ``Config``: the one check
    of ``env.kwargs``, for `prover train` when its config loads and for `prover check-env`."""
    env_cls = ENVS.get(name)
    if not (isinstance(env_cls, type) and issubclass(env_cls, TextEnv)):
        raise ContractError(f"env {name!r} is {getattr(env_cls, '__qualname__', env_cls)!r}, not a "
                            "prover.envs.TextEnv subclass")
    return env_cls.parse_settings(kwargs, "env.kwargs", name)


def check_async_rollout(cfg: TrainConfig, engine_cls: type) -> None:
    """``rollout.max_off_policy_steps`` > 0 samples in a worker process with its own copy of the policy:
    the engine must hold its own weights, and the policy must be whole (not a LoRA adapter)."""
    k = cfg.rollout.max_off_policy_steps
    if not k:
        return
    if not getattr(engine_cls, "own_weights", False):
        raise ConfigError(f"rollout.max_off_policy_steps={k} samples ahead in a worker process with its own "
                          f"copy of the policy, but engine {cfg.engine.name!r} does not hold its own weights; use "
                          "engine.name=hf or rollout.max_off_policy_steps=0")
    if cfg.model.lora.enabled:  # the worker would sample the bare base
        raise ConfigError("rollout.max_off_policy_steps > 0 with model.lora is not supported yet: the rollout "
                          "worker starts from the base weights, not the adapted policy; set one of them off")


def check_parts_fit(cfg: TrainConfig) -> None:
    """Resolve every registry name now, so a bad name fails before any work starts."""
    # a typo in env.kwargs or engine.kwargs fails now, not when the part is built after the warm start
    check_env_settings(cfg.env.name, cfg.env.kwargs)
    engine = ENGINES.get(cfg.engine.name)
    engine.validate_kwargs(cfg.engine.kwargs)
    check_async_rollout(cfg, engine)
    method = CREDIT.get(cfg.credit.name)
    method.validate_config(cfg)
    if cfg.judge.name is not None:
        JUDGES.get(cfg.judge.name).validate_config(cfg)
    # model_positions also checks a model folder: it exists, with a config.json
    prompt_budget(cfg.rollout.max_prompt_tokens, cfg.rollout.sampling.max_new_tokens, model_positions(cfg.model.path))
