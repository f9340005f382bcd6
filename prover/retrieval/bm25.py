"""BM25 over a list of passages, with ``bm25s``; the index is built once and kept on disk.

Why a disk cache: an embedded env rebuilds the same knowledge base in every worker process, and a
real corpus takes minutes to index. The cache key (``base.content_hash``) covers every passage and
the tokenizer settings; the cache folder and the atomic write are shared with the other backends.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from prover.errors import RetrievalError
from prover.retrieval.base import Passage, content_hash, default_cache_dir, index_dir, save_atomically, search_nonblank

STOPWORDS = "en"
INDEX_FORMAT = "bm25s-v1"  # bump when the index layout or tokenisation changes

__all__ = ["BM25Retriever", "corpus_hash", "default_cache_dir"]


def corpus_hash(passages: Sequence[Passage]) -> str:
    """The name of the cached bm25s index of ``passages``."""
    return content_hash(passages, f"{INDEX_FORMAT}|{STOPWORDS}")


class BM25Retriever:
    """Okapi BM25 (bm25s defaults: k1=1.5, b=0.75, Lucene idf) over title plus text of each passage.

    ``cache_dir=None`` uses ``$PROVER_INDEX_DIR`` or ``~/.cache/prover/indexes``; ``cache_dir=False``
    keeps the index in memory only. ``loaded_from_cache`` tells whether this instance read its index
    from disk rather than building it.
    """

    def __init__(self, passages: Sequence[Passage], cache_dir: str | Path | bool | None = None) -> None:
        import bm25s  # lazily: importing prover must not import bm25s (a core dependency, so no extra)

        if not passages:
            raise RetrievalError("BM25Retriever needs at least one passage; got an empty corpus")
        self._bm25s = bm25s
        self.passages = list(passages)
        self.key = corpus_hash(self.passages)
        self.loaded_from_cache = False
        self.index_dir = index_dir(cache_dir, self.key)
        if self.index_dir is not None and (self.index_dir / "params.index.json").exists():
            self.index = bm25s.BM25.load(str(self.index_dir))
            self.loaded_from_cache = True
        else:
            self.index = self._build()
            if self.index_dir is not None:
                save_atomically(self.index_dir, lambda tmp: self.index.save(str(tmp)))

    def _build(self):
        tokens = self._bm25s.tokenize([f"{p.title}\n{p.text}" for p in self.passages],
                                      stopwords=STOPWORDS, show_progress=False)
        if not tokens.vocab:  # bm25s itself fails with "max() arg is an empty sequence"
            raise RetrievalError(f"BM25Retriever: none of the {len(self.passages)} passages has a word "
                                 "longer than one letter that is not a stop word; nothing to index")
        index = self._bm25s.BM25()
        index.index(tokens, show_progress=False)
        return index

    def tokenize(self, query: str) -> list[str]:
        """The query's tokens as the index sees them (lower-cased, stop words dropped)."""
        return self._bm25s.tokenize([query], stopwords=STOPWORDS, return_ids=False, show_progress=False)[0]

    def search(self, query: str, k: int = 3) -> list[Passage]:
        return self.search_many([query], k)[0]

    def search_many(self, queries: Sequence[str], k: int = 3) -> list[list[Passage]]:
        """Top-k passages per query, best first; ties keep corpus order, so results are deterministic."""
        return search_nonblank(queries, k, self._retrieve)

    def _retrieve(self, queries: list[str], k: int) -> list[list[Passage]]:
        tokens = self._bm25s.tokenize(queries, stopwords=STOPWORDS, return_ids=False, show_progress=False)
        docs, _ = self.index.retrieve(tokens, k=min(k, len(self.passages)), show_progress=False, n_threads=0)
        return [[self.passages[int(i)] for i in row] for row in docs]
