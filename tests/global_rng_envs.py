"""Test envs that draw from the process-wide RNGs, as GEM's and TextArena's games do.

``DiceEnv`` seeds ``random`` and ``np.random`` in reset, as ``gem.Env.reset`` does, and draws a die from
``random`` and a wind from ``np.random`` at every roll: each instance alone is reproducible, several in
lockstep are not. ``NativeDiceEnv`` snapshots by copying its fields (the RNG not among them).
``SharedCounterEnv`` shares a class attribute across instances instead, which no RNG isolation cures.
"""

from __future__ import annotations

import random
from typing import ClassVar

import numpy as np

from prover.envs.base import TextEnv

TARGET = 12  # the score that wins


class DiceEnv(TextEnv):
    """Roll until the score reaches TARGET (won) or stop (not listed, so that random play keeps rolling);
    each roll adds a die and a wind of -1, 0 or 1."""

    def __init__(self, max_steps: int = 8) -> None:
        self.max_steps = max_steps
        self.score = self.steps = 0

    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        random.seed(seed)
        np.random.seed(seed)
        self.score = self.steps = 0
        return "Roll the dice to reach 12.", self._info(False, True)

    def _info(self, won: bool, valid: bool) -> dict:
        return {"task": "Roll the dice to reach 12.", "won": won, "is_action_valid": valid,
                "admissible_actions": ["roll", "roll again"]}

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if action not in ("roll", "roll again", "stop"):
            return "Nothing happens.", 0.0, False, False, self._info(False, False)
        self.steps += 1
        if action == "stop":
            return f"You stop at {self.score}.", 0.0, True, False, self._info(False, True)
        die, wind = random.randint(1, 6), int(np.random.randint(-1, 2))
        self.score += die + wind
        won = self.score >= TARGET
        return (f"You roll {die} (wind {wind:+d}): {self.score}.", float(won), won, self.steps >= self.max_steps,
                self._info(won, True))

    def state_key(self) -> tuple:
        return (self.score, self.steps)


class NativeDiceEnv(DiceEnv):
    native_snapshot = True

    def snapshot(self) -> tuple:
        return self.score, self.steps, self.replay_record()

    def restore(self, snapshot: tuple) -> None:
        self.score, self.steps, record = snapshot
        self.set_replay_record(record)


class DeclaredDiceEnv(DiceEnv):
    """The author's one line: prover keeps this class's global RNGs per instance."""

    uses_global_rng = True


class SharedCounterEnv(DiceEnv):
    """Rolls come from a counter every instance shares (a class attribute), reset with the episode."""

    shared_rolls: ClassVar[list[int]] = [0]

    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        SharedCounterEnv.shared_rolls[0] = seed
        return super()._reset(seed, options)

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if action not in ("roll", "roll again"):
            return super()._step(action)
        self.steps += 1
        SharedCounterEnv.shared_rolls[0] += 1
        self.score += SharedCounterEnv.shared_rolls[0] % 6 + 1
        won = self.score >= TARGET
        return f"{self.score}.", float(won), won, self.steps >= self.max_steps, self._info(won, True)
