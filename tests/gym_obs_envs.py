"""Gymnasium envs whose observations are not text, for tests/test_gym_interop.py, and the functions that
write them as text (``env.kwargs.obs_to_text=gym_obs_envs:<function>``).

Importing this module registers ``prover-test/DictCorridor-v0``, as a third-party package (MiniGrid) registers
its envs on import: the id is found only after the import, which ``gym_obs_envs:prover-test/DictCorridor-v0``
asks ``gymnasium.make`` to do.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium
import numpy as np
from gymnasium import spaces

DICT_CORRIDOR = "prover-test/DictCorridor-v0"


class DictCorridor(gymnasium.Env):
    """Cells 0..5; the walker starts at cell 0 and the goal is cell 3 + seed % 3. Observation: a Dict of
    the walker's cell, the goal cell and the mission text. Actions: Discrete(2), named back and forward.
    Reaching the goal: reward 1, terminated, is_success. Deterministic."""

    metadata: ClassVar[dict] = {"render_modes": []}
    observation_space = spaces.Dict({"pos": spaces.Discrete(6), "goal": spaces.Discrete(6),
                                     "mission": spaces.Text(max_length=40, charset="abcdefghijklmnopqrstuvwxyz ")})
    action_space = spaces.Discrete(2)
    action_names = ("back", "forward")

    def _obs(self) -> dict[str, Any]:
        return {"pos": self.pos, "goal": self.goal, "mission": "reach the goal cell"}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self.pos, self.goal = 0, 3 + (seed or 0) % 3
        return self._obs(), {}

    def step(self, action: int) -> tuple[dict, float, bool, bool, dict]:
        self.pos = min(5, max(0, self.pos + (-1, 1)[action]))
        won = self.pos == self.goal
        return self._obs(), float(won), won, False, {"is_success": won}


def corridor_text(obs: dict[str, Any], env: gymnasium.Env) -> str:
    return f"You are in cell {obs['pos']} of 0-5; {obs['mission']}: cell {obs['goal']}."


def cartpole_text(obs: np.ndarray, env: gymnasium.Env) -> str:
    """CartPole's (position, velocity, angle, angular velocity) array, two decimals each."""
    x, v, angle, spin = (float(a) for a in obs)
    return f"cart {x:+.2f} m moving {v:+.2f} m/s; pole {angle:+.2f} rad turning {spin:+.2f} rad/s"


def not_text(obs: Any, env: gymnasium.Env) -> list:
    return [obs]


NOT_A_FUNCTION = 3

gymnasium.register(DICT_CORRIDOR, entry_point=DictCorridor)
