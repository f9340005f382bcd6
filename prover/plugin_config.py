"""One rule for the settings of every plugin kind: envs, engines, credit methods and judges.

A plugin class is ``Configurable``. Its settings are one pydantic model, the class attribute ``Config``;
``parse_settings(raw, where)`` checks what the run config gives it, when the config loads and so before
any run folder is touched (a bad or unknown field is one ConfigError line naming the field and the
plugin), and ``describe_settings()`` lists them for ``prover train --help``.

======  ===========================  ======================================================================
kind    settings read from           ``Config``
======  ===========================  ======================================================================
env     ``env.kwargs.*``             derived from the constructor's keyword arguments, unless declared
engine  ``engine.kwargs.*``          the same; ``model_path`` and ``dtype`` are the run's (``RUN_ARGS``)
credit  ``credit.*`` besides name    declared: a ``prover.credit.MethodConfig`` subclass
judge   ``judge.*`` besides name     declared: a ``prover.judges.JudgeSettings`` subclass
======  ===========================  ======================================================================

A derived ``Config`` has one field per keyword argument, typed by its annotation (a default makes it
optional) and described by ``Annotated[..., Field(description=...)]`` where the author wrote one. What it
cannot check it leaves to the constructor, which preflight calls before the run folder changes: a
constructor with ``**kwargs``, or none of its own, takes names it does not list. The constructor is
still called with the values as written; the parsed ones only check them.
"""

from __future__ import annotations

import collections.abc
import functools
import inspect
import operator
import types
import typing
import warnings
from typing import Any, ClassVar, Union

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from prover.errors import ConfigError, validation_line
from prover.registry import ENVS, REGISTRIES

SettingRow = tuple[str, str, str, str]  # (name, type, default, description) of one setting


class _DerivedConfig:
    """The ``Config`` of a class that declares none: built from its constructor on first use, then kept
    on that class (a subclass with another constructor derives its own)."""

    def __get__(self, obj: object, owner: type) -> type[BaseModel]:
        model = owner.__dict__.get("_derived_config")
        if model is None:
            model = config_from_signature(owner)
            owner._derived_config = model  # type: ignore[attr-defined]
        return model


class Configurable:
    """A plugin class whose settings are the pydantic model ``Config`` (see the module docstring)."""

    Config: ClassVar[type[BaseModel]] = _DerivedConfig()  # type: ignore[assignment]
    # constructor arguments the run sets itself, each with the config field to use instead
    RUN_ARGS: ClassVar[dict[str, str]] = {}

    @classmethod
    def parse_settings(cls, raw: dict[str, Any], where: str, name: str | None = None) -> BaseModel:
        """``raw`` (the section ``where``, e.g. ``env.kwargs`` or ``credit``, less its ``name``) as a
        ``Config`` instance; a bad or unknown field is one ConfigError naming it and the plugin (``name``,
        the registered name, else the class's ``name`` or its class name)."""
        kind = where.split(".")[0]
        owner = f"{kind} {(name or plugin_label(cls))!r}"
        for key, instead in cls.RUN_ARGS.items():
            if key in raw:
                raise ConfigError(f"{where}.{key} is set by the run; use {instead} instead")
        # here, not at import: strict_numbers defines a pydantic model, and building one reads pydantic's plugin
        # entry points, which importing the env contract (this module's users) must not
        from prover.settings.strict_numbers import BOOL_FOR_NUMBER, NOT_FINITE, bool_path, nonfinite_path

        model = cls.Config
        if (at := bool_path(dict(raw), model)) is not None:  # the config's one rule for numbers (strict_numbers)
            raise ConfigError(f"config field {_dotted(where, at)!r} of {owner}: {BOOL_FOR_NUMBER} (got "
                              f"{_at(raw, at)!r})")
        try:
            settings = model.model_validate(dict(raw))
        except ValidationError as exc:
            known = ", ".join(f"{where}.{k}" for k in model.model_fields) or "none"
            raise ConfigError(validation_line(exc, prefix=f"{where}.", owner=owner,
                                              unknown=f"; its fields: {known}")) from None
        if (at := nonfinite_path(settings)) is not None:
            raise ConfigError(f"config field {_dotted(where, at)!r} of {owner}: {NOT_FINITE} (got "
                              f"{_at(settings, at)!r})")
        return settings

    @classmethod
    def describe_settings(cls) -> list[SettingRow]:
        """(name, type, default, description) of every setting, for ``--help``; a ``Config`` that takes
        further names (a constructor's ``**kwargs``) ends with the row ``*``."""
        model = cls.Config
        rows = [(name, type_name(f.annotation),
                 "required" if f.is_required() else repr(f.get_default(call_default_factory=True)),
                 f.description or "") for name, f in model.model_fields.items()]
        if model.model_config.get("extra") == "allow":
            rows.append(("*", "Any", "", "any other keyword argument, passed to the constructor unchecked"))
        return rows


def _dotted(where: str, path: tuple) -> str:
    return ".".join([where, *(str(p) for p in path)])


def _at(value: Any, path: tuple) -> Any:
    """What ``value`` (dicts, lists and models) holds at ``path``."""
    for key in path:
        value = getattr(value, key) if isinstance(value, BaseModel) else value[key]
    return value


def plugin_label(cls: type) -> str:
    """How messages name a plugin class: its ``name`` (engines have one), else its class name."""
    name = getattr(cls, "name", "")
    return name if isinstance(name, str) and name else cls.__name__


