"""Numbers in configs are numbers: ``steps=true`` is refused, not read as 1, and ``lr=inf`` is refused too.

Pydantic's lax mode takes ``true`` for an int (1) and a float (1.0), and ``inf`` or ``nan`` for a float; a
YAML file or an override that says ``true`` where a count belongs, or an infinite rate, is a mistake. One rule
covers every number of a config, wherever its model comes from:

- a bool is refused in every field whose type is a number (or a list or dict of numbers, or a model holding
  such fields) and not also a bool: ``bool_path`` finds one;
- a float must be finite: ``nonfinite_path`` finds one that is not.

The run config's sections and the bench config derive from ``StrictNumbers``, which applies both while
pydantic validates; every plugin's settings (env, engine, credit, judge: ``Configurable.parse_settings``)
are checked with the same two functions, whatever model class the plugin declares."""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Iterable
from typing import TypeGuard

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

BOOL_FOR_NUMBER = "must be a number, not true or false"
NOT_FINITE = "must be a finite number"


def _numeric(annotation: object) -> bool:
    """Whether ``annotation`` takes numbers but not bools (int, float, int | None, ...)."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _numeric(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        return bool not in args and any(_numeric(a) for a in args)
    return annotation in (int, float)


def _is_model(annotation: object) -> TypeGuard[type[BaseModel]]:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def bool_path(value: object, annotation: object) -> tuple | None:
    """Where ``value`` holds a bool that ``annotation`` wants as a number: () for ``value`` itself, a path of
    keys and indices into a list, a dict's values or a model's fields; None when it holds none."""
    if isinstance(value, bool):
        return () if _numeric(annotation) else None
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    found: tuple | None = None
    if _is_model(annotation) and isinstance(value, dict):
        fields = annotation.model_fields
        found = next(((k, *p) for k, v in value.items() if k in fields
                      and (p := bool_path(v, fields[k].annotation)) is not None), None)
    elif origin in (list, tuple, set) and args and isinstance(value, (list, tuple)):
        found = next(((i, *p) for i, v in enumerate(value) if (p := bool_path(v, args[0])) is not None), None)
    elif origin is dict and len(args) == 2 and isinstance(value, dict):
        found = next(((k, *p) for k, v in value.items() if (p := bool_path(v, args[1])) is not None), None)
    elif origin in (typing.Union, types.UnionType):
        found = next((p for a in args if a is not type(None) and (p := bool_path(value, a)) is not None), None)
    return found


def nonfinite_path(value: object) -> tuple | None:
    """Where a validated ``value`` (a model, or what its fields hold) holds an infinite or NaN float, as in
    ``bool_path``; None when every float in it is finite."""
    if isinstance(value, float):
        return None if math.isfinite(value) else ()
    items: Iterable[tuple[object, object]] = ()
    if isinstance(value, BaseModel):
        items = ((k, getattr(value, k)) for k in type(value).model_fields)
    elif isinstance(value, dict):
        items = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    return next(((k, *p) for k, v in items if (p := nonfinite_path(v)) is not None), None)


def _checks_itself(annotation: object) -> bool:
    """A field holding a ``StrictNumbers`` section (or None): the section names its own field when it refuses."""
    args = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) else ()
    models = [a for a in args if a is not type(None)] or [annotation]
    return all(_is_model(a) and issubclass(a, StrictNumbers) for a in models)


class StrictNumbers(BaseModel):
    model_config = ConfigDict(allow_inf_nan=False)  # "Input should be a finite number", merged into subclasses

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: object, info: ValidationInfo) -> object:
        field = cls.model_fields.get(info.field_name or "")
        if field is None or _checks_itself(field.annotation):
            return value
        path = bool_path(value, field.annotation)
        if path is not None:
            inner = ".".join(str(p) for p in path)
            raise PydanticCustomError("bool_for_number", f"{inner + ': ' if inner else ''}{BOOL_FOR_NUMBER}")
        return value
