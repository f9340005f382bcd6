"""Gymnasium interop, both ways.

**prover envs in Gymnasium.** Importing this module registers every prover env name (built-ins and the
``prover.envs`` plugins installed) in Gymnasium's registry under the namespace ``prover``, so that
``gymnasium.make("prover.envs.gym:prover/alfworld-sim-v1")`` works with no other import (Gymnasium imports
the module named before the colon), as does ``gymnasium.make("prover/alfworld-sim-v1")`` after
``import prover.envs.gym``. Gymnasium 1.x, which prover requires, no longer loads plugins from an
entry-point group (0.26-0.29's ``gymnasium.envs`` group is gone), hence the import.

Gymnasium ids need a version; prover names map as follows (``gymnasium_ids``):
- a name that ends in ``-vN`` keeps it: ``alfworld-sim-v1`` is ``prover/alfworld-sim-v1``;
- a name without one gets ``-v0``, unless versioned names of the same family exist, then one more than
  the highest of them: prover's unversioned name is its current env (``alfworld-sim`` follows newer tables
  than ``alfworld-sim-v1``), and so is Gymnasium's unversioned id, which resolves to the highest version.
  So ``alfworld-sim`` is ``prover/alfworld-sim-v2`` and ``webshop-sim`` is ``prover/webshop-sim-v0``.
Every id is built through ``prover.envs.make_env`` (plugin contract checks, one-line errors); the entry
point is a string, so registering imports no env.

**Gymnasium envs in prover.** ``GymnasiumTextEnv`` (env name ``gymnasium``) runs any registered Gymnasium
env whose observations are text as a prover ``TextEnv``: ``env.name=gymnasium env.kwargs.id=<gym id>``, the
other ``env.kwargs`` going to ``gymnasium.make``. An env that a package registers when it is imported
(MiniGrid and most third-party envs) is named ``<module>:<gym id>``, as ``gymnasium.make`` reads it: prover
imports no package on a guess. Observations that are not text (a Dict, an array) become text through
``obs_to_text=<module>:<function>``, a function of (observation, the Gymnasium env) that returns a str.
Actions are text (a ``Text`` space, passed through) or a ``Discrete`` choice, shown as the env's
``action_names`` (``env.kwargs.action_names``, else the env's attribute, or ALE's ``get_action_meanings()``),
else as the integers, and matched back
case-insensitively. An episode is won by the rule ``success`` sets (``prover.envs.success``; by default
the env's ``info["won"]`` or ``info["is_success"]``, else a terminating step with a positive reward), and
the first episode's end prints which rule decided. The task shown in every prompt is the reset's
``info["task"]``, else the first observation's text. The warm start's expert is the wrapped env's
``unwrapped.expert_action()``, when it has one, returning an action (a Discrete index or its text).
prover cannot know whether a foreign env is deterministic,
so snapshots are off unless the user says so: ``deterministic=True`` turns on replay snapshots (the seed and
the actions so far; a restore re-makes the env, resets it with the seed and replays). The name
``gymnasium-deterministic`` is that env with the flag fixed on at class level, which is what the config
check of branching credit methods (ProVer, SPO) reads.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable
from typing import Annotated, Any

import gymnasium
from gymnasium import spaces
from pydantic import Field

from prover.envs import make_env
from prover.envs.base import TextEnv
from prover.envs.success import SuccessRule
from prover.errors import ConfigError, ContractError
from prover.registry import ENVS, load_target, split_target

NAMESPACE = "prover"
ENTRY_POINT = "prover.envs.gym:make_prover_env"
VERSIONED = re.compile(r"^(?P<family>.+)-v(?P<version>0|[1-9]\d*)$")  # as Gymnasium parses an id's version
# the characters Gymnasium allows in a name, less ':' (its "module:id" separator in make)
GYM_NAME = re.compile(r"^[\w.-]+$")
Success = Annotated[str, Field(description=(
    "When an episode counts as won: auto (info['won'] or info['is_success'] where the env sets one, else a "
    "terminating step with a positive reward), info:KEY, terminated, or reward>=X (prover/envs/success.py)."))]
ActionNames = Annotated[list[str] | None, Field(description=(
    "The text of each action of a Discrete space, in order (e.g. [left,down,right,up]); None: the env's "
    "action_names or ALE's action meanings, else the numbers."))]
TaskText = Annotated[str | None, Field(description=(
    "The task every prompt shows, for an env whose reset info has no 'task'; None: the first observation."))]
ObsToText = Annotated[str | None, Field(description=(
    "module:function that writes each observation as text, called as function(observation, gym_env) -> str: "
    "for envs whose observations are not text (a Dict, an array); None passes text observations through."))]


def gymnasium_ids(names: list[str]) -> dict[str, str]:
    """The Gymnasium id of each prover env name (see the module docstring); names Gymnasium cannot spell
    (a '/', ':' or space in them) are left out."""
    highest: dict[str, int] = {}
    for name in names:
        match = VERSIONED.match(name)
        if match:
            family, version = match["family"], int(match["version"])
            highest[family] = max(version, highest.get(family, -1))
    ids = {}
    for name in names:
        if not GYM_NAME.match(name):
            continue
        suffix = "" if VERSIONED.match(name) else f"-v{highest.get(name, -1) + 1}"
        ids[name] = f"{NAMESPACE}/{name}{suffix}"
    return ids


def make_prover_env(prover_env: str, **kwargs: object) -> TextEnv:
    """Gymnasium's entry point for every ``prover/...`` id: the prover env ``prover_env`` built with ``kwargs``."""
    return make_env(prover_env, **kwargs)