def config_from_signature(cls: type) -> type[BaseModel]:
    """The pydantic model of ``cls``'s constructor's keyword arguments, less ``RUN_ARGS``, so the check can
    never drift from what the constructor takes."""
    extra, fields = "forbid", {}
    init = cls.__init__
    try:
        params = list(inspect.signature(init).parameters.values())[1:]  # less self
    except (TypeError, ValueError):  # a builtin constructor has no readable signature
        params, extra = [], "allow"
    if init is object.__init__:  # no constructor of its own: nothing to say what it takes
        params, extra = [], "allow"
    hints = _hints(init)
    run_args = getattr(cls, "RUN_ARGS", {})
    for p in params:
        if p.kind is p.VAR_KEYWORD:
            extra = "allow"
        elif p.kind not in (p.VAR_POSITIONAL, p.POSITIONAL_ONLY) and p.name not in run_args:
            fields[p.name] = (_widen(hints.get(p.name, Any)), ... if p.default is p.empty else p.default)
    settings = ConfigDict(extra=extra, arbitrary_types_allowed=True, protected_namespaces=())
    with warnings.catch_warnings():  # an argument called e.g. `json` shadows a BaseModel method: harmless here
        warnings.simplefilter("ignore")
        try:
            return create_model(f"{cls.__name__}Settings", __config__=settings, **fields)
        except Exception:  # noqa: BLE001  (an annotation pydantic cannot check: check the names alone)
            return create_model(f"{cls.__name__}Settings", __config__=settings,
                                **{k: (Any, default) for k, (_, default) in fields.items()})


def _hints(init: collections.abc.Callable[..., object]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(init, include_extras=True)
    except Exception:  # noqa: BLE001  (a name only imported for type checkers: unchecked, not refused)
        return {}


def _widen(hint: object) -> object:
    """A ``Sequence[str]`` argument also takes one str: Python counts a str as one, and envs take a single
    name for a list of them (``task_types=pick_and_place_simple``); pydantic alone would refuse it."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        return functools.reduce(operator.or_, [_widen(a) for a in args])
    if origin is collections.abc.Sequence and args == (str,):
        return str | hint
    return hint


def type_name(hint: object) -> str:
    """``int``, ``str | None``, ``Sequence[str]``: a type as a reader writes it."""
    if hint is type(None):
        return "None"
    if isinstance(hint, type) and not typing.get_args(hint):
        return hint.__name__
    if typing.get_origin(hint) in (Union, types.UnionType):
        return " | ".join(type_name(a) for a in typing.get_args(hint))
    return str(hint).replace("typing.", "").replace("collections.abc.", "").replace("NoneType", "None")


# -- `prover train --help` -------------------------------------------------------------------------

def settings_help(registry: str, section: str, name: str | None) -> list[tuple[str, str, str]]:
    """``--help`` rows (dotted name, default, description) of the settings of plugin ``name`` of
    ``registry`` (e.g. ``envs``), set under ``section`` (``env.kwargs``); a plugin that does not load is one
    note row, so that help still prints."""
    if name is None:
        return []
    try:
        cls = REGISTRIES[registry].get(name)
        settings = cls.describe_settings()
    except Exception as exc:  # noqa: BLE001  (any failure is that plugin's, reported in its own row)
        note = " ".join(f"{type(exc).__name__}: {exc}".split())
        return [(f"{section}.* ({name})", "unavailable", f"({name}) settings not shown: {note}")]
    undocumented = f"an argument of {cls.__qualname__}() (see its docstring)"
    return [(f"{section}.{key}", default or "-", f"({name}, {typ}) {desc or undocumented}")
            for key, typ, default, desc in settings]


def env_recipe(env_cls: object, env_kwargs: object) -> dict[str, Any]:
    """The class's own ``train_recipe`` (not one inherited: a subclass, a plugin env over a sim, takes other
    constructor arguments), updated by its own ``train_recipe_for(env_kwargs)`` when it defines one: a
    recipe that depends on the settings, e.g. the warm start only for the games that have an expert."""
    if not isinstance(env_cls, type):
        return {}
    recipe = dict(env_cls.__dict__.get("train_recipe", {}))
    if "train_recipe_for" in env_cls.__dict__:
        recipe.update(env_cls.train_recipe_for(dict(env_kwargs) if isinstance(env_kwargs, dict) else {}))
    return recipe


def recipe_help(tree: dict | None = None) -> list[str]:
    """``--help`` lines: the ``train_recipe`` of the env that ``tree`` (a config's sections, unchecked)
    names, else of the default env, and how to see another plugin's settings."""
    # here, not at the top: the schema's models make pydantic read its plugins' entry points, and importing
    # prover (every TextEnv is Configurable) must read none (test_registry)
    from prover.config import EnvConfig

    env = (tree or {}).get("env")
    name = str(env["name"]) if isinstance(env, dict) and "name" in env else EnvConfig.model_fields["name"].default
    try:
        env_cls = ENVS.get(name)
        recipe = env_recipe(env_cls, env.get("kwargs") if isinstance(env, dict) else None)
    except Exception as exc:  # noqa: BLE001  (a broken env is that env's problem; help still prints)
        recipe, name = {}, f"{name} (does not load: {' '.join(str(exc).split())})"
    lines = [f"train_recipe of env {name!r} (set where the config does not, when model.path is tiny):"]
    lines += [f"  {key}={value!r}" for key, value in recipe.items()] or ["  (none)"]
    return lines + ["", ("Plugin settings above are those of the env, engine, credit method and judge that the "
                         "command line names,"), ("the defaults otherwise (e.g. `prover train --help "
                                                  "credit.name=grpo env.name=webshop-sim`); `prover list` names "
                                                  "them all.")]
