"""Inference engines behind one protocol (``base.Engine``), registered by name."""

from prover.registry import ENGINES

ENGINES.register("hf", "prover.engines.hf:HFEngine")
ENGINES.register("sglang", "prover.engines.sglang:SGLangEngine")
