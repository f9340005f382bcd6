"""prover-gem: GEM's offline games, registered only through the ``prover.envs`` entry point.

Importing this package does not import gem (gem imports reasoning_gym and nltk); the game loads on first use.
"""

from prover_gem.env import GAMES, GemEnv

__all__ = ["GAMES", "GemEnv"]
