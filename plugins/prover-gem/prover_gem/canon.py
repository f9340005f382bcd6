"""A canonical, order-independent text form of a game object's attributes, for the state key."""

from __future__ import annotations

from typing import Any

import numpy as np

PLAIN = (str, int, float, bool, bytes, type(None))


def canonical(value: Any, depth: int = 0) -> Any:
    """Containers become sorted tuples, arrays their shape and bytes, nested objects their attributes;
    functions, modules and classes (not state) are left out. Sets are sorted by repr: their iteration
    order is not part of the state."""
    if depth > 12:  # GEM's games hold plain data a few levels deep; a cycle would stop here
        return "<deep>"
    if isinstance(value, PLAIN):
        return value
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return ("dict", tuple(sorted(((repr(canonical(k, depth + 1)), canonical(v, depth + 1))
                                      for k, v in value.items()), key=lambda kv: kv[0])))
    if isinstance(value, (set, frozenset)):
        return ("set", tuple(sorted(repr(canonical(v, depth + 1)) for v in value)))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(canonical(v, depth + 1) for v in value))
    if callable(value) or isinstance(value, type) or type(value).__name__ == "module":
        return None
    if hasattr(value, "__dict__"):
        return (type(value).__name__, canonical(vars(value), depth + 1))
    return repr(value)
