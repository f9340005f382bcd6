"""Retrieval for search envs: one ``Retriever`` protocol, a local BM25 index, a Search-R1 HTTP client.

The protocol is small on purpose, so that an embedded env's BM25 and a real retrieval server (the
one Search-R1 trains against) can be swapped without the env noticing. Heavy imports (``bm25s``)
happen inside the modules that need them, never at ``import prover``.
"""

from prover.retrieval.base import Passage, Retriever, format_documents

__all__ = ["Passage", "Retriever", "format_documents"]
