"""``check_env``: one named check per rule of the env contract (see ``prover/envs/base.py``).

Every env, built-in or plugin, is run through this in the tests. A failure raises ``ContractError``
naming the rule that broke, the field that differed and the step where it did, on one line.
"""

from __future__ import annotations

import numbers
import random
import time
import warnings
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from prover.envs.base import TextEnv
from prover.envs.checker_lockstep import check_reset_lockstep, check_restore_lockstep, second_instance
from prover.envs.text import text_problem
from prover.errors import ContractError

DOCS = "see the env contract in prover/envs/base.py"
NONSENSE = "do a barrel roll"
# what a state's future is made of, in the order of the tuple ``_outcome`` builds
FUTURE_FIELDS = ("obs", "reward", "terminated", "won", "is_action_valid", "admissible_actions")
KEY_EPISODES = 4  # random episodes per seed that look for equal keys with different futures
KEY_HORIZON = 5  # steps of future compared per pair of equal keys
KEY_PAIRS = 30  # pairs compared per seed, at most
KEY_PAIRS_PER_KEY = 3  # so that a state revisited in a loop does not use up the pairs
GYM_PRIVATE = ("_replay", "_np_random")  # attribute prefixes that ``_plain_fields`` leaves out


def _fail(rule: str, msg: str) -> None:
    raise ContractError(f"check_env [{rule}]: {msg} ({DOCS})")


def _clip(text: str, n: int = 160) -> str:
    text = " ".join(text.split())  # one line, whatever the env's text or exception holds
    return text if len(text) <= n else text[:n - 3] + "..."


def _short(value: object, n: int = 80) -> str:
    return _clip(repr(value), n)


def _step(env: TextEnv, action: str, where: str) -> tuple:
    """``env.step`` where an exception becomes a ContractError naming the action and the step."""
    try:
        return env.step(action)
    except Exception as exc:  # any exception out of step() breaks the contract
        rule, hint = ("step", "")
        if action == NONSENSE:
            rule, hint = "invalid-action", "; an invalid action must be a no-op with is_action_valid False"
        _fail(rule, f"step({action!r}) at {where} raised {type(exc).__name__}: {_clip(str(exc))}{hint}")
        raise  # unreachable: _fail raises


def _actions(info: dict) -> list[str]:
    return list(info.get("admissible_actions") or ["look"])


def _rollout(env: TextEnv, seed: int, n_steps: int, pick: Callable[[list[str], int], str],
             options: dict | None = None) -> list[tuple]:
    obs, info = env.reset(seed=seed, options=options)
    trace: list[tuple] = [(obs, env.state_key(), tuple(info.get("admissible_actions") or ()))]
    for i in range(n_steps):
        action = pick(_actions(info), i)
        obs, rew, term, trunc, info = _step(env, action, f"step {i + 1} of seed {seed}")
        _check_text(obs, info, f"step {i + 1} of seed {seed}")
        trace.append((action, obs, rew, term, trunc, bool(info.get("won")),
                      env.state_key(), tuple(info.get("admissible_actions") or ())))
        if term or trunc:
            break
    return trace


def _random_picker(seed: int) -> Callable[[list[str], int], str]:
    rng = random.Random(seed)
    return lambda actions, i: rng.choice(actions) if rng.random() > 0.1 else NONSENSE


def _check_text(obs: object, info: object, where: str) -> None:
    if problem := text_problem(obs, info):
        _fail("text", f"{where}: {problem}")


def check_reset(env: TextEnv, seed: int) -> None:
    obs, info = env.reset(seed=seed)
    if not isinstance(obs, str):
        _fail("reset-types", f"reset() returned obs of type {type(obs).__name__}, expected str")
    _check_text(obs, info, f"reset(seed={seed})")
    for key in ("won", "is_action_valid"):
        if key not in info:
            _fail("reset-info", f"reset() info lacks {key!r}")
    hash(env.state_key())


def _nonsense(env: TextEnv, seed: int, step: int) -> tuple:
    """Step the nonsense action as step number ``step``; it must be answered, and reported invalid."""
    where = f"step {step} of seed {seed}"
    out = _step(env, NONSENSE, where)
    if not isinstance(out, tuple) or len(out) != 5:
        _fail("step-types", f"step() at {where} returned {_short(out)}, expected 5 values")
    obs, rew, _, _, info = out
    if not isinstance(obs, str) or not isinstance(rew, (int, float)) or not isinstance(info, dict):
        _fail("step-types", f"step() at {where} must return (str, float, bool, bool, dict)")
    if info.get("is_action_valid", True):
        _fail("invalid-action", f"a nonsense action at {where} was reported as valid "
              "(info['is_action_valid'])")
    return out


