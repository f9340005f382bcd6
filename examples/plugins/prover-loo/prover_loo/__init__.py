"""prover-loo: a credit method for prover, found through the prover.credit entry point 'loo'."""

from prover_loo.credit import LooCredit

__all__ = ["LooCredit"]
