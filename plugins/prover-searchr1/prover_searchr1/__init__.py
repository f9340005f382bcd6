"""prover-searchr1: Search-R1's question sets and retrieval server, found only through an entry point
(group ``prover.envs``)."""

from prover_searchr1.env import SearchR1Env

__all__ = ["SearchR1Env"]
