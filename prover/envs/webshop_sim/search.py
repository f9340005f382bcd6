"""A small BM25 index in pure Python and numpy, standing in for WebShop's pyserini/Lucene search.

    score(d, q) = sum over query terms t in d of
                  idf(t) * tf(t, d) * (k1 + 1) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))
    idf(t) = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))          (Lucene's non-negative idf)

``k1=0.9, b=0.4`` are pyserini's defaults, which WebShop's ``LuceneSearcher`` uses. Only documents
that share a term with the query are hits (as in Lucene); ties keep index order, so results are
deterministic. Tokens are lower-cased alphanumeric runs minus a few stopwords; Lucene's Porter
stemming is left out. Kept dependency-free on purpose: the general retrieval layer is separate.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

STOPWORDS = frozenset("a an and are as at be but by for from i if in into is it its me my need no of on "
                      "or s such that the their then there these they this to want was will with".split())


def tokenize(text: str) -> list[str]:
    return [t for t in re.findall(r"[0-9a-z]+", text.lower()) if t not in STOPWORDS]


class BM25:
    """An inverted index over ``docs``; ``search(query, k)`` returns the top-k document indices."""

    def __init__(self, docs: list[str], k1: float = 0.9, b: float = 0.4) -> None:
        self.k1, self.b = k1, b
        tokenized = [tokenize(d) for d in docs]
        self.n_docs = len(docs)
        lengths = np.array([len(t) for t in tokenized], dtype=np.float64)
        avgdl = lengths.mean() if self.n_docs and lengths.mean() > 0 else 1.0
        norm = k1 * (1 - b + b * lengths / avgdl)  # the per-document length term of the denominator
        postings: dict[str, tuple[list[int], list[int]]] = {}
        for i, toks in enumerate(tokenized):
            for term, tf in Counter(toks).items():
                ids, tfs = postings.setdefault(term, ([], []))
                ids.append(i)
                tfs.append(tf)
        self.postings: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for term, (ids, tfs) in postings.items():
            ids_a, tf_a = np.array(ids), np.array(tfs, dtype=np.float64)
            idf = np.log(1.0 + (self.n_docs - len(ids) + 0.5) / (len(ids) + 0.5))
            self.postings[term] = (ids_a, idf * tf_a * (k1 + 1) / (tf_a + norm[ids_a]))

    def scores(self, query: str) -> np.ndarray:
        out = np.zeros(self.n_docs)
        for term in tokenize(query):  # a repeated query term counts again, as in Lucene's BooleanQuery
            if term in self.postings:
                ids, weights = self.postings[term]
                out[ids] += weights
        return out

    def search(self, query: str, k: int = 50) -> list[int]:
        scores = self.scores(query)
        hits = np.flatnonzero(scores > 0)
        order = np.lexsort((hits, -scores[hits]))  # best score first, then index order
        return [int(i) for i in hits[order][:k]]
