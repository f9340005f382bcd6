"""A client for Search-R1's retrieval server (search_r1/search/retrieval_server.py).

Schema: ``POST /retrieve`` with ``{"queries": [...], "topk": k, "return_scores": true}`` answers
``{"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}``, one list per query, where
``contents`` is ``"Title"\\ntext``. Without scores each item is the document itself; both are read.

Every call has a timeout and every failure (refused connection, timeout, HTTP error, broken or
unreadable reply) becomes one ``RetrievalError`` line, because a rollout worker that hangs on a dead
server stalls a whole training step with no message. The timeout bounds each socket wait and also
the whole body read, so a server that trickles its reply cannot hold a worker for long either.
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from prover.errors import RetrievalError
from prover.retrieval.base import Passage
from prover.system.httpio import fetch


class HttpRetriever:
    """``url`` is the server root (``http://127.0.0.1:8000``) or its ``/retrieve`` endpoint."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        if timeout <= 0:
            raise RetrievalError(f"HttpRetriever timeout={timeout} must be positive seconds")
        url = url.rstrip("/")
        self.url = url if url.endswith("/retrieve") else url + "/retrieve"
        self.timeout = timeout

    def search(self, query: str, k: int = 3) -> list[Passage]:
        return self.search_many([query], k)[0]

    def search_many(self, queries: Sequence[str], k: int = 3) -> list[list[Passage]]:
        if not queries:
            return []
        body = json.dumps({"queries": list(queries), "topk": k, "return_scores": True}).encode()
        request = urllib.request.Request(self.url, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            status, raw = fetch(request, self.timeout)  # the whole call within timeout, headers and body alike
        except TimeoutError as exc:
            raise RetrievalError(f"retrieval server {self.url} did not answer within {self.timeout:g} s; "
                                 "is it overloaded? raise the timeout or start more workers") from exc
        except http.client.HTTPException as exc:  # a garbled status line, a body cut short, a hang-up
            detail = " ".join(str(exc).split())  # a raw status line may hold CR/LF
            raise RetrievalError(f"retrieval server {self.url} broke the HTTP exchange "
                                 f"({type(exc).__name__}: {detail}); check its log") from exc
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, (socket.timeout, TimeoutError)):
                raise RetrievalError(f"retrieval server {self.url} did not answer within "
                                     f"{self.timeout:g} s; raise the timeout or check the server") from exc
            if isinstance(reason, (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)):
                # it accepted the connection, then dropped it: a server that closes with our request
                # unread resets instead of ending the body, so a cut-short reply can arrive this way too
                raise RetrievalError(f"retrieval server {self.url} broke the HTTP exchange "
                                     f"({type(reason).__name__}); check its log") from exc
            raise RetrievalError(f"cannot reach retrieval server {self.url} ({reason}); "
                                 "is it running? start it or fix the url") from exc
        if status >= 400:
            raise RetrievalError(f"retrieval server {self.url} answered HTTP {status} "
                                 f"{http.client.responses.get(status, '')}; check its log".replace(" ;", ";"))
        return self._parse(raw, len(queries))

    def _parse(self, raw: bytes, n_queries: int) -> list[list[Passage]]:
        try:
            result = json.loads(raw)["result"]
            if not isinstance(result, list) or len(result) != n_queries:
                raise ValueError(f"expected {n_queries} result lists")
            return [[self.passage_from(item) for item in row] for row in result]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            head = raw[:80].decode("utf-8", "replace").replace("\n", " ")
            raise RetrievalError(f"retrieval server {self.url} sent a reply that is not the Search-R1 "
                                 f"schema ({type(exc).__name__}: {exc}; starts {head!r})") from exc

    @staticmethod
    def passage_from(item: Any) -> Passage:
        """The Passage of one item of a reply; a subclass overrides it to keep more (prover-searchr1)."""
        doc = item["document"] if "document" in item else item  # noqa: SIM401 - item may be any JSON value
        return Passage.from_contents(str(doc.get("id", "")), str(doc["contents"]))
