"""A prover env as an OpenEnv ``Environment`` (openenv-core 0.3.0), served by ``prover serve-env``.

OpenEnv's server (``openenv/core/env_server/http_server.py``, ``HTTPEnvServer``) builds one environment per
WebSocket session (``/ws``) from a factory and calls its ``reset(**data)``, ``step(action)`` and ``state``;
the types are pydantic models deriving from ``Action``, ``Observation`` and ``State``
(``openenv/core/env_server/types.py``). This module supplies them for any registered prover env:

- ``EnvAction``: ``text``, the action string sent to the env as it is (an admissible action's text).
- ``EnvObservation``: ``text`` (the env's observation), ``prompt`` (the prompt prover's own policy would see
  for the next turn: the env's ``agent_spec`` rendering the task, the observation, the admissible actions and
  the history window; "" once the episode is over), ``task``, ``admissible_actions``, ``info`` (the env's
  info, made JSON-plain), ``terminated``, ``truncated``, and OpenEnv's ``reward`` and ``done``
  (terminated or truncated). ``pivotal_turns`` is set on the step that ends an episode, for an env that knows
  them (``TextEnv.pivotal_turns``, e.g. pivot-sim): 0-based turn indices. Like prover's ``truth/`` metrics it
  is ground truth for diagnostics, never to be shown to the policy.
- ``EnvState``: OpenEnv's ``episode_id`` and ``step_count``, plus the env's name, the reset's seed and
  options, ``done``, ``won`` and ``state_key`` (the env's ``state_key()`` as text).

OpenEnv's ``serialize_observation`` (``openenv/core/env_server/serialization.py``) leaves ``metadata`` out of
what goes over the wire, so the info travels in its own field, ``info``; ``metadata`` holds the same dict for
in-process users.

``reset`` takes OpenEnv's ``seed`` and ``episode_id`` plus prover's ``options`` (e.g. ``{"split": "test"}``)
and ``split`` (shorthand for ``options={"split": ...}``); any other argument is refused, so that a misspelt
one is not silently dropped (the server passes every argument through because ``reset`` takes ``**kwargs``).
The bounds are training's: a seed from 0 to 2**31 - 1 (``prover.seeding``), options holding ``split`` only
(what the rollout passes), and an action no longer than the env's action space allows
(``TextEnv.action_space``, 65 536 characters). Each refusal is one line (a ``ConfigError``).
"""

from __future__ import annotations

import uuid
from typing import Any, cast

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field

from prover.envs import make_env
from prover.envs.base import TextEnv
from prover.errors import ConfigError, ContractError
from prover.seeding import RUN_SEED_MAX, RUN_SEED_RULE
from prover.types import Trajectory, Turn

RESET_ARGUMENTS = ("seed", "episode_id", "split", "options")
RESET_OPTIONS = ("split",)  # what the rollout passes an env's reset
EPISODE_ID_CHARS = 255  # OpenEnv's own bound on its HTTP reset's episode_id


class EnvAction(Action):
    """One action of a prover env."""

    text: str = Field(description="The action string sent to the env (an admissible action's text).")


class EnvObservation(Observation):
    """What a prover env answered, with the prompt prover's policy would see next."""

    text: str = Field("", description="The env's observation text.")
    prompt: str = Field("", description="The next turn's prompt as the env's agent_spec renders it "
                        "(task, observation, admissible actions, history window); '' once the episode is over.")
    task: str = Field("", description="The task text (the reset's info['task'], else its observation).")
    admissible_actions: list[str] = Field(default_factory=list, description="The env's next choices.")
    info: dict[str, Any] = Field(default_factory=dict, description="The env's info dict, JSON-plain.")
    terminated: bool = Field(False, description="The episode ended inside the env (goal or terminal action).")
    truncated: bool = Field(False, description="The env's own step cap was reached.")
    pivotal_turns: list[int] | None = Field(None, description="On the step that ends the episode, the env's "
                                            "pivotal turns of it (0-based), when the env knows them; never a "
                                            "policy input.")


class EnvState(State):
    """The session's episode: OpenEnv's id and step count, and what prover knows of it."""

    env_name: str = Field("", description="The registered prover env name.")
    seed: int | None = Field(None, description="The reset's seed (drawn by the env when none was given).")
    options: dict[str, Any] = Field(default_factory=dict, description="The reset's options.")
    done: bool = Field(False, description="The episode has ended; reset before stepping again.")
    won: bool = Field(False, description="The env's info['won'] after the last step.")
    state_key: str | None = Field(None, description="repr of the env's state_key(); None before a reset.")


