"""prover-textmaze: a maze env for prover, registered only through the ``prover.envs`` entry point."""

from prover_textmaze.env import TextMazeEnv

__all__ = ["TextMazeEnv"]
