"""``pivot-sim``: a corridor of irreversible choices whose pivotal turns are known exactly.

``world`` draws tasks and corridors, ``engine`` holds the rules and the text, ``expert`` is the
observing expert the warm start clones, ``search`` solves the optimal values behind the ground-truth
pivotal turns, ``prompts`` holds the agent-facing presets and ``env`` ties them into a ``TextEnv``.
"""

from prover.envs.pivot_sim.env import PivotSimEnv

__all__ = ["PivotSimEnv"]
