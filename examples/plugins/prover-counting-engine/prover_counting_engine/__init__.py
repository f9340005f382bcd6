"""prover-counting-engine: an inference engine for prover, found through the prover.engines entry point
'counting-hf'."""

from prover_counting_engine.engine import CountingEngine

__all__ = ["CountingEngine"]
