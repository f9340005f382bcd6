"""The retriever contract and the document formatting that Search-R1's agents read.

A retriever maps a query to its top-k ``Passage`` objects, best first. ``search_many`` exists
because the real servers are batched (one POST for a whole rollout step) and BM25 scores a batch
of queries faster than one at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable


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
    def from_contents(cls, id: str, contents: str) -> "Passage":
        """Inverse of ``contents``; a document without a newline is all text and no title."""
        title, sep, text = contents.partition("\n")
        if not sep:
            return cls(id, "", contents)
        return cls(id, title.strip().strip('"'), text)


@runtime_checkable
class Retriever(Protocol):
    """Anything that returns the top-k passages for a query, best first."""

    def search(self, query: str, k: int = 3) -> list[Passage]: ...

    def search_many(self, queries: Sequence[str], k: int = 3) -> list[list[Passage]]: ...


def format_documents(passages: Sequence[Passage]) -> str:
    """Search-R1's ``_passages2string``: one ``Doc i(Title: T) text`` line per passage.

    The title keeps its quotes because Search-R1 splits ``contents`` at the first newline and the
    wiki-18 titles are stored quoted; the agent sees exactly that.
    """
    return "".join(f'Doc {i}(Title: "{p.title}") {p.text}\n' for i, p in enumerate(passages, 1))
