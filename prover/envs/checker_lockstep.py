"""``check_env``'s lockstep checks: two instances stepped turn by turn must each play as it plays alone.

The rollout steps a group's episodes, and the Brancher its continuations, in lockstep: one env call per
episode per turn, the calls of different instances interleaved. An env whose instances share state
(the process-wide ``random`` / ``np.random``, a class attribute, a module global) passes every check of a
single instance and still plays other episodes under training, and its replay snapshots restore other
states. So each seed is played by two instances in lockstep, from a reset and from a snapshot restored into
both, and each instance's trace is compared with the same play alone. When they differ, the lockstep play
is repeated with each instance's global RNGs kept apart (``prover.envs.global_rng``): if that cures it,
the failure is rule ``global-rng`` and names the fix; otherwise rule ``lockstep``.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from typing import Any

from prover.envs.base import TextEnv
from prover.envs.global_rng import GlobalRngSlot

GLOBAL_RNG_FIX = ("the env draws from the process-wide random or numpy RNG: declare uses_global_rng = True on "
                  "its class, or set env.isolate_global_rng: true (`prover check-env --isolate-global-rng`), and "
                  "prover gives each instance its own (prover/envs/global_rng.py)")
Start = Callable[[TextEnv], dict]  # puts an env in its first state; returns that state's info


def second_instance(env: TextEnv, make_twin: Callable[[], TextEnv] | None, fail: Callable[[str, str], None]) -> TextEnv:
    """The instance stepped alongside ``env``: ``make_twin()``, else a deep copy of ``env``."""
    try:
        return make_twin() if make_twin is not None else copy.deepcopy(env)
    except Exception as exc:  # any failure is one line naming what to pass
        how = "make_twin()" if make_twin is not None else "copy.deepcopy(env)"
        fail("lockstep", f"cannot make a second instance to step in lockstep with the first: {how} raised "
             f"{type(exc).__name__}: {' '.join(str(exc).split())[:120]}; pass make_twin= to check_env")
        raise  # unreachable: fail raises


def lockstep(envs: list[TextEnv], starts: list[Start], n_steps: int, picks: list[Callable],
             step: Callable[[TextEnv, str, str], tuple], slots: list[Any] | None = None) -> list[list[tuple]]:
    """Play ``envs`` one call each per turn, in order, as the rollout does; each trace lists per step the
    action and what came back. ``slots``: a context entered around each instance's calls."""
    ctx = slots or [contextlib.nullcontext() for _ in envs]
    infos, traces = [], []
    for env, start, slot in zip(envs, starts, ctx):
        with slot:
            info = start(env)
            infos.append(info)
            traces.append([(env.state_key(), tuple(info.get("admissible_actions") or ()))])
    live = [True] * len(envs)
    for i in range(n_steps):
        for k, env in enumerate(envs):
            if not live[k]:
                continue
            with ctx[k]:
                action = picks[k](list(infos[k].get("admissible_actions") or ["look"]), i)
                obs, rew, term, trunc, info = step(env, action, f"step {i + 1} of instance {k + 1} in lockstep")
                # a NaN reward is compared as text: NaN != NaN would read as two instances playing differently
                paid = "nan" if isinstance(rew, float) and rew != rew else rew
                traces[k].append((action, obs, paid, term, trunc, bool(info.get("won")), env.state_key(),
                                  tuple(info.get("admissible_actions") or ())))
            infos[k] = info
            live[k] = not (term or trunc)
    return traces


def first_difference(a: list[tuple], b: list[tuple]) -> int:
    """The first step (0: the start) where two traces differ."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def check_lockstep(envs: list[TextEnv], starts: list[Start], n_steps: int, pickers: Callable[[], list[Callable]],
                   alone: list[list[tuple]], what: str, step: Callable, fail: Callable[[str, str], None]) -> None:
    """``envs`` in lockstep must give the traces ``alone`` (each instance played by itself)."""
    together = lockstep(envs, starts, n_steps, pickers(), step)
    if together == alone:
        return
    k = next(k for k in range(len(envs)) if together[k] != alone[k])
    at = first_difference(together[k], alone[k])
    seen = (f"{what}: instance {k + 1} played differently in lockstep with another instance than alone, "
            f"from step {at}")
    isolated = lockstep(envs, starts, n_steps, pickers(), step, [GlobalRngSlot() for _ in envs])
    if isolated == alone:
        fail("global-rng", f"{seen}; with each instance's global RNGs kept apart it plays as alone: {GLOBAL_RNG_FIX}")
    fail("lockstep", f"{seen}, also with each instance's global RNGs kept apart: the instances share other state "
         "(a class attribute, a module global, one engine), and a rollout steps many at once")


def check_reset_lockstep(env: TextEnv, twin: TextEnv, seed: int, n_steps: int, picker: Callable,
                         step: Callable, fail: Callable[[str, str], None]) -> None:
    """Seeds ``seed`` and ``seed + 1`` from a reset, each alone, then the two in lockstep."""
    seeds = (seed, seed + 1)
    starts = [_reset_to(s) for s in seeds]
    alone = [lockstep([e], [st], n_steps, [picker(s)], step)[0] for e, st, s in zip((env, twin), starts, seeds)]
    check_lockstep([env, twin], starts, n_steps, lambda: [picker(s) for s in seeds], alone,
                   f"seeds {seeds[0]} and {seeds[1]} from reset", step, fail)


def check_restore_lockstep(env: TextEnv, twin: TextEnv, snap: object, info: dict, where: str, n_steps: int,
                           picker: Callable, step: Callable, fail: Callable[[str, str], None]) -> None:
    """A snapshot restored into both instances: its future alone, then both restored and in lockstep."""
    def start(e: TextEnv) -> dict:
        e.restore(snap)
        return info

    alone = lockstep([env], [start], n_steps, [picker()], step)[0]
    check_lockstep([env, twin], [start, start], n_steps, lambda: [picker(), picker()], [alone, alone],
                   f"the snapshot taken at {where}, restored into two instances", step, fail)


def _reset_to(seed: int) -> Start:
    def start(env: TextEnv) -> dict:
        return env.reset(seed=seed)[1]
    return start
