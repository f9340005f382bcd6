"""Each env instance its own copy of the process-wide RNGs (``random`` and numpy's legacy global one).

Some foreign games (GEM, TextArena) draw from ``random`` and ``np.random`` directly, and seed them in
``reset``. One instance alone is reproducible; several stepped in lockstep, as the rollout and the
Brancher step them, draw from one shared stream, so the same seed and actions give another episode and a
replay snapshot restores the wrong state. ``check_env`` catches that (rule ``global-rng``).

The protection needs nothing from the env's author. ``isolated_class(cls)`` is ``cls`` with
``GlobalRngIsolation`` in front of it: each instance keeps a ``GlobalRngSlot``, the two RNG states it
last left behind, and swaps them in around every call into the env (construction, ``reset``, ``step``,
``snapshot``, ``restore``, ``state_key``, the expert and the diagnostics), and the caller's states back
afterwards. ``reset(seed)`` first seeds the slot from ``seed`` (so an env that never seeds the globals is
reproducible per seed too), and a snapshot carries the slot's states, so a native (copying) snapshot
restores the RNG along with the game; a replay snapshot replays from a reseeded reset and needs nothing.

It applies wherever prover makes envs (``prover.envs.make_env``, the rollout worker's factory) when the
class declares ``uses_global_rng = True``, or when the run sets ``env.isolate_global_rng: true``. Not
covered: other process-wide state (torch's RNG, class attributes, module globals), and threads that
draw from ``random`` while an env call runs (prover steps envs from one thread).
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from prover.types import Trajectory

NP_SEED_MOD = 2**32  # np.random.seed takes 0 .. 2**32 - 1


class GlobalRngSlot:
    """The ``random`` and ``np.random`` states of one env instance; ``with slot:`` makes them the process's
    for the duration (re-entrant: a nested ``with`` of the same slot changes nothing)."""

    def __init__(self, seed: int = 0) -> None:
        self._depth = 0
        self._outer: tuple[Any, Any] | None = None
        self.py_state, self.np_state = _seeded_states(seed)

    def reseed(self, seed: int) -> None:
        """Start both streams from ``seed``; inside the ``with``, the process's RNGs are reseeded too."""
        if self._depth:
            random.seed(seed)
            np.random.seed(seed % NP_SEED_MOD)
        else:
            self.py_state, self.np_state = _seeded_states(seed)

    def states(self) -> tuple[Any, Any]:
        """The slot's (random, numpy) states as they are now (the live process states inside the ``with``)."""
        if self._depth:
            return random.getstate(), np.random.get_state()
        return self.py_state, self.np_state

    def set_states(self, states: tuple[Any, Any]) -> None:
        if self._depth:
            random.setstate(states[0])
            np.random.set_state(states[1])
        else:
            self.py_state, self.np_state = states

    def __enter__(self) -> GlobalRngSlot:
        if self._depth == 0:
            self._outer = (random.getstate(), np.random.get_state())
            random.setstate(self.py_state)
            np.random.set_state(self.np_state)
        self._depth += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth == 0 and self._outer is not None:
            self.py_state, self.np_state = random.getstate(), np.random.get_state()
            random.setstate(self._outer[0])
            np.random.set_state(self._outer[1])
            self._outer = None


def _seeded_states(seed: int) -> tuple[Any, Any]:
    return random.Random(seed).getstate(), np.random.RandomState(seed % NP_SEED_MOD).get_state()


@dataclass(frozen=True)
class RngSnapshot:
    """An isolated env's snapshot: the env's own snapshot and the slot's RNG states when it was taken."""

    inner: object  # the env's own snapshot, opaque
    rng_states: tuple[Any, Any]


class GlobalRngIsolation:
    """Mixin put in front of a ``TextEnv`` class by ``isolated_class``; see the module docstring."""

    uses_global_rng = True
    _global_rng: GlobalRngSlot

    def __init__(self, *args: object, **kwargs: object) -> None:
        self._global_rng = GlobalRngSlot()
        with self._global_rng:
            super().__init__(*args, **kwargs)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        with self._global_rng:
            if seed is None:  # the seed the base class would draw, made concrete here to seed the slot
                seed = int(self.np_random.integers(0, 2**31 - 1))  # type: ignore[attr-defined]
            self._global_rng.reseed(seed)
            return super().reset(seed=seed, options=options)  # type: ignore[misc]

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        with self._global_rng:
            return super().step(action)  # type: ignore[misc]

    def snapshot(self) -> object:
        with self._global_rng:
            inner = super().snapshot()  # type: ignore[misc]
            return RngSnapshot(inner, self._global_rng.states())

    def restore(self, snapshot: object) -> None:
        with self._global_rng:
            if isinstance(snapshot, RngSnapshot):
                super().restore(snapshot.inner)  # type: ignore[misc]
                self._global_rng.set_states(snapshot.rng_states)
            else:  # the base class names what it expected
                super().restore(snapshot)  # type: ignore[misc]

    def state_key(self) -> Hashable:
        with self._global_rng:
            return super().state_key()  # type: ignore[misc]

    def expert_action(self) -> str | None:
        with self._global_rng:
            return super().expert_action()  # type: ignore[misc]

    def gold(self) -> str:
        with self._global_rng:
            return super().gold()  # type: ignore[misc]

    def pivotal_turns(self, trajectory: Trajectory) -> list[int] | None:
        with self._global_rng:
            return super().pivotal_turns(trajectory)  # type: ignore[misc]


_ISOLATED: dict[type, type] = {}


def isolated_class(cls: type) -> type:
    """``cls`` with its instances' global RNGs kept apart (one class per ``cls``, same name and module)."""
    if issubclass(cls, GlobalRngIsolation):
        return cls
    if cls not in _ISOLATED:
        # the same name, constructor signature and settings as ``cls``: only its instances' RNGs differ
        body = {"__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": cls.__doc__,
                "__signature__": inspect.signature(cls)}
        if "Config" in dir(cls):
            body["Config"] = cls.Config
        _ISOLATED[cls] = type(cls.__name__, (GlobalRngIsolation, cls), body)
    return _ISOLATED[cls]


def protected_class(cls: type, isolate_global_rng: bool = False) -> type:
    """The class prover instantiates for ``cls``: isolated when it declares ``uses_global_rng`` or the run
    sets ``env.isolate_global_rng``."""
    if isolate_global_rng or getattr(cls, "uses_global_rng", False):
        return isolated_class(cls)
    return cls
