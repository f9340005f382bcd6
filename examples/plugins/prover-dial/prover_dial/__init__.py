"""prover-dial: an env for prover, found through the prover.envs entry point 'dial'."""

from prover_dial.env import DialEnv

__all__ = ["DialEnv"]
