"""Loading the run configuration: a YAML file plus dotted overrides, the chosen env's ``train_recipe``
beneath them, validation against the schema (``prover.config``) with one-line errors, then the checks
that the named parts fit (``prover.settings.config_checks``).

The loader, not the schema, is the room that reads the registries and the plugins: the schema stays a
ground floor every room may import, and this file sits above the parts it resolves. It re-exports
``check_parts_fit``, ``check_env_settings`` and ``parse_override`` (``prover.settings.config_overrides``), so callers
need one import for loading and checking.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from prover.config import EnvConfig, TrainConfig
from prover.errors import ConfigError, ProverError, validation_line
from prover.plugin_config import Configurable, env_recipe
from prover.registry import ENVS
from prover.settings.config_checks import check_env_settings, check_parts_fit
from prover.settings.config_overrides import parse_override, type_overrides_by_field
from prover.settings.yaml_files import read_yaml

__all__ = ["check_env_settings", "check_parts_fit", "config_from_tree", "load_config", "parse_override",
           "read_tree"]


def _set_dotted(tree: dict, dotted: str, value: object) -> None:
    keys = dotted.split(".")
    node = tree
    for k in keys[:-1]:
        child = node.setdefault(k, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override {dotted!r}: {k!r} is a value, not a section")
        node = child
    node[keys[-1]] = value


def read_tree(path: str | Path | None, overrides: list[str] | tuple[str, ...] = (),
              what: str = "config file") -> dict:
    """A YAML file (optional; ``what`` names it in errors) with dotted overrides applied, unchecked: the one
    reader of `prover train` and `prover bench` configs; ConfigError when it does not read."""
    tree: dict = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"{what} {str(p)!r} does not exist")
        tree = read_yaml(p, what) or {}
        if not isinstance(tree, dict):
            raise ConfigError(f"{what} {str(p)!r} must hold a mapping of sections, not {type(tree).__name__}")
    for text in overrides:
        _set_dotted(tree, *parse_override(text))
    return tree


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> TrainConfig:
    """Read a YAML file (optional), apply dotted overrides, validate; ConfigError on any problem."""
    tree = read_tree(path, overrides)
    type_overrides_by_field(tree, overrides)  # env.kwargs.actions=[1,2] into a list[str] is ["1", "2"]
    return config_from_tree(tree)


def config_from_tree(tree: dict) -> TrainConfig:
    """Validate a mapping of sections (a YAML file's content, overrides applied): the env's recipe
    beneath it, every name resolved; ConfigError on any problem. ``tree`` is updated in place."""
    _apply_env_recipe(tree)
    try:
        cfg = TrainConfig.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(validation_line(exc, unknown="; see `prover train --help` for the fields")) from exc
    check_parts_fit(cfg)
    return cfg


def _is_set(tree: dict, dotted: str) -> bool:
    node: object = tree
    for k in dotted.split("."):
        if not isinstance(node, dict) or k not in node:
            return False
        node = node[k]
    return True


def _apply_env_recipe(tree: dict) -> None:
    """Fill in the chosen env's ``train_recipe`` beneath what the user set, key by key. A recipe is tuned
    for the tiny policy, so a real checkpoint (``model.path``) gets the plain defaults."""
    model = tree.get("model")
    if isinstance(model, dict) and model.get("path", "tiny") != "tiny":
        return
    env = tree.get("env")
    name = env.get("name") if isinstance(env, dict) else None
    name = name or EnvConfig.model_fields["name"].default
    try:
        env_cls = ENVS.get(name)
    except ProverError:
        return  # an unknown or broken env is reported by check_parts_fit, with the closest name
    recipe = env_recipe(env_cls, env.get("kwargs") if isinstance(env, dict) else None)
    _check_recipe_kwargs(name, env_cls, recipe)
    for dotted, value in recipe.items():
        if not _is_set(tree, dotted):
            _set_dotted(tree, dotted, value)


def _check_recipe_kwargs(name: str, env_cls: type, recipe: dict[str, Any]) -> None:
    """A recipe's ``env.kwargs.*`` must be settings of its class (its ``Config``): one line blaming the
    recipe now, not one about a setting the user never wrote."""
    keys = [k.split(".", 2)[2] for k in recipe if k.startswith("env.kwargs.") and k.count(".") >= 2]
    if not keys or not issubclass(env_cls, Configurable):  # not a TextEnv: check_parts_fit says so
        return
    model = env_cls.Config
    bad = [k for k in keys if k not in model.model_fields]
    if bad and model.model_config.get("extra") != "allow":  # one that takes **kwargs takes any name
        raise ConfigError(f"env {name!r}: the train_recipe of {env_cls.__qualname__} sets "
                          f"{', '.join('env.kwargs.' + k for k in bad)}, which are not among its settings "
                          f"(env.kwargs: {', '.join(model.model_fields) or 'none'}); fix the recipe")