def check_step_types(env: TextEnv, seed: int) -> None:
    """A nonsense action right after reset and again after one real action (a later state)."""
    env.reset(seed=seed)
    *_, term, trunc, info = _nonsense(env, seed, 1)
    if term or trunc:
        return
    *_, term, trunc, _ = _step(env, _actions(info)[0], f"step 2 of seed {seed}")
    if not (term or trunc):
        _nonsense(env, seed, 3)


def check_seed_determinism(env: TextEnv, seed: int, n_steps: int, twin: TextEnv | None = None) -> list[tuple]:
    """The same seed and actions give the same episode, twice alone and (with ``twin``) in lockstep with
    another instance, as a rollout steps a group (``prover.envs.checker_lockstep``). Returns the episode."""
    a = _rollout(env, seed, n_steps, _random_picker(seed))
    b = _rollout(env, seed, n_steps, _random_picker(seed))
    if a != b:
        _fail("seed-determinism", f"two episodes with seed {seed} and the same actions differ")
    if twin is not None:
        check_reset_lockstep(env, twin, seed, n_steps, _random_picker, _step, _fail)
    return a


def blind_steps(trace: list[tuple]) -> tuple[int, int]:
    """(steps chosen where the env listed no admissible actions, steps) of a ``_rollout`` episode: there the
    checks had nothing to choose from and sent ``look`` (or their nonsense action)."""
    listed = [trace[0][-1]] + [entry[-1] for entry in trace[1:-1]]  # what each step chose from
    return sum(not actions for actions in listed), len(trace) - 1


def _plain_fields(env: TextEnv) -> dict[str, Any]:
    """The env's plain-valued attributes (counters, flags, names): a restore brings each one back.
    Containers and objects are left out (caches may legitimately grow); the replay record has its own
    check, and gymnasium's seed bookkeeping is not state (the RNG itself is compared through behaviour)."""
    return {k: v for k, v in vars(env).items()
            if isinstance(v, (numbers.Number, str, type(None))) and not k.startswith(GYM_PRIVATE)}


def _check_restored(env: TextEnv, record: tuple, fields: dict[str, Any], key: Hashable, where: str) -> None:
    """Right after ``restore``: the replay record, every plain attribute and the state key are back."""
    now = env.replay_record()
    for i, name in ((2, "actions"), (0, "seed"), (1, "options")):  # the actions first: what replay needs most
        then, got = record[i], now[i]
        if then != got:
            _fail("snapshot-restore", f"restore() lost the replay record: replay_record() field {name!r} "
                  f"is {_short(got)} after restore, but was {_short(then)} when the snapshot was taken at "
                  f"{where} (a native restore must call set_replay_record with its snapshot's record)")
    after = _plain_fields(env)
    for name, then in fields.items():
        got = after.get(name, "<missing>")
        if got != then and got is not then:  # identity too, so that a NaN kept as it was passes
            _fail("snapshot-restore", f"attribute {name!r} is {_short(got)} after restore(snapshot), but was "
                  f"{_short(then)} when the snapshot was taken at {where}")
    if env.state_key() != key:
        _fail("snapshot-restore", f"state_key() after restore(snapshot) differs from when it was taken "
              f"at {where}")


