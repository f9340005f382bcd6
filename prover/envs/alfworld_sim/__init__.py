"""``alfworld-sim``: ALFWorld's text game on procedurally generated rooms, in pure Python.

``world`` draws tasks and rooms, ``engine`` holds the rules and the text, ``expert`` plans shortest
solutions, ``prompts`` holds the agent-facing presets and ``env`` ties them into a ``TextEnv``.
"""

from prover.envs.alfworld_sim.env import AlfworldSimEnv
from prover.envs.alfworld_sim.world import TASK_TYPES

__all__ = ["AlfworldSimEnv", "TASK_TYPES"]
