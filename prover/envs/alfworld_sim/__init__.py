"""``alfworld-sim``: ALFWorld's text game on procedurally generated rooms, in pure Python.

``alfred`` holds ALFWorld's tables as data and ``rules_v1`` the sim's first ones, ``rules`` builds a
rule set from either, ``world`` draws tasks and rooms, ``engine`` holds the dynamics and the text,
``expert`` plans shortest solutions, ``prompts`` holds the agent-facing presets and ``env`` ties them
into a ``TextEnv``.
"""

from prover.envs.alfworld_sim.env import AlfworldSimEnv, AlfworldSimV1Env
from prover.envs.alfworld_sim.world import TASK_TYPES

__all__ = ["TASK_TYPES", "AlfworldSimEnv", "AlfworldSimV1Env"]