def check_snapshot_restore(env: TextEnv, seed: int, n_steps: int, twin: TextEnv | None = None) -> None:
    """A restore brings the state back (its fields, its key, its future), and (with ``twin``) the snapshot
    restored into two instances stepped in lockstep plays the same future in each."""
    if not env.can_snapshot:
        return
    pick = _random_picker(seed + 1)
    _, info = env.reset(seed=seed)
    actions: list[str] = []
    term = trunc = False
    for i in range(n_steps // 2):
        act = pick(_actions(info), i)
        _, _, term, trunc, info = _step(env, act, f"step {i + 1} of seed {seed}")
        actions.append(act)
        if term or trunc:
            break
    where = f"step {len(actions)} of seed {seed}"
    snap, key, info_at = env.snapshot(), env.state_key(), info
    record, fields = env.replay_record(), _plain_fields(env)

    def tail() -> list[tuple]:
        pick_tail, out, inf = _random_picker(seed + 2), [], info_at
        for i in range(n_steps - len(actions)):
            act = pick_tail(_actions(inf), i)
            o, r, te, tr, inf = _step(env, act, f"step {len(actions) + i + 1} of seed {seed}")
            out.append((act, o, r, te, tr, bool(inf.get("won")), env.state_key()))
            if te or tr:
                break
        return out

    first = tail() if not (term or trunc) else []
    env.reset(seed=seed + 12345)  # wander off, then come back
    env.restore(snap)
    _check_restored(env, record, fields, key, where)
    second = tail() if not (term or trunc) else []
    if first != second:
        _fail("snapshot-restore", f"the same actions after restore(snapshot) taken at {where} gave "
              "different results")
    if twin is not None and not (term or trunc):
        check_restore_lockstep(env, twin, snap, info_at, where, n_steps - len(actions),
                               lambda: _random_picker(seed + 2), _step, _fail)


def _outcome(step_out: tuple) -> tuple:
    obs, rew, term, _, info = step_out
    return (obs, float(rew), bool(term), bool(info.get("won")), info.get("is_action_valid"),
            tuple(info.get("admissible_actions") or ()))


def _future(env: TextEnv, snap: object, actions: list[str] | None, info: dict, seed: int) -> tuple[list, list]:
    """Restore ``snap`` and play ``actions`` (or, when None, pick them at random); stop at the first end.
    Returns (actions played, outcomes). A truncated step is played but not kept: keys may leave out the
    step count on purpose (GiGPO groups the same state across turns), so truncation may come at different
    steps, and an env may answer a truncated step differently (no admissible actions left)."""
    env.restore(snap)
    pick, played, outcomes = _random_picker(seed), [], []
    for i in range(KEY_HORIZON if actions is None else len(actions)):
        act = pick(_actions(info), i) if actions is None else actions[i]
        out = _step(env, act, f"step {i + 1} after a restore (seed {seed})")
        played.append(act)
        if out[3]:
            break
        outcomes.append(_outcome(out))
        info = out[4]
        if out[2]:
            break
    return played, outcomes


def _compare_futures(env: TextEnv, key: Hashable, a: tuple, b: tuple, seed: int) -> None:
    """Two states with equal keys must answer the same actions identically."""
    (snap_a, info_a, where_a), (snap_b, info_b, where_b) = a, b
    same_key = f"{where_a} and {where_b} share state_key {_short(key, 60)}"
    if tuple(info_a.get("admissible_actions") or ()) != tuple(info_b.get("admissible_actions") or ()):
        _fail("state-key", f"state_key() leaves out part of the state: {same_key}, but their field "
              "'admissible_actions' differs at step 0 of the continuation (before any action): "
              f"{_short(info_a.get('admissible_actions'))} vs {_short(info_b.get('admissible_actions'))}")
    actions, fut_a = _future(env, snap_a, None, info_a, seed)
    _, fut_b = _future(env, snap_b, actions, info_b, seed)
    for i, (out_a, out_b) in enumerate(zip(fut_a, fut_b)):  # an end shows as a 'terminated' that differs
        for name, va, vb in zip(FUTURE_FIELDS, out_a, out_b):
            if va != vb:
                _fail("state-key", f"state_key() leaves out part of the state: {same_key}, but after the "
                      f"same actions {_short(actions[:i + 1], 120)} their field {name!r} differs at step "
                      f"{i + 1} of the continuation: {_short(va)} vs {_short(vb)}")


def _explore(env: TextEnv, seed: int, n_steps: int, deadline: float) -> list[tuple]:
    """Random episodes of ``seed``; returns (key, first visit, later visit) for states that share a key
    but were reached by different histories, each visit a (snapshot, info, where)."""
    first: dict[Hashable, tuple] = {}
    uses: dict[Hashable, int] = {}
    pairs: list[tuple] = []
    for episode in range(KEY_EPISODES):
        pick = _random_picker(seed * 7919 + episode)
        _, info = env.reset(seed=seed)
        for i in range(n_steps):
            if time.monotonic() > deadline or len(pairs) >= KEY_PAIRS:
                return pairs
            where = f"seed {seed} episode {episode} step {i + 1}"
            out = _step(env, pick(_actions(info), i), where)
            info = out[4]
            if out[2] or out[3]:
                break
            key = env.state_key()
            if key not in first:
                first[key], uses[key] = (env.snapshot(), info, where), 0
            elif uses[key] < KEY_PAIRS_PER_KEY:
                uses[key] += 1
                pairs.append((key, first[key], (env.snapshot(), info, where)))
    return pairs


def check_state_key(env: TextEnv, seed: int, n_steps: int, budget_s: float = 1.0) -> None:
    """Equal keys must mean equal futures: compare states that share a key, reached by different paths.
    Bounded by ``budget_s`` seconds, so slow envs are sampled rather than explored."""
    if not env.can_snapshot:
        return
    deadline = time.monotonic() + budget_s
    for key, a, b in _explore(env, seed, n_steps, deadline):
        if time.monotonic() > deadline:
            return
        _compare_futures(env, key, a, b, seed)


def check_corpus_env(env: TextEnv) -> None:
    """``corpus_env()`` is None or a TextEnv that prompts the agent exactly as ``env`` does."""
    twin = env.corpus_env()
    if twin is None:
        return
    if not isinstance(twin, TextEnv):
        _fail("corpus_env", f"corpus_env() returned a {type(twin).__name__}, not a prover.envs.TextEnv")
    if twin.agent_spec != env.agent_spec:
        _fail("corpus_env", "corpus_env()'s agent_spec differs from the env's: its text would train a "
                            "tokenizer on prompts the agent never sees")


@dataclass(frozen=True)
class EnvCheckReport:
    """What ``check_env_report`` ran: ``checks`` passed, and of the ``steps`` its random episodes chose,
    the ``blind`` ones where the env listed no admissible actions (so the checks sent ``look``)."""

    checks: int
    steps: int
    blind: int

    def blind_line(self, name: str) -> str:
        """One line saying how little of the game was played, or '' when the checks had actions to choose."""
        if not self.blind:
            return ""
        return (f"{name}: the env listed no admissible actions at {self.blind} of the {self.steps} steps the checks "
                "chose, so they sent 'look' there and the game itself went untested; list the actions in "
                "info['admissible_actions'] (a Discrete Gymnasium env gets them from its action names)")


def check_env(env: TextEnv, seeds: tuple[int, ...] = (0, 1, 2), n_steps: int = 30,
              key_budget_s: float = 1.0, make_twin: Callable[[], TextEnv] | None = None) -> int:
    """Run every contract check on ``env``; raise ``ContractError`` on the first broken rule.
    Returns the number of checks that ran (the snapshot checks are skipped when ``can_snapshot`` is False).
    ``make_twin`` builds the second instance the lockstep checks step alongside ``env`` (default: a deep
    copy of ``env``); they count with seed-determinism and snapshot-restore."""
    return check_env_report(env, seeds, n_steps, key_budget_s, make_twin).checks


def check_env_report(env: TextEnv, seeds: tuple[int, ...] = (0, 1, 2), n_steps: int = 30,
                     key_budget_s: float = 1.0, make_twin: Callable[[], TextEnv] | None = None) -> EnvCheckReport:
    """``check_env``, and how many of its steps had admissible actions to choose from."""
    if not isinstance(env, TextEnv):
        _fail("type", f"{type(env).__name__} is not a prover.envs.TextEnv")
    check_corpus_env(env)
    twin = second_instance(env, make_twin, _fail)
    count = steps = blind = 0
    for seed in seeds:
        check_reset(env, seed)
        check_step_types(env, seed)
        seed_blind, seed_steps = blind_steps(check_seed_determinism(env, seed, n_steps, twin))
        blind, steps, count = blind + seed_blind, steps + seed_steps, count + 3
        if env.can_snapshot:
            check_snapshot_restore(env, seed, n_steps, twin)
            check_state_key(env, seed, n_steps, key_budget_s)
            count += 2
    if make_twin is not None:  # ours to close (a deep copy shares nothing worth closing)
        twin.close()
    return EnvCheckReport(1 + count, steps, blind)


def check_gymnasium(env: TextEnv) -> int:
    """gymnasium's own env checker, its warnings taken as failures (as the tests take them); returns 1."""
    # lazy: gymnasium's checker, which only check-env runs
    from gymnasium.utils.env_checker import check_env as gymnasium_check_env

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the checker reports most problems as warnings
            gymnasium_check_env(env, skip_render_check=True)
    except Exception as exc:  # noqa: BLE001 - its assertions and warnings alike are failures
        _fail("gymnasium", f"gymnasium's env checker: {type(exc).__name__}: {_clip(str(exc), 200)}")
    return 1
