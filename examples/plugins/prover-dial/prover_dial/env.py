"""Dial: a dial shows 0 to 9; turn it to the task's number, then press the button.

Made by `prover new env dial`: a small env that keeps the whole env contract (prover/envs/base.py),
with a native snapshot, a state key, an expert for the warm start and a training recipe. Replace the dial
with your task and keep `pytest tests` passing; docs/plugins.md in prover explains each part.
"""

from __future__ import annotations

import random
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, ClassVar

from prover.envs import AgentSpec, TextEnv
from prover.errors import ConfigError, ContractError

SPLITS = ("train", "test")
ACTIONS = ("press button", "turn left", "turn right")  # sorted, as info["admissible_actions"] must be


@dataclass(frozen=True)
class DialSnapshot:
    """Every field the state is made of, and the replay record (so that a restored env can snapshot again)."""

    split: str
    seed: int
    target: int
    dial: int
    steps: int
    done: bool
    record: tuple


class DialEnv(TextEnv):
    """A dial shows 0 to 9 and starts at 0; turning wraps around. Reward 1.0 and ``terminated`` when the
    button is pressed with the dial at the task's number; ``truncated`` after ``max_steps``. A press at
    another number is valid and changes nothing; any other text is an invalid no-op that uses a step."""

    native_snapshot = True  # snapshot() copies a few fields instead of replaying every action
    # Settings with which the tiny policy learns this env: `prover train env.name=dial` applies each one
    # that the user's config leaves unset (only with model.path=tiny).
    train_recipe: ClassVar[dict[str, Any]] = {"rollout.max_turns": 12, "warmstart.episodes": 300}
    # The agent's prompt, as data. Short: a tiny model reads every token of it on every turn.
    agent_spec = AgentSpec(
        first_template="Task: {task}\nObservation: {observation}\nActions: {actions}",
        later_template=("Task: {task}\nHistory:\n{history}\nObservation: {observation}\n"
                        "Actions: {actions}"),
        history_entry="{observation} > {action}",
    )
    dial: int | None = None  # None until the first reset

    def __init__(self, max_steps: int = 12) -> None:
        if max_steps < 1:
            raise ConfigError(f"dial max_steps must be >= 1, got {max_steps}")
        self.max_steps = max_steps

    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        split = options.get("split", "train")
        if split not in SPLITS:
            raise ConfigError(f"dial split must be one of {SPLITS}, got {split!r}")
        # The task follows from the seed and split alone: the replay record and check_env rely on it.
        self.split, self.seed = split, seed
        self.target = random.Random(f"{split}/{seed}").randint(1, 9)
        self.dial, self.steps, self.done = 0, 0, False
        return f"{self._task()} The dial shows 0.", self._info(valid=True, won=False)

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self.done:
            raise ContractError("DialEnv.step() after the episode ended; call reset() first")
        self.steps += 1
        act = " ".join(action.lower().split())
        won = act == "press button" and self.dial == self.target
        if act in ("turn left", "turn right"):
            self.dial = (self.dial + (1 if act == "turn right" else -1)) % 10
            obs = f"The dial shows {self.dial}."
        elif act == "press button":
            obs = "The lock opens. You win!" if won else f"Nothing happens. The dial shows {self.dial}."
        else:  # an invalid action is a no-op, never an exception
            obs = f"You can't do that. The dial shows {self.dial}."
        truncated = not won and self.steps >= self.max_steps
        self.done = won or truncated
        return obs, float(won), won, truncated, self._info(valid=act in ACTIONS, won=won)

    def state_key(self) -> Hashable:
        """(target, dial): all that decides what the same actions do from here. The seed only picks the
        target, and the step count is left out so that GiGPO groups the same state across turns."""
        return (self.target, self.dial)

    def snapshot(self) -> DialSnapshot:
        if self.dial is None:
            raise ContractError("DialEnv.snapshot() called before reset()")
        return DialSnapshot(
            self.split, self.seed, self.target, self.dial, self.steps, self.done, self.replay_record())

    def restore(self, snapshot: DialSnapshot) -> None:
        if not isinstance(snapshot, DialSnapshot):
            got = type(snapshot).__name__
            raise ContractError(f"DialEnv.restore() got {got}, expected a DialSnapshot")
        s = snapshot
        self.split, self.seed, self.target, self.dial, self.steps, self.done = (
            s.split, s.seed, s.target, s.dial, s.steps, s.done)
        self.set_replay_record(s.record)

    def expert_action(self) -> str | None:
        """The shortest way to the number, then the button: what the warm start clones."""
        if self.dial is None or self.done:
            return None
        if self.dial == self.target:
            return "press button"
        return "turn right" if (self.target - self.dial) % 10 <= 5 else "turn left"

    def _task(self) -> str:
        return f"Turn the dial to {self.target} and press the button."

    def _info(self, valid: bool, won: bool) -> dict:
        actions = [] if self.done else list(ACTIONS)
        return {"task": self._task(), "admissible_actions": actions, "won": won, "is_action_valid": valid}
