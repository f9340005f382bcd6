"""Command-line values typed by the field they fill.

An override's value is read as YAML (``steps=8`` is a number), which types the items of a list too:
``env.kwargs.actions=[1,2]`` reads as two ints, which a ``list[str]`` setting refuses, and ``[yes, 010]``
as ``[True, 8]``, which no conversion back can undo. So once the overrides are applied (``env.name`` and
the other plugin names are known), every value whose field wants text somewhere is read again from the
text the user wrote: where the field wants a ``str``, the item is the text as written (``"1"``, ``"yes"``,
``"010"``); everywhere else, YAML's value stays. ``null`` stays None.

The field of a dotted name is found in ``TrainConfig`` and, below a plugin's section (``env.kwargs.*``,
``engine.kwargs.*``, ``credit.*``, ``judge.*``), in that plugin's ``Config`` (``prover.plugin_config``).
A name found nowhere, or a plugin that does not load, keeps YAML's value: the config check that follows
reports it.
"""

from __future__ import annotations

import collections.abc
import types
import typing
from typing import Any, Literal, Union

import yaml
from pydantic import BaseModel

from prover.config import TrainConfig
from prover.errors import ConfigError
from prover.registry import REGISTRIES
from prover.settings.yaml_files import load_yaml_text

# (section path, registry, section holding the plugin's name): where a plugin's own settings live
PLUGIN_SECTIONS = ((("env", "kwargs"), "envs", "env"), (("engine", "kwargs"), "engines", "engine"),
                   (("credit",), "credit", "credit"), (("judge",), "judges", "judge"))
SEQUENCES = (list, tuple, set, frozenset, collections.abc.Sequence, collections.abc.Set,
             collections.abc.Collection, collections.abc.Iterable, collections.abc.MutableSequence)
MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)


def parse_override(text: str) -> tuple[str, Any]:
    """``a.b=value`` -> ("a.b", value), the value read as a YAML scalar (8 -> int, true -> bool)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip() or any(not part for part in key.strip().split(".")):
        raise ConfigError(f"override {text!r} is not of the form section.field=value")
    try:
        value = load_yaml_text(raw, f"override {key.strip()!r}") if raw.strip() else ""  # aliases bounded
    except yaml.YAMLError:
        value = raw
    return key.strip(), value


def type_overrides_by_field(tree: dict, overrides: list[str] | tuple[str, ...]) -> None:
    """Re-read, in ``tree`` (overrides applied), each override's value as its field's type asks (see the
    module docstring). A value a later override replaced is left alone."""
    last = {key: (value, text) for key, value, text in ((*parse_override(t), t) for t in overrides)}
    for key, (value, text) in last.items():
        if isinstance(value, str) or value is None:
            continue  # nothing YAML typed
        parts = key.split(".")
        node = tree
        for part in parts[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or node.get(parts[-1]) != value:
            continue  # replaced by a later override of its section
        hint = field_type(tree, parts)
        if hint is not None:
            node[parts[-1]] = typed_like(value, yaml.load(text.partition("=")[2], Loader=yaml.BaseLoader), hint)


def field_type(tree: dict, parts: list[str]) -> Any:
    """The type of the field that dotted name ``parts`` fills, or None when it is not known."""
    for section, registry, owner in PLUGIN_SECTIONS:
        n = len(section)
        if tuple(parts[:n]) == section and len(parts) > n:
            own = _model_field(TrainConfig, parts)  # credit.name and the like are the schema's
            return own if own is not None else _plugin_field(tree, registry, owner, parts[n:])
    return _model_field(TrainConfig, parts)


def _model_field(model: Any, parts: list[str]) -> Any:
    for i, part in enumerate(parts):
        model = _unwrap(model)
        if not (isinstance(model, type) and issubclass(model, BaseModel)) or part not in model.model_fields:
            return None
        model = model.model_fields[part].annotation
        if i == len(parts) - 1:
            return model
    return None


def _plugin_field(tree: dict, registry: str, owner: str, parts: list[str]) -> Any:
    """The type of a plugin setting: the field of the named plugin's ``Config``."""
    section = tree.get(owner)
    name = section.get("name") if isinstance(section, dict) else None
    if name is None:
        name = TrainConfig.model_fields[owner].annotation.model_fields["name"].default
    try:
        settings = REGISTRIES[registry].get(str(name)).Config
    except Exception:  # noqa: BLE001  (an unknown or broken plugin is reported by the config check)
        return None
    return _model_field(settings, parts)


def _unwrap(hint: object) -> object:
    """``Annotated[T, ...]`` is T; ``T | None`` with one class of settings is that class."""
    while typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    if typing.get_origin(hint) in (Union, types.UnionType):
        models = [a for a in typing.get_args(hint) if isinstance(a, type) and issubclass(a, BaseModel)]
        if len(models) == 1:
            return models[0]
    return hint


def typed_like(value: object, text: object, hint: object) -> object:
    """``value`` (YAML's reading) with every item that ``hint`` wants as a str taken from ``text`` (the
    same YAML read with every scalar a str); anything that does not line up keeps ``value``."""
    hint = _unwrap(hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        return _typed_union(value, text, args)
    if isinstance(value, list) and isinstance(text, list) and len(value) == len(text):
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(args) != len(value):
                return value
            return [typed_like(v, t, a) for v, t, a in zip(value, text, args)]
        if origin in SEQUENCES and args:
            return [typed_like(v, t, args[0]) for v, t in zip(value, text)]
        return value
    if isinstance(value, dict) and isinstance(text, dict) and len(value) == len(text):
        if origin in MAPPINGS and len(args) == 2:
            keys = text if args[0] is str else value
            return {k: typed_like(v, t, args[1]) for k, v, t in zip(keys, value.values(), text.values())}
        return value
    if value is not None and isinstance(text, str) and _is_text(hint):
        return text
    return value


def _typed_union(value: object, text: object, members: tuple[object, ...]) -> object:
    """A union: the member of the value's shape. A scalar stays YAML's when a non-text member takes it
    as it is (``int | str`` keeps 8), else it is text where a text member takes it (``int | Literal["auto"]``
    reads ``true`` as YAML's bool, which the number rule then refuses, not as the text "true")."""
    shaped = [m for m in members if _shape(m) == _shape_of(value)]
    if not shaped or value is None:
        return value
    if _shape_of(value) != "scalar":
        return typed_like(value, text, shaped[0])
    if any(_takes(m, value) for m in shaped if not _is_text(m)):
        return value
    return text if isinstance(text, str) and any(_is_text(m) and _takes(m, text) for m in shaped) else value


def _is_text(hint: object) -> bool:
    hint = _unwrap(hint)
    if typing.get_origin(hint) is Literal:
        return all(isinstance(a, str) for a in typing.get_args(hint))
    return hint is str


def _takes(hint: object, value: object) -> bool:
    """Whether a scalar type takes YAML's value as it is (a float takes an int; a bool is not an int)."""
    hint = _unwrap(hint)
    if hint is Any or hint is object:
        return True
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if typing.get_origin(hint) is Literal:
        return value in typing.get_args(hint)
    return isinstance(hint, type) and isinstance(value, hint)


def _shape(hint: object) -> str:
    hint = _unwrap(hint)
    origin = typing.get_origin(hint) or hint
    if origin in SEQUENCES and hint is not str:
        return "list"
    if origin in MAPPINGS:
        return "dict"
    return "scalar"


def _shape_of(value: object) -> str:
    return "list" if isinstance(value, list) else "dict" if isinstance(value, dict) else "scalar"
