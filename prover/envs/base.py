"""The env contract: a text ``gymnasium.Env`` that can say who it is and go back in time.

An env is a ``TextEnv`` subclass. It implements ``_reset`` and ``_step``; the public ``reset`` and
``step`` here record what a replay snapshot needs and then call them.

``EnvContract`` below is the spec, method by method (``reset``, ``step``, ``state_key``, ``snapshot``,
``restore`` and the optional ones): what the rollout, the brancher and ``check_env`` rely on. The registry
refuses, when it loads an env, a class that leaves ``_reset``, ``_step`` or ``state_key`` unimplemented.

Text: the observation, ``info["task"]`` and each admissible action are ``str`` of valid Unicode. Any
character is allowed (non-ASCII text such as Sokoban's '√', accented product titles, CJK, emoji); a lone
surrogate (U+D800-U+DFFF, what ``bytes.decode(errors="surrogateescape")`` leaves for an undecodable byte)
is not, because no tokenizer can encode it: decode an engine's bytes with ``errors="replace"``. An answer
holding one ends its episode as an env error naming the text (``prover.envs.text``).

Capability flags (class attributes): ``deterministic`` (same seed and actions give the same
episode), ``can_snapshot`` (snapshot/restore work; False refuses branching credit methods at config
time), ``native_snapshot`` (snapshot is a cheap copy, not a replay), ``uses_global_rng`` (the env draws
from the process-wide ``random`` or ``np.random``: prover then gives each instance its own copy of them,
``prover.envs.global_rng``; ``env.isolate_global_rng: true`` does the same for a class that does not say),
``expert_follows_plan`` (``expert_action`` follows a fixed plan, e.g. a gold path, and returns None once
an action off it was taken: the warm start ends such an episode there).

Settings: the constructor's keyword arguments, set as ``env.kwargs.*`` and checked when the config loads
against ``Config``, a pydantic model the base class (``prover.plugin_config.Configurable``) derives from
the constructor's signature unless the env declares one.

``train_recipe`` (class attribute): dotted config settings with which the tiny policy learns this env,
e.g. ``{"warmstart.episodes": 3000}``. When ``model.path`` is ``tiny``, ``load_config`` applies each one
that the user's file and overrides leave unset, so ``prover train env.name=<env>`` starts from a
setting that works. A recipe that depends on the env's settings comes from the classmethod
``train_recipe_for(kwargs) -> dict`` (optional; ``kwargs`` are ``env.kwargs`` as written, defaults not
filled in), which updates ``train_recipe``; e.g. the warm start only for the games that have an expert.

Agent-facing text lives with the env as data: ``agent_spec`` holds the prompt templates, the history
window and the action parser, shared exactly between an embedded env and the real benchmark.

``check_env`` in ``prover.envs.checker`` tests all of the above.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

import gymnasium as gym
from gymnasium import spaces

from prover.envs.agent_spec import AgentSpec
from prover.errors import CapabilityError, ContractError
from prover.plugin_config import Configurable
from prover.registry import required
from prover.types import Trajectory

MAX_TEXT = 1 << 16
TEXT_CHARSET = frozenset(chr(i) for i in range(32, 127)) | {"\n", "\t"}


@dataclass(frozen=True)
class ReplaySnapshot:
    """The default snapshot: enough to rebuild the state by replaying from the reset."""

    seed: int
    options: tuple
    actions: tuple[str, ...]


EnvInfo = dict[str, Any]  # a step's info: won, is_action_valid, admissible_actions, task, and the env's own keys


@runtime_checkable
class EnvContract(Protocol):
    """The env contract, method by method (Gymnasium's ``reset`` and ``step``, plus identity and time travel).
    Capability flags, settings and the agent-facing text are in the module docstring."""

    deterministic: bool
    can_snapshot: bool
    agent_spec: AgentSpec

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, EnvInfo]:
        """Start a task: ``(obs, info)``. ``seed`` picks the task and seeds the env's RNG: the same seed
        gives the same observation, info and dynamics. ``options`` may carry ``{"split": "train" | "test"}``.
        ``obs`` is the text the agent sees first; it contains the task. ``info`` has ``task`` (the task
        text), ``admissible_actions`` (sorted list of str, for envs that have them), ``won`` (False) and
        ``is_action_valid`` (True)."""
        ...

    def step(self, action: str) -> tuple[str, float, bool, bool, EnvInfo]:
        """Apply one action string: ``(obs, reward, terminated, truncated, info)``. ``obs`` is the env's
        feedback text; ``reward`` a float. ``terminated`` is True when the episode ended inside the env
        (goal reached or a terminal action); ``truncated`` when the env's own step cap was reached.
        ``info["won"]`` says whether the task was achieved; ``info["is_action_valid"]`` whether the env
        accepted the action (an invalid action is a no-op, never an exception);
        ``info["admissible_actions"]`` lists the next choices. After ``terminated or truncated`` the caller
        must ``reset`` before stepping again; a step before any reset raises ``ContractError``."""
        ...

    def state_key(self) -> Hashable:
        """A hashable identity of the true state (not the text: "Nothing happens." is many states). Two envs
        with equal keys behave identically from here on. GiGPO groups by it."""
        ...

    def snapshot(self) -> object:
        """An exact copy of the env state, RNG included, independent of the env object and of later steps.
        Raises ``CapabilityError`` when ``can_snapshot`` is False, ``ContractError`` before a reset."""
        ...

    def restore(self, snapshot: object) -> None:
        """Return to ``snapshot`` (from this env class's ``snapshot``): after it, the same actions give the
        same observations, rewards, infos and state keys as they did after the snapshot was taken. The
        default replays the reset seed and options and the actions so far, which works for any env whose
        dynamics depend only on them; an env overrides both methods with a native copy when replay is slow.
        Raises ``ContractError`` for an object that is no snapshot of this env."""
        ...

    def expert_action(self) -> str | None:
        """An oracle's next action from the current state, or None if the env has no expert (or, with
        ``expert_follows_plan``, none from here: an earlier action left its plan). The warm start clones it."""
        ...

    def corpus_env(self) -> EnvContract | None:
        """A fast env whose agent-facing text is this env's (the same prompts, task phrasing, entity names and
        feedback), whose episodes build the tiny tokenizer's corpus in place of this env's own; None (the
        default): this env plays the corpus itself. A real engine that is slow to reset returns its embedded
        stand-in, so that building a tokenizer does not take minutes of engine time."""
        ...

    def pivotal_turns(self, trajectory: Trajectory) -> list[int] | None:
        """Diagnostics only: the turns of a recorded ``Trajectory`` at which the decision taken changed the
        best achievable success (the env's docstring gives its exact definition), found by search over the
        env's true states; None (the default) when the env cannot tell. Never shown to the agent or a judge:
        the trainer scores the judge's proposals against it (``truth/...`` metrics). Must not change this
        env's state."""
        ...

    def gold(self) -> str:
        """Privileged reference for critics, never shown to the agent: the gold answer or a description of
        the goal state of the current task ("" when the env has none). Read right after reset."""
        ...


class TextEnv(gym.Env, Configurable):
    """Base class of every prover env (``EnvContract`` is the spec). Subclasses implement ``_reset``,
    ``_step`` and ``state_key``."""

    # class attributes that a wrapper over another framework's env (gym.py, openenv_remote.py) sets per instance
    deterministic: bool = True
    can_snapshot: bool = True
    native_snapshot: ClassVar[bool] = False
    uses_global_rng: ClassVar[bool] = False
    expert_follows_plan: ClassVar[bool] = False
    agent_spec: AgentSpec = AgentSpec()  # an env whose prompts follow its settings sets its own in __init__
    train_recipe: ClassVar[dict[str, Any]] = {}

    observation_space = spaces.Text(max_length=MAX_TEXT, charset=TEXT_CHARSET)
    action_space = spaces.Text(max_length=MAX_TEXT, charset=TEXT_CHARSET)

    _replay_seed: int | None = None
    _replay_options: tuple = ()
    _replay_actions: list[str]

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        if seed is None:  # replay needs a concrete seed: draw one from the env's own RNG
            seed = int(self.np_random.integers(0, 2**31 - 1))
            super().reset(seed=seed)
        self._replay_seed = seed
        self._replay_options = tuple(sorted((options or {}).items()))
        self._replay_actions = []
        return self._reset(seed, dict(options or {}))

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._replay_seed is None:
            raise ContractError(f"{type(self).__name__}.step() called before reset()")
        self._replay_actions.append(action)
        return self._step(action)

    # -- what a subclass implements ------------------------------------------------------------
    @required
    def _reset(self, seed: int, options: dict) -> tuple[str, EnvInfo]:
        """``reset`` with a concrete seed and the options as a dict: ``(obs, info)``."""
        raise NotImplementedError

    @required
    def _step(self, action: str) -> tuple[str, float, bool, bool, EnvInfo]:
        """``step`` after its bookkeeping: ``(obs, reward, terminated, truncated, info)``."""
        raise NotImplementedError

    @required
    def state_key(self) -> Hashable:
        raise NotImplementedError

    # -- snapshots -----------------------------------------------------------------------------
    def snapshot(self) -> object:
        """Replay snapshot by default; ``EnvContract.snapshot`` is the contract."""
        self._require_snapshots()
        if self._replay_seed is None:
            raise ContractError(f"{type(self).__name__}.snapshot() called before reset()")
        return ReplaySnapshot(self._replay_seed, self._replay_options, tuple(self._replay_actions))

    def restore(self, snapshot: object) -> None:
        self._require_snapshots()
        if not isinstance(snapshot, ReplaySnapshot):
            raise ContractError(f"{type(self).__name__}.restore() got {type(snapshot).__name__}, "
                                "expected a ReplaySnapshot from this env's snapshot()")
        self.reset(seed=snapshot.seed, options=dict(snapshot.options))
        for action in snapshot.actions:
            self.step(action)

    def replay_record(self) -> tuple:
        """What the replay snapshot knows (seed, options, actions); native snapshots carry it along so
        that a restored env can still take a replay snapshot or be restored again."""
        return self._replay_seed, self._replay_options, tuple(self._replay_actions)

    def set_replay_record(self, record: tuple) -> None:
        seed, options, actions = record
        self._replay_seed, self._replay_options, self._replay_actions = seed, options, list(actions)

    def _require_snapshots(self) -> None:
        if not self.can_snapshot:
            raise CapabilityError(f"env {type(self).__name__} cannot snapshot (can_snapshot=False); "
                                  "use a credit method that does not branch")

    # -- optional ------------------------------------------------------------------------------
    def expert_action(self) -> str | None:
        """An oracle's next action from the current state, or None if the env has no expert (or, with
        ``expert_follows_plan``, none from here: an earlier action left its plan)."""
        return None

    def corpus_env(self) -> TextEnv | None:
        """A fast env with this env's agent-facing text, for the tiny tokenizer's corpus; None: this env."""
        return None

    def pivotal_turns(self, trajectory: Trajectory) -> list[int] | None:
        """Diagnostics only: the pivotal turns of a recorded trajectory (see the module docstring), or None
        when the env cannot tell. Must not change this env's state."""
        return None

    def gold(self) -> str:
        """Privileged reference for critics, never shown to the agent: the gold answer or a description
        of the goal state of the current task ("" when the env has none). Read right after reset."""
        return ""