def _is_adapter(target: object) -> bool:
    """Whether a registry target is this module's adapter (a Gymnasium env wrapped back into Gymnasium)."""
    if isinstance(target, str):
        return target.partition(":")[0] == __name__
    return isinstance(target, type) and issubclass(target, GymnasiumTextEnv)


def register_gymnasium_envs() -> dict[str, str]:
    """Register every prover env name in Gymnasium's registry; returns {prover name: Gymnasium id}.
    Safe to call again (an id already registered by this function is kept); an id that something else
    registered first is left alone and missing from the result."""
    names = [entry.name for entry in ENVS.entries() if not _is_adapter(entry.target)]
    done = {}
    for name, gym_id in gymnasium_ids(names).items():
        ours = {"entry_point": ENTRY_POINT, "kwargs": {"prover_env": name}}
        spec = gymnasium.registry.get(gym_id)
        if spec is None:
            try:
                gymnasium.register(id=gym_id, **ours)
            except gymnasium.error.RegistrationError:  # an unversioned id of the family is someone else's
                continue
        elif (spec.entry_point, spec.kwargs) != (ours["entry_point"], ours["kwargs"]):
            continue
        done[name] = gym_id
    return done


def _make_gym_env(gym_id: str, gym_kwargs: dict[str, Any]) -> gymnasium.Env:
    """``gymnasium.make`` with its failures (unknown id, unknown module, bad arguments) as one line."""
    if not isinstance(gym_id, str) or not gym_id:
        raise ConfigError(f"env 'gymnasium' needs id=<a registered Gymnasium env id>, got {gym_id!r}")
    try:
        return gymnasium.make(gym_id, **gym_kwargs)
    except (gymnasium.error.Error, ModuleNotFoundError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        hint = ""
        if isinstance(exc, gymnasium.error.UnregisteredEnv) and ":" not in gym_id:
            # most third-party envs register when their package is imported, which only module:id triggers
            hint = (f"; if a package registers it on import, name the package too: "
                    f"env.kwargs.id=<module>:{gym_id} (e.g. minigrid:MiniGrid-Empty-5x5-v0)")
        raise ConfigError(f"env 'gymnasium': cannot make Gymnasium env {gym_id!r}: {first}{hint}") from exc
    except TypeError as exc:
        raise ConfigError(f"env 'gymnasium': Gymnasium env {gym_id!r} rejected its arguments "
                          f"{sorted(gym_kwargs)}: {exc}") from exc


def _load_obs_to_text(spec: str) -> Callable[[Any, gymnasium.Env], str]:
    """The function ``spec`` (``module:function``) names; ConfigError in one line when it names none."""
    target = split_target(spec)
    if target is None:
        raise ConfigError(f"env 'gymnasium': obs_to_text={spec!r} is not of the form module:function")
    try:
        fn = load_target(*target)
    except Exception as exc:  # noqa: BLE001  (any failure of the user's module is reported as theirs)
        raise ConfigError(f"env 'gymnasium': obs_to_text={spec!r} does not load: "
                          f"{type(exc).__name__}: {' '.join(str(exc).split())}") from None
    if not callable(fn):
        raise ConfigError(f"env 'gymnasium': obs_to_text={spec!r} is a {type(fn).__name__}, not a function")
    return fn


def _discrete_names(env: gymnasium.Env, space: spaces.Discrete, gym_id: str, given: list[str] | None) -> list[str]:
    """The text of each action of ``space``, in order: ``given`` (env.kwargs.action_names), else the env's
    names for them, else the integers."""
    inner = env.unwrapped
    names = given if given is not None else getattr(inner, "action_names", None)
    if names is None and callable(getattr(inner, "get_action_meanings", None)):
        names = inner.get_action_meanings()
    if names is None:
        return [str(int(space.start) + i) for i in range(int(space.n))]
    names = [str(n).strip() for n in names]
    if len(names) != int(space.n) or len({n.lower() for n in names}) != len(names) or "" in names:
        whose = "env.kwargs.action_names" if given is not None else "its action_names"
        raise ConfigError(f"env 'gymnasium': Gymnasium env {gym_id!r} has {int(space.n)} actions, and {whose} "
                          f"{_clip_names(names)} are not that many distinct, non-empty names")
    return names


def _clip_names(names: list[str]) -> str:
    shown = repr(names)
    return shown if len(shown) <= 120 else f"{shown[:117]}..."


def _may_be_text(space: spaces.Space) -> bool:
    """Text, or a space defined outside Gymnasium (which may hold strings); Gymnasium's others hold none."""
    return isinstance(space, spaces.Text) or not type(space).__module__.startswith("gymnasium.")


class GymnasiumTextEnv(TextEnv):
    """A registered Gymnasium env with text observations, as a prover env (see the module docstring).

    An invalid action (a Discrete name it does not have, or text outside its Text space) is a no-op that
    repeats the current observation. ``state_key`` is the episode's history (seed, options, accepted
    actions): a black box shows no state, and for a deterministic env the history fixes it."""

    deterministic = False
    can_snapshot = False

    def __init__(self, *, id: str, deterministic: bool = False, obs_to_text: ObsToText = None,
                 success: Success = "auto", action_names: ActionNames = None, task: TaskText = None,
                 **gym_kwargs: object) -> None:
        self.gym_id = id
        self._task_text = task
        self.success = SuccessRule(success, f"gymnasium env {id!r}")
        self._gym_kwargs = dict(gym_kwargs)
        self._obs_to_text = _load_obs_to_text(obs_to_text) if obs_to_text is not None else None
        self._obs_to_text_name = obs_to_text
        self._env = _make_gym_env(id, self._gym_kwargs)
        self.deterministic = self.can_snapshot = bool(deterministic)  # this instance's, over the class's
        if self._obs_to_text is None and not _may_be_text(self._env.observation_space):
            self._env.close()
            raise ConfigError(f"env 'gymnasium': Gymnasium env {id!r} has observations "
                              f"{self._env.observation_space}; it needs text ones (a Text space), or "
                              "env.kwargs.obs_to_text=<module>:<function> to write them as text")
        space = self._env.action_space
        self._names: list[str] | None = None  # a Discrete env's action texts, in the order of its actions
        if isinstance(space, spaces.Discrete):
            self._names = _discrete_names(self._env, space, id, action_names)
            self._start = int(space.start)
            self._by_text = {name.lower(): self._start + i for i, name in enumerate(self._names)}
        elif not isinstance(space, spaces.Text) or action_names is not None:
            self._env.close()
            if action_names is not None:
                raise ConfigError(f"env 'gymnasium': action_names names the actions of a Discrete space; "
                                  f"Gymnasium env {id!r} has actions {space}")
            raise ConfigError(f"env 'gymnasium': Gymnasium env {id!r} has actions {space}; only Text and "
                              "Discrete action spaces can be written as text")
        if self._obs_to_text is None and isinstance(self._env.observation_space, spaces.Text):
            self.observation_space = self._env.observation_space
        self._obs = self._task = ""
        self._last_info: dict = {}
        self._moves: list[Any] = []  # the actions the Gymnasium env was given this episode

    @property
    def gym_env(self) -> gymnasium.Env:
        """The Gymnasium env this one runs (a new object after each ``restore``)."""
        return self._env

    def _text(self, obs: object, method: str) -> str:
        if self._obs_to_text is not None:
            text = self._obs_to_text(obs, self._env)
            if not isinstance(text, str):
                raise ContractError(f"obs_to_text {self._obs_to_text_name!r} returned a {type(text).__name__} "
                                    f"for the observation of {self.gym_id!r} from {method}(); it must return a str")
            return text
        if not isinstance(obs, str):
            raise ContractError(f"Gymnasium env {self.gym_id!r} returned a {type(obs).__name__} observation "
                                f"from {method}(); the 'gymnasium' env needs text observations")
        return obs

    def _info(self, inner: dict, valid: bool, step: tuple[float, bool] | None = None) -> dict:
        """prover's info from the Gymnasium env's; ``step``: the (reward, terminated) of a step it took, the
        only kind of turn that can win (a reset or a refused action wins nothing)."""
        info = dict(inner)
        info["task"] = self._task
        info["won"] = step is not None and self.success.won(*step, inner)
        info["is_action_valid"] = valid and bool(inner.get("is_action_valid", True))
        if self._names is not None:
            info["admissible_actions"] = sorted(self._names)
        elif inner.get("admissible_actions") is not None:
            info["admissible_actions"] = sorted(str(a) for a in inner["admissible_actions"])
        return info

    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        # prover's rollout asks for a "split"; a Gymnasium env has none (its tasks differ by seed)
        options = {k: v for k, v in options.items() if k != "split"}
        obs, info = self._env.reset(seed=seed, options=options or None)
        self._obs = self._text(obs, "reset")
        self._task = str(info.get("task", self._task_text if self._task_text is not None else self._obs))
        self._last_info, self._moves = dict(info), []
        return self._obs, self._info(self._last_info, valid=True)

    def _gym_action(self, action: str) -> Any:
        """The Gymnasium action that ``action`` names, or None when it names none."""
        if self._names is not None:
            return self._by_text.get(" ".join(str(action).split()).lower())
        return action if self._env.action_space.contains(action) else None

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        gym_action = self._gym_action(action)
        if gym_action is None:
            return self._obs, 0.0, False, False, self._info(self._last_info, valid=False)
        obs, reward, terminated, truncated, info = self._env.step(gym_action)
        self._obs = self._text(obs, "step")
        self._last_info = dict(info)
        self._moves.append(gym_action)
        out = self._info(self._last_info, True, (float(reward), bool(terminated)))
        if terminated or truncated:
            self.success.tell_once()
        return self._obs, float(reward), bool(terminated), bool(truncated), out

    def state_key(self) -> Hashable:
        return self._replay_seed, self._replay_options, tuple(self._moves)

    def restore(self, snapshot: object) -> None:
        """Re-make the Gymnasium env, so that nothing a reset leaves behind survives, then replay."""
        self._require_snapshots()
        self._env.close()
        self._env = _make_gym_env(self.gym_id, self._gym_kwargs)
        super().restore(snapshot)

    def expert_action(self) -> str | None:
        """The wrapped env's ``expert_action()``, when it has one, as text."""
        expert = getattr(self._env.unwrapped, "expert_action", None)
        choice = expert() if callable(expert) else None
        if choice is None or isinstance(choice, str) or self._names is None:
            return choice if choice is None else str(choice)
        return self._names[int(choice) - self._start]

    def gold(self) -> str:
        gold = getattr(self._env.unwrapped, "gold", None)
        return str(gold()) if callable(gold) else ""

    def close(self) -> None:
        self._env.close()


class DeterministicGymnasiumTextEnv(GymnasiumTextEnv):
    """``gymnasium-deterministic``: the user vouches that the env is deterministic, so it snapshots by
    replay. The flags are class-level because config checks read them from the class."""

    deterministic = True
    can_snapshot = True

    def __init__(self, *, id: str, obs_to_text: ObsToText = None, success: Success = "auto",
                 action_names: ActionNames = None, task: TaskText = None, **gym_kwargs: object) -> None:
        super().__init__(id=id, deterministic=True, obs_to_text=obs_to_text, success=success,
                         action_names=action_names, task=task, **gym_kwargs)


register_gymnasium_envs()