def plain(value: object) -> object:
    """``value`` as JSON can carry it: mappings with text keys, lists, text, numbers, booleans, None;
    a numpy scalar as its Python number, anything else as its ``str``."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    item = getattr(value, "item", None)  # numpy scalars
    return plain(item()) if callable(item) and not isinstance(value, type) else str(value)


def _size(value: object) -> str:
    return f"{len(value)} characters" if isinstance(value, str) else type(value).__name__


def reset_options(seed: object, episode_id: object, split: object, options: object) -> dict[str, Any]:
    """The options of a reset, once its arguments are within training's bounds (one line if not)."""
    if episode_id is not None and (not isinstance(episode_id, str) or len(episode_id) > EPISODE_ID_CHARS):
        raise ConfigError(f"reset episode_id: give text of at most {EPISODE_ID_CHARS} characters, not "
                          f"{_size(episode_id)}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= RUN_SEED_MAX):
        shown = repr(seed) if len(repr(seed)) <= 40 else f"{repr(seed)[:40]}..."
        raise ConfigError(f"reset seed {shown}: {RUN_SEED_RULE} (or none, and the env draws one)")
    if options is not None and not isinstance(options, dict):
        raise ConfigError(f"reset options: give a mapping, e.g. {{\"split\": \"test\"}}, not {type(options).__name__}")
    unknown = sorted(str(k)[:40] for k in (options or {}) if k not in RESET_OPTIONS)
    if unknown:
        raise ConfigError(f"reset options {unknown[:5]} unknown; options hold {', '.join(RESET_OPTIONS)} only")
    options = dict(options or {}) | ({"split": split} if split is not None else {})
    if not isinstance(options.get("split", ""), str):
        raise ConfigError(f"reset split: give a name such as \"test\", not {type(options['split']).__name__}")
    return options


class ProverEnvironment(Environment[EnvAction, EnvObservation, EnvState]):
    """One session's prover env. Each session builds its own env, so sessions run side by side."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, name: str, env_kwargs: dict[str, Any] | None = None, env: TextEnv | None = None) -> None:
        super().__init__()
        self.name = name
        self.env = env if env is not None else make_env(name, **(env_kwargs or {}))
        self._state = EnvState(env_name=name)
        self._task = ""
        self._split = "train"
        self._turns: list[Turn] = []
        self._obs = ""

    def reset(self, seed: int | None = None, episode_id: str | None = None, split: str | None = None,
              options: dict[str, Any] | None = None, **unknown: object) -> EnvObservation:
        if unknown:
            raise ConfigError(f"reset got unknown argument(s) {sorted(unknown)}; it takes {', '.join(RESET_ARGUMENTS)}")
        options = reset_options(seed, episode_id, split, options)
        obs, info = self.env.reset(seed=seed, options=options)
        drawn = self.env.replay_record()[0]  # the seed the env used, drawn by it when none was given
        self._task, self._split = str(info.get("task", obs)), str(options.get("split", "train"))
        self._turns, self._obs = [], obs
        self._state = EnvState(episode_id=episode_id or uuid.uuid4().hex, step_count=0, env_name=self.name,
                               seed=drawn, options=plain(options), done=False, won=bool(info.get("won", False)),
                               state_key=repr(self.env.state_key()))
        return self._observation(obs, None, False, False, info)

    def step(self, action: EnvAction, timeout_s: float | None = None, **kwargs: object) -> EnvObservation:
        if self._state.seed is None:
            raise ContractError(f"{self.name}: step before reset; call reset first")
        if self._state.done:
            raise ContractError(f"{self.name}: the episode is over (done); call reset before stepping again")
        most = getattr(self.env.action_space, "max_length", None)
        if not isinstance(action.text, str) or (most is not None and len(action.text) > most):
            raise ConfigError(f"{self.name}: an action is text of at most {most} characters (the env's action "
                              f"space), not {_size(action.text)}")
        before_key = self.env.state_key()
        history = tuple((t.observation, t.action) for t in self._turns)
        obs, reward, terminated, truncated, info = self.env.step(action.text)
        self._turns.append(Turn(prompt_ids=[], completion_ids=[], logprobs=[], observation=self._obs,
                                completion_text=action.text, action=action.text, format_valid=True,
                                action_valid=bool(info.get("is_action_valid", True)), reward=float(reward),
                                state_key=before_key, history=history))
        self._obs = obs
        done = bool(terminated or truncated)
        self._state.step_count += 1
        self._state.done, self._state.won = done, bool(info.get("won", False))
        self._state.state_key = repr(self.env.state_key())
        observation = self._observation(obs, float(reward), bool(terminated), bool(truncated), info)
        if done:
            observation.pivotal_turns, error = self._pivotal_turns(bool(truncated))
            if error:
                observation.info = observation.metadata = observation.info | {"pivotal_turns_error": error}
        return observation

    @property
    def state(self) -> EnvState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        doc = (type(self.env).__doc__ or "").strip().split("\n\n")[0]
        return EnvironmentMetadata(name=self.name, description=" ".join(doc.split()) or f"prover env {self.name}")

    def close(self) -> None:
        self.env.close()

    def _observation(self, obs: str, reward: float | None, terminated: bool, truncated: bool,
                     info: dict) -> EnvObservation:
        actions = [str(a) for a in info.get("admissible_actions") or []]
        done = terminated or truncated
        history = [(t.observation, t.action) for t in self._turns]
        prompt = "" if done else self.env.agent_spec.render(self._task, obs, actions, history, len(self._turns))
        carried = cast(dict, plain(info))  # a dict in, a dict out
        return EnvObservation(text=obs, prompt=prompt, task=self._task, admissible_actions=actions, info=carried,
                              terminated=terminated, truncated=truncated, reward=reward, done=done, metadata=carried)

    def _pivotal_turns(self, truncated: bool) -> tuple[list[int] | None, str]:
        """The env's pivotal turns of the episode just ended, and '' (or None and why it failed)."""
        task_id = f"{self._split}/{self._state.seed}"  # the rollout's task id, which pivot-sim replays
        trajectory = Trajectory(traj_id=self._state.episode_id or task_id, task_id=task_id, task_text=self._task,
                                turns=list(self._turns), won=self._state.won, truncated=truncated)
        try:
            turns = self.env.pivotal_turns(trajectory)
        except Exception as exc:  # noqa: BLE001 - a diagnostic's failure is reported, the step still answers
            return None, f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        return (None if turns is None else sorted(int(t) for t in turns)), ""
