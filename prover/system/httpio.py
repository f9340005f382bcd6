"""What our network clients (the Search-R1 retriever, the SGLang engine, the LiteLLM judge) share: a bound on
the whole duration of a call, not on each read, and a stop that reaches a call in flight.

A socket timeout restarts with every byte, so a server that trickles its reply (one byte every 2 s, an
endless chunked body, headers sent a byte at a time) would hold a per-read client forever. ``fetch`` arms a
timer that shuts the socket down at the deadline; ``within`` runs a call we cannot reach into (LiteLLM's)
on a daemon thread and stops waiting for it at the deadline, or as soon as the process is stopping
(``prover.system.stopping.stop_waiting``, called on SIGTERM and Ctrl-C), so that a stuck call never keeps a run from
exiting.
"""

from __future__ import annotations

import functools
import http.client
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar

from prover.errors import Stopped
from prover.system.stopping import STOPPING

T = TypeVar("T")
POLL_S = 0.1  # how often a waiting ``within`` looks at STOPPING (a signal itself wakes the main thread)


def within(fn: Callable[[], T], timeout_s: float, what: str = "the call") -> T:
    """``fn()``, given at most ``timeout_s`` seconds in all: past that a ``TimeoutError``, while ``fn`` goes
    on alone on a daemon thread (it cannot be killed; its socket closes when the server or its own
    read timeout ends it). A stop (``stop_waiting``) raises ``prover.errors.Stopped`` at once."""
    done = threading.Event()
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller as it is
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, daemon=True, name=f"within: {what}").start()
    deadline = time.monotonic() + timeout_s
    while not done.is_set():
        if STOPPING.is_set():
            raise Stopped()
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{what} did not finish within {timeout_s:g} s")
        done.wait(min(left, POLL_S))
    if "error" in box:
        raise box["error"]
    return box["value"]


def _shut(sock: socket.socket | None) -> None:
    try:
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)  # a recv blocked on it returns at once, in any thread
    except OSError:
        pass


class _Watched:
    """A connection whose socket is shut down at ``deadline``, whatever it is waiting for then."""

    deadline: float
    timer: threading.Timer | None = None

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        self.timer = threading.Timer(max(0.0, self.deadline - time.monotonic()), _shut, (self.sock,))
        self.timer.daemon = True
        self.timer.start()

    def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        super().close()  # type: ignore[misc]


class _HTTP(_Watched, http.client.HTTPConnection):
    pass


class _HTTPS(_Watched, http.client.HTTPSConnection):
    pass


def _connection(cls: type, deadline: float, *args: Any, **kwargs: Any) -> Any:
    conn = cls(*args, **kwargs)
    conn.deadline = deadline
    return conn


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: float) -> None:
        super().__init__()
        self.deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_connection, _HTTP, self.deadline), req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: float) -> None:
        super().__init__()
        self.deadline = deadline

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_connection, _HTTPS, self.deadline), req,
                            context=self._context)


def fetch(request: urllib.request.Request, timeout_s: float) -> tuple[int, bytes]:
    """The status and body of ``request``, all of it within ``timeout_s`` seconds (connect, headers, body),
    else a ``TimeoutError``. An HTTP error status is returned, not raised. A reply cut short raises
    ``http.client.IncompleteRead``; other failures are urllib's (``URLError``, ``OSError``)."""
    deadline = time.monotonic() + timeout_s
    opener = urllib.request.build_opener(_HTTPHandler(deadline), _HTTPSHandler(deadline))
    try:
        try:
            with opener.open(request, timeout=timeout_s) as response:
                return response.status, read_until(response, deadline)
        except urllib.error.HTTPError as exc:
            with exc:
                try:
                    return exc.code, exc.read()
                except (OSError, http.client.HTTPException):
                    return exc.code, b""
    except (OSError, http.client.HTTPException) as exc:
        if time.monotonic() >= deadline:  # the timer shut the socket: what the server did then is moot
            raise TimeoutError(f"no complete reply within {timeout_s:g} s") from exc
        raise


def read_until(response: http.client.HTTPResponse, deadline: float) -> bytes:
    """The body, read in whatever pieces arrive; past ``deadline`` (``time.monotonic``) it is a
    ``TimeoutError``, because the socket timeout alone restarts with every byte and a trickling server
    would never trip it. A reply cut short raises ``http.client.IncompleteRead``."""
    chunks = []
    while chunk := response.read1(1 << 16):
        chunks.append(chunk)
        if time.monotonic() > deadline:
            raise TimeoutError("the reply is still arriving")
    if getattr(response, "length", None):  # read1 (unlike read) ends quietly when the server hangs up early
        raise http.client.IncompleteRead(b"".join(chunks), response.length)
    return b"".join(chunks)
