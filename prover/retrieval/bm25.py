"""BM25 over a list of passages, with ``bm25s``; the index is built once and kept on disk.

Why a disk cache: an embedded env rebuilds the same knowledge base in every worker process, and a
real corpus takes minutes to index. The cache key is a sha256 over every passage (id, title, text)
and the tokenizer settings, so a changed corpus can never load a stale index, and identical
corpora share one. Writes go to a temporary folder that is renamed into place, so two processes
racing to build the same index cannot leave a half-written one behind.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Sequence

from prover.errors import RetrievalError
from prover.retrieval.base import Passage

DEFAULT_CACHE_DIR = Path("~/.cache/prover/indexes")
CACHE_ENV_VAR = "PROVER_INDEX_DIR"  # overrides the default cache folder, e.g. on a shared disk
STOPWORDS = "en"
INDEX_FORMAT = "bm25s-v1"  # bump when the index layout or tokenisation changes


def corpus_hash(passages: Sequence[Passage]) -> str:
    """A sha256 over the exact corpus and the tokenizer settings: the name of its cached index."""
    h = hashlib.sha256(f"{INDEX_FORMAT}|{STOPWORDS}\n".encode())
    for p in passages:
        for field in (p.id, p.title, p.text):
            h.update(field.encode())
            h.update(b"\x1f")  # a separator that cannot appear in text, so fields cannot blur
        h.update(b"\x1e")
    return h.hexdigest()


def default_cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV_VAR) or DEFAULT_CACHE_DIR).expanduser()


class BM25Retriever:
    """Okapi BM25 (bm25s defaults: k1=1.5, b=0.75, Lucene idf) over title plus text of each passage.

    ``cache_dir=None`` uses ``$PROVER_INDEX_DIR`` or ``~/.cache/prover/indexes``; ``cache_dir=False``
    keeps the index in memory only. ``loaded_from_cache`` tells whether this instance read its index
    from disk rather than building it.
    """

    def __init__(self, passages: Sequence[Passage], cache_dir: str | Path | None | bool = None) -> None:
        import bm25s  # lazily: importing prover must not import bm25s

        if not passages:
            raise RetrievalError("BM25Retriever needs at least one passage; got an empty corpus")
        self._bm25s = bm25s
        self.passages = list(passages)
        self.key = corpus_hash(self.passages)
        self.loaded_from_cache = False
        folder = None if cache_dir is False else (default_cache_dir() if cache_dir in (None, True)
                                                   else Path(cache_dir).expanduser())
        self.index_dir = None if folder is None else folder / self.key
        if self.index_dir is not None and (self.index_dir / "params.index.json").exists():
            self.index = bm25s.BM25.load(str(self.index_dir))
            self.loaded_from_cache = True
        else:
            self.index = self._build()
            if self.index_dir is not None:
                self._save(self.index_dir)

    def _build(self):
        tokens = self._bm25s.tokenize([f"{p.title}\n{p.text}" for p in self.passages],
                                      stopwords=STOPWORDS, show_progress=False)
        index = self._bm25s.BM25()
        index.index(tokens, show_progress=False)
        return index

    def _save(self, target: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            self.index.save(str(tmp))
            os.replace(tmp, target)  # atomic; fails harmlessly if another process got there first
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)

    def tokenize(self, query: str) -> list[str]:
        """The query's tokens as the index sees them (lower-cased, stop words dropped)."""
        return self._bm25s.tokenize([query], stopwords=STOPWORDS, return_ids=False, show_progress=False)[0]

    def search(self, query: str, k: int = 3) -> list[Passage]:
        return self.search_many([query], k)[0]

    def search_many(self, queries: Sequence[str], k: int = 3) -> list[list[Passage]]:
        """Top-k passages per query, best first; ties keep corpus order, so results are deterministic."""
        if not queries:
            return []
        k = max(1, min(k, len(self.passages)))
        tokens = self._bm25s.tokenize(list(queries), stopwords=STOPWORDS, return_ids=False,
                                      show_progress=False)
        docs, _ = self.index.retrieve(tokens, k=k, show_progress=False, n_threads=0)
        return [[self.passages[int(i)] for i in row] for row in docs]
