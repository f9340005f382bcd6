"""An env served over OpenEnv's protocol, played by URL: ``env.name=openenv env.kwargs.url=http://HOST:PORT``.

Each instance holds one WebSocket session of the server (OpenEnv's own client, ``GenericEnvClient`` of
openenv-core, the ``openenv`` extra), so the server must allow as many sessions as the run has env
instances (``prover serve-env --max-sessions``). ``reset`` sends ``seed`` and ``options`` (the rollout's
``{"split": ...}``) plus ``reset_kwargs``; a step sends ``{action_key: text}``.

What comes back is read as ``prover serve-env`` writes it (``prover.commands.openenv_bridge``), and as plainly as
possible otherwise: the observation's ``text_key`` field (else the whole observation as JSON) is the text,
its ``admissible_actions``, ``task`` and ``info`` fields are used where present, ``terminated`` and
``truncated`` where present (else OpenEnv's ``done`` is a termination), and the episode is won by the
``success`` rule (``prover.envs.success``; under ``auto`` a prover server's ``info["won"]``).

A remote env's determinism is the server's to promise, so ``openenv`` takes no snapshots and the
branching credit methods refuse it; ``openenv-deterministic`` snapshots by replay over the network (a
restore resets with the snapshot's seed and replays its actions), as ``gymnasium-deterministic`` does.
Every call is bounded: ``connect_timeout_s`` to open the session, ``message_timeout_s`` for each answer.
A server that cannot be reached or refuses a call is one line (``EnvFaultError`` in an episode, which the
rollout counts as an env error; ``ConfigError`` when the first session cannot be opened).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable, Hashable
from typing import Annotated, Any, ParamSpec, TypeVar

from pydantic import Field

from prover.envs.base import TextEnv
from prover.envs.success import SuccessRule
from prover.errors import ConfigError, EnvFaultError

T = TypeVar("T")
P = ParamSpec("P")

INSTALL_HINT = "pip install -c constraints/cpu.txt -e '.[openenv]' (openenv-core==0.3.0)"
Seconds = Annotated[float, Field(gt=0, le=3600)]


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


class OpenEnvTextEnv(TextEnv):
    """An OpenEnv server's env, by URL (see the module docstring). ``state_key`` is the episode's history."""

    deterministic = False
    can_snapshot = False

    def __init__(self, *, url: str, deterministic: bool = False, connect_timeout_s: Seconds = 10.0,
                 message_timeout_s: Seconds = 60.0, action_key: str = "text", text_key: str = "text",
                 success: str = "auto", reset_kwargs: dict[str, Any] | None = None) -> None:
        if importlib.util.find_spec("openenv") is None:
            raise ConfigError(f"env 'openenv' needs openenv-core, which is not installed: {INSTALL_HINT}")
        if not isinstance(url, str) or not url.startswith(("http://", "https://", "ws://", "wss://")):
            raise ConfigError(f"env 'openenv': url={url!r} is not an http(s):// or ws(s):// address of an OpenEnv "
                              "server (e.g. http://127.0.0.1:8000, as `prover serve-env` prints it)")
        # openenv-core is an optional extra: imported only when an env of it is made
        from openenv.core.generic_client import GenericEnvClient

        self.url, self.action_key, self.text_key = url, action_key, text_key
        self.reset_kwargs = dict(reset_kwargs or {})
        self.success = SuccessRule(success, f"openenv env at {url}")
        self.deterministic = self.can_snapshot = bool(deterministic)  # this instance's, over the class's
        self._client = GenericEnvClient(base_url=url, connect_timeout_s=connect_timeout_s,
                                        message_timeout_s=message_timeout_s).sync()
        try:
            self._client.connect()
        except Exception as exc:  # noqa: BLE001 - any failure to reach the server is the same one line
            self._client.close()
            raise ConfigError(f"env 'openenv': cannot open a session at {url}: {_one_line(exc)}") from None
        self._moves: list[str] = []
        self._task = ""

    def _call(self, what: str, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - a server's refusal, a timeout, a closed session: one line
            raise EnvFaultError(f"openenv env at {self.url}: {what} failed: {_one_line(exc)}") from None

    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        result = self._call("reset", self._client.reset, seed=seed, options=dict(options), **self.reset_kwargs)
        obs = result.observation or {}
        text = self._text(obs)
        self._task, self._moves = str(obs.get("task") or text), []
        return text, self._info(obs, None)

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        result = self._call("step", self._client.step, {self.action_key: action})
        obs = result.observation or {}
        reward = float(result.reward or 0.0)
        terminated = bool(obs.get("terminated", result.done))
        truncated = bool(obs.get("truncated", False))
        self._moves.append(action)
        info = self._info(obs, (reward, terminated))
        if terminated or truncated:
            self.success.tell_once()
        return self._text(obs), reward, terminated, truncated, info

    def _text(self, obs: dict) -> str:
        text = obs.get(self.text_key)
        return text if isinstance(text, str) else json.dumps(obs, sort_keys=True, default=str)

    def _info(self, obs: dict, step: tuple[float, bool] | None) -> dict:
        """prover's info from the observation; ``step``: the (reward, terminated) of a step, which alone can win."""
        inner = obs.get("info") if isinstance(obs.get("info"), dict) else {}
        info = dict(inner)
        info["task"] = self._task
        info["won"] = step is not None and self.success.won(*step, inner)
        info["is_action_valid"] = bool(inner.get("is_action_valid", True))
        if isinstance(obs.get("admissible_actions"), list):
            info["admissible_actions"] = [str(a) for a in obs["admissible_actions"]]
        return info

    def state_key(self) -> Hashable:
        return self._replay_seed, json.dumps(self._replay_options, sort_keys=True, default=str), tuple(self._moves)

    def close(self) -> None:
        self._client.close()


class DeterministicOpenEnvTextEnv(OpenEnvTextEnv):
    """``openenv-deterministic``: the user vouches that the server's env is deterministic, so it snapshots by
    replay. The flags are class-level because config checks read them from the class."""

    deterministic = True
    can_snapshot = True

    def __init__(self, *, url: str, connect_timeout_s: Seconds = 10.0, message_timeout_s: Seconds = 60.0,
                 action_key: str = "text", text_key: str = "text", success: str = "auto",
                 reset_kwargs: dict[str, Any] | None = None) -> None:
        super().__init__(url=url, deterministic=True, connect_timeout_s=connect_timeout_s,
                         message_timeout_s=message_timeout_s, action_key=action_key, text_key=text_key,
                         success=success, reset_kwargs=reset_kwargs)
