"""Numbers in configs are numbers: ``steps=true`` is refused, not read as 1.

Pydantic's lax mode takes ``true`` for an int (1) and a float (1.0); a YAML file or an override that says
``true`` where a count belongs is a mistake, so a model that derives from ``StrictNumbers`` refuses a bool in
every field whose type is a number (or a list or dict of numbers) and not also a bool."""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationInfo, field_validator


def _numeric(annotation: Any) -> bool:
    """Whether ``annotation`` takes numbers but not bools (int, float, int | None, ...)."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _numeric(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        return bool not in args and any(_numeric(a) for a in args)
    return annotation in (int, float)


def _has_bool(value: Any, annotation: Any) -> bool:
    """Whether ``value`` holds a bool where ``annotation`` wants a number (at the top, in a list or as a
    dict's value)."""
    if isinstance(value, bool):
        return _numeric(annotation)
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (list, tuple, set) and args and isinstance(value, (list, tuple)):
        return any(_has_bool(v, args[0]) for v in value)
    if origin is dict and len(args) == 2 and isinstance(value, dict):
        return any(_has_bool(v, args[1]) for v in value.values())
    if origin in (typing.Union, types.UnionType):
        return any(_has_bool(value, a) for a in args if a is not type(None))
    return False


class StrictNumbers(BaseModel):
    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if field is not None and _has_bool(value, field.annotation):
            raise ValueError("must be a number, not true or false")
        return value
