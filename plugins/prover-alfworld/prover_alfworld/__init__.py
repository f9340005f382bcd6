"""prover-alfworld: ALFWorld on its real engine, registered only through the ``prover.envs`` entry point.

Importing this package imports neither textworld nor alfworld; the engine loads on the first reset.
"""

from prover_alfworld.env import AlfworldEnv

__all__ = ["AlfworldEnv"]
