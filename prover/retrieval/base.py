"""The retriever contract, the document formatting Search-R1's agents read, and the index cache.

A retriever maps a query to its top-k ``Passage`` objects, best first. ``search_many`` exists
because the real servers are batched (one POST for a whole rollout step) and BM25 scores a batch
of queries faster than one at a time.

The local backends (bm25s, dense, pyserini) share one disk cache: ``<cache dir>/<content hash>/``,
where the hash covers every passage and the backend's settings, so a changed corpus or a changed
backend can never load a stale index, and identical corpora share one. The cache dir is
``$PROVER_INDEX_DIR`` or ``~/.cache/prover/indexes``; ``cache_dir=False`` keeps an index in memory.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Protocol, runtime_checkable

from prover.errors import RetrievalError

DEFAULT_CACHE_DIR = Path("~/.cache/prover/indexes")
CACHE_ENV_VAR = "PROVER_INDEX_DIR"  # overrides the default cache folder, e.g. on a shared disk


@dataclass(frozen=True)
class Passage:
    """One retrievable unit: a Wikipedia-style chunk with a stable id and its article title."""

    id: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        """The wiki-18 corpus layout that Search-R1's server returns: the quoted title, a newline, the text."""
        return f'"{self.title}"\n{self.text}'

    @classmethod
    def from_contents(cls, id: str, contents: str) -> Passage:
        """Inverse of ``contents``; a document without a newline is all text and no title."""
        title, sep, text = contents.partition("\n")
        if not sep:
            return cls(id, "", contents)
        return cls(id, title.strip().strip('"'), text)


@runtime_checkable
class Retriever(Protocol):
    """Anything that returns the top-k passages for a query, best first.

    ``search_many`` answers one list per query, in order. The local backends return
    ``min(k, corpus size)`` passages for any query with text (bm25s and dense give a query matching
    nothing the k best; Lucene, like Search-R1's server, only passages sharing a term with it), no
    passages for a blank query, and raise ``RetrievalError`` for ``k < 1``.
    """

    def search(self, query: str, k: int = 3) -> list[Passage]: ...

    def search_many(self, queries: Sequence[str], k: int = 3) -> list[list[Passage]]: ...


def format_documents(passages: Sequence[Passage]) -> str:
    """Search-R1's ``_passages2string``: one ``Doc i(Title: T) text`` line per passage.

    The title keeps its quotes because Search-R1 splits ``contents`` at the first newline and the
    wiki-18 titles are stored quoted; the agent sees exactly that.
    """
    return "".join(f'Doc {i}(Title: "{p.title}") {p.text}\n' for i, p in enumerate(passages, 1))


# -- shared by the local backends ---------------------------------------------------------------------


def content_hash(passages: Sequence[Passage], settings: str) -> str:
    """A sha256 over the exact corpus and the backend's ``settings``: the name of its cached index."""
    h = hashlib.sha256(f"{settings}\n".encode())
    for p in passages:
        for field in (p.id, p.title, p.text):
            h.update(field.encode())
            h.update(b"\x1f")  # a separator that cannot appear in text, so fields cannot blur
        h.update(b"\x1e")
    return h.hexdigest()


def default_cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV_VAR) or DEFAULT_CACHE_DIR).expanduser()


def index_dir(cache_dir: str | Path | bool | None, key: str) -> Path | None:
    """Where the index named ``key`` lives: ``None``/``True`` mean the default folder, ``False`` none."""
    if cache_dir is False:
        return None
    folder = default_cache_dir() if cache_dir in (None, True) else Path(cache_dir).expanduser()
    return folder / key


def save_atomically(target: Path, write: Callable[[Path], None]) -> None:
    """``write(tmp)`` fills a temporary folder beside ``target``, which is then renamed into place, so
    two processes racing to build the same index cannot leave a half-written one behind."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        write(tmp)
        os.replace(tmp, target)  # atomic; fails harmlessly if another process got there first
    except OSError:  # a lost race or a full disk: the caller checks what landed
        shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def import_optional(module: str, extra: str, backend: str) -> ModuleType:
    """Import a heavy optional dependency, or fail in one line that names the pip extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise RetrievalError(f"the {backend} retriever needs the {module!r} module ({exc}); "
                             f"install it with: pip install 'prover-rl[{extra}]'") from exc


def search_nonblank(queries: Sequence[str], k: int,
                    run: Callable[[list[str], int], list[list[Passage]]]) -> list[list[Passage]]:
    """The local backends' ``search_many``: check ``k``, answer blank queries with no passages (a
    query with no text asks for nothing), and ``run`` the rest as one batch, keeping query order."""
    if k < 1:
        raise RetrievalError(f"top-k={k} must be at least 1")
    asked = [i for i, q in enumerate(queries) if q.strip()]
    found = run([queries[i] for i in asked], k) if asked else []
    out: list[list[Passage]] = [[] for _ in queries]
    for i, row in zip(asked, found):
        out[i] = row
    return out
