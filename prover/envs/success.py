"""When an episode of a foreign env (Gymnasium, OpenEnv) counts as won: one rule, set in one place.

prover's envs say ``info["won"]``; other libraries say it in other ways, or only through the reward. The
rule is a string (``env.kwargs.success``):

- ``auto`` (the default): the env's ``info["won"]``, else its ``info["is_success"]`` (Gymnasium-Robotics'
  goal envs), on a step whose info has either; on any other step, a step that terminates
  the episode with a positive reward (a reached goal, as MiniGrid's ``1 - 0.9 * steps / max_steps`` and
  FrozenLake's 1 are). A step cut off by a time limit (truncated) is never a win under it.
- ``info:KEY``: the truth of ``info[KEY]`` (False when the key is missing).
- ``terminated``: a terminating step with a positive reward, whatever the info says.
- ``reward>=X``: a step whose reward is at least the number ``X``, terminating or not.

``SuccessRule.won`` names which of them decided (``SuccessRule.used``), so that the adapter can say, once,
which rule its episodes are scored by.
"""

from __future__ import annotations

import math
import re
import sys
from typing import Any

from prover.errors import ConfigError

WIN_KEYS = ("won", "is_success")  # prover's name for success, then the common Gymnasium one
RULES = "auto, info:KEY, terminated or reward>=X"
REWARD_AT_LEAST = re.compile(r"^reward\s*>=\s*(?P<x>[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?)$")
INFO_KEY = re.compile(r"^info:(?P<key>[\w.-]{1,64})$")
_TOLD: set[tuple[str, str]] = set()  # (who, rule) pairs whose rule was printed in this process


class SuccessRule:
    """A parsed ``success`` setting; ``won(reward, terminated, info)`` applies it to one step. ``who`` names
    the env in its lines (e.g. "gymnasium env 'FrozenLake-v1'")."""

    def __init__(self, spec: str, who: str) -> None:
        if not isinstance(spec, str):
            raise ConfigError(f"{who}: success={spec!r} is not one of {RULES}")
        self.spec, self.who = spec.strip(), who
        self.key: str | None = None
        self.threshold: float | None = None
        if (match := INFO_KEY.match(self.spec)) is not None:
            self.key = match["key"]
        elif (match := REWARD_AT_LEAST.match(self.spec)) is not None:
            self.threshold = float(match["x"])
        elif self.spec not in ("auto", "terminated"):
            shown = repr(spec) if len(repr(spec)) <= 60 else f"{repr(spec)[:60]}..."
            raise ConfigError(f"{who}: success={shown} is not one of {RULES} (e.g. info:is_success "
                              "or reward>=0.5)")
        if self.threshold is not None and not math.isfinite(self.threshold):
            raise ConfigError(f"{who}: success={spec!r} needs a finite reward")
        self.used = ""

    def won(self, reward: float, terminated: bool, info: dict[str, Any]) -> bool:
        """Whether this step wins the episode; ``used`` is set to the rule that decided."""
        if self.key is not None:
            self.used = f"info[{self.key!r}]"
            return bool(info.get(self.key, False))
        if self.threshold is not None:
            self.used = f"reward >= {self.threshold:g}"
            return reward >= self.threshold
        present = next((k for k in WIN_KEYS if k in info), None) if self.spec == "auto" else None
        if present is not None:
            self.used = f"info[{present!r}]"
            return bool(info[present])
        self.used = "terminated with a positive reward"
        return bool(terminated) and reward > 0

    def tell_once(self) -> None:
        """Print, once per process for this env and rule, which rule scored an episode's end."""
        if not self.used or (self.who, self.used) in _TOLD:
            return
        _TOLD.add((self.who, self.used))
        print(f"note: {self.who}: an episode counts as won by {self.used} (success={self.spec}; "
              f"env.kwargs.success sets the rule: {RULES})", file=sys.stderr, flush=True)
