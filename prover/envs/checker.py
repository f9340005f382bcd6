"""``check_env``: one named check per rule of the env contract (see ``prover/envs/base.py``).

Every env, built-in or plugin, is run through this in the tests. A failure raises ``ContractError``
naming the rule that broke and what differed.
"""

from __future__ import annotations

import random
from typing import Callable

from prover.envs.base import TextEnv
from prover.errors import ContractError

DOCS = "see the env contract in prover/envs/base.py"


def _fail(rule: str, msg: str) -> None:
    raise ContractError(f"check_env [{rule}]: {msg} ({DOCS})")


def _rollout(env: TextEnv, seed: int, n_steps: int, pick: Callable[[list[str], int], str],
             options: dict | None = None) -> list[tuple]:
    obs, info = env.reset(seed=seed, options=options)
    trace: list[tuple] = [(obs, env.state_key(), tuple(info.get("admissible_actions") or ()))]
    for i in range(n_steps):
        action = pick(list(info.get("admissible_actions") or ["look"]), i)
        obs, rew, term, trunc, info = env.step(action)
        trace.append((action, obs, rew, term, trunc, bool(info.get("won")),
                      env.state_key(), tuple(info.get("admissible_actions") or ())))
        if term or trunc:
            break
    return trace


def _random_picker(seed: int) -> Callable[[list[str], int], str]:
    rng = random.Random(seed)
    return lambda actions, i: rng.choice(actions) if rng.random() > 0.1 else "do a barrel roll"


def check_reset(env: TextEnv, seed: int) -> None:
    obs, info = env.reset(seed=seed)
    if not isinstance(obs, str):
        _fail("reset-types", f"reset() returned obs of type {type(obs).__name__}, expected str")
    for key in ("won", "is_action_valid"):
        if key not in info:
            _fail("reset-info", f"reset() info lacks {key!r}")
    hash(env.state_key())


def check_step_types(env: TextEnv, seed: int) -> None:
    _, info = env.reset(seed=seed)
    out = env.step("do a barrel roll")
    if len(out) != 5:
        _fail("step-types", f"step() returned {len(out)} values, expected 5")
    obs, rew, term, trunc, info = out
    if not isinstance(obs, str) or not isinstance(rew, (int, float)):
        _fail("step-types", "step() must return (str, float, bool, bool, dict)")
    if info.get("is_action_valid", True):
        _fail("invalid-action", "a nonsense action was reported as valid (info['is_action_valid'])")


def check_seed_determinism(env: TextEnv, seed: int, n_steps: int) -> None:
    a = _rollout(env, seed, n_steps, _random_picker(seed))
    b = _rollout(env, seed, n_steps, _random_picker(seed))
    if a != b:
        _fail("seed-determinism", f"two episodes with seed {seed} and the same actions differ")


def check_snapshot_restore(env: TextEnv, seed: int, n_steps: int) -> None:
    if not env.can_snapshot:
        return
    pick = _random_picker(seed + 1)
    obs, info = env.reset(seed=seed)
    actions: list[str] = []
    for i in range(n_steps // 2):
        act = pick(list(info.get("admissible_actions") or ["look"]), i)
        obs, _, term, trunc, info = env.step(act)
        actions.append(act)
        if term or trunc:
            break
    snap, key, info_at = env.snapshot(), env.state_key(), info

    def tail() -> list[tuple]:
        pick_tail, out, inf = _random_picker(seed + 2), [], info_at
        for i in range(n_steps - len(actions)):
            act = pick_tail(list(inf.get("admissible_actions") or ["look"]), i)
            o, r, te, tr, inf = env.step(act)
            out.append((act, o, r, te, tr, bool(inf.get("won")), env.state_key()))
            if te or tr:
                break
        return out

    first = tail() if not (term or trunc) else []
    env.reset(seed=seed + 12345)  # wander off, then come back
    env.restore(snap)
    if env.state_key() != key:
        _fail("snapshot-restore", "state_key() after restore(snapshot) differs from when it was taken")
    second = tail() if not (term or trunc) else []
    if first != second:
        _fail("snapshot-restore", "the same actions after restore(snapshot) gave different results")


def check_env(env: TextEnv, seeds: tuple[int, ...] = (0, 1, 2), n_steps: int = 30) -> None:
    """Run every contract check on ``env``; raise ``ContractError`` on the first broken rule."""
    if not isinstance(env, TextEnv):
        _fail("type", f"{type(env).__name__} is not a prover.envs.TextEnv")
    for seed in seeds:
        check_reset(env, seed)
        check_step_types(env, seed)
        check_seed_determinism(env, seed, n_steps)
        check_snapshot_restore(env, seed, n_steps)
