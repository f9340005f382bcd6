"""prover-twx: TextWorld-Express on its Java engine, registered only through the ``prover.envs`` entry point.

Importing this package imports neither textworld_express nor py4j; the JVM starts on the first reset.
"""

from prover_twx.engine import GAMES
from prover_twx.env import TwxEnv

__all__ = ["GAMES", "TwxEnv"]
