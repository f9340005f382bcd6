"""One SGLang server over HTTP: JSON in and out, a timeout on every call, bounded retries, one-line errors.

Only the standard library is used (``urllib``), so the client adds no dependency; prover never imports
sglang itself (it pins a CUDA torch), it drives servers started in their own environment.

A call is retried, with doubling waits, only where trying again can help: the connection was refused or
dropped, or the server answered 429 or 5xx. A timeout is not retried: a server too slow once is slow
again, and the caller would wait a multiple of its timeout. Every failure becomes one ``EngineError``
line that names the server, e.g. ``SGLang server http://127.0.0.1:30000: no reply to /generate within
30 s``. The timeout bounds each socket wait and also the whole body read, so a server that trickles its
reply cannot hold a rollout either.

A server started with ``--api-key`` (``prover serve`` does so when ``PROVER_SGLANG_API_KEY`` is set) answers
401 to every request without it but ``/health``; the client reads that variable and sends ``Authorization:
Bearer <key>`` on every request. The key lives in the environment only, never in a config, and is blanked
from every error line.
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar

from prover.errors import EngineError
from prover.system.httpio import fetch

T = TypeVar("T")

API_KEY_ENV = "PROVER_SGLANG_API_KEY"  # the servers' --api-key; read from here, never from a config


def api_key_from_env() -> str | None:
    return os.environ.get(API_KEY_ENV) or None


def redact(text: str, key: str | None) -> str:
    """``text`` with every copy of ``key`` blanked."""
    return text.replace(key, "***") if key else text


class _Retryable(Exception):
    """A failure worth another try (connection refused or dropped, 429, 5xx)."""


class ServerBusy(EngineError):
    """A 400 that means "requests are still running or queued": SGLang 0.5.23 refuses ``/flush_cache``
    then (srt/managers/scheduler.py:5518-5547), and fails a weight update whose own flush it refused although
    the weights were loaded (scheduler_components/weight_updater.py:120-131). Worth waiting out (``when_idle``)."""


BUSY_MARKERS = ("requests are still running or queued", "Flush cache failed", "flush_cache is already in progress")


def busy_reply(path: str, status: int, raw: bytes) -> bool:
    text = raw.decode("utf-8", "replace")
    return status == 400 and (path == "/flush_cache" or any(m in text for m in BUSY_MARKERS))


def when_idle(call: Callable[[], T], deadline_s: float, backoff_s: float = 0.25, cap_s: float = 5.0) -> T:
    """``call()``, repeated with doubling waits (up to ``cap_s``) while the server answers ``ServerBusy``, for
    at most ``deadline_s`` seconds, as slime's and verl's SGLang clients retry a refused flush. A request
    whose client timed out keeps running on the server, so a sync can meet one."""
    deadline, wait = time.monotonic() + deadline_s, backoff_s
    while True:
        try:
            return call()
        except ServerBusy as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                raise EngineError(f"{exc}; still busy after {deadline_s:g} s: requests are running or queued on "
                                  "it (one whose client timed out runs on); raise engine.kwargs.sync_timeout_s "
                                  "or check its log") from exc
            time.sleep(min(wait, left))
            wait = min(wait * 2, cap_s)


def first_line(raw: bytes | str, limit: int = 200) -> str:
    """The readable gist of an error body: SGLang's ``{"error": {"message"}}``, ``{"message"}``,
    FastAPI's ``{"detail"}``, or the text itself; first line only, clipped."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    try:
        data = json.loads(text)
        if isinstance(data, dict):
            err = data.get("error")
            text = str((err.get("message") if isinstance(err, dict) else err) or data.get("message")
                       or data.get("detail") or text)
    except ValueError:
        pass
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "(empty body)")
    return line if len(line) <= limit else line[:limit] + "..."


class ServerClient:
    """``url`` is the server root, e.g. ``http://127.0.0.1:30000``."""

    def __init__(self, url: str, timeout_s: float, retries: int = 3, backoff_s: float = 1.0,
                 api_key: str | None = None) -> None:
        """``api_key``: sent as ``Authorization: Bearer`` on every request (a server's ``--api-key``)."""
        self.url = url.rstrip("/")
        self.name = f"SGLang server {self.url}"
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._key = api_key
        self.retried = 0  # calls repeated after a retryable failure (a metric)

    def get(self, path: str, timeout_s: float | None = None, expect_json: bool = True) -> Any:
        return self.call("GET", path, None, timeout_s, expect_json)

    def post(self, path: str, body: object = None, timeout_s: float | None = None, expect_json: bool = True,
             retry: bool = True) -> Any:
        """``retry=False`` for calls that must not run twice (joining a group, receiving a broadcast)."""
        return self.call("POST", path, body, timeout_s, expect_json, retry)

    def call(self, method: str, path: str, body: object, timeout_s: float | None, expect_json: bool,
             retry: bool = True) -> Any:
        try:
            return self._call(method, path, body, timeout_s, expect_json, retry)
        except EngineError as exc:  # a reply or an exception text that echoes the key must not print it
            if self._key and self._key in str(exc):
                raise type(exc)(redact(str(exc), self._key)) from None
            raise

    def _call(self, method: str, path: str, body: object, timeout_s: float | None, expect_json: bool,
              retry: bool) -> Any:
        timeout = timeout_s or self.timeout_s
        retries = self.retries if retry else 0
        problem, hint = "", ""
        for attempt in range(retries + 1):
            try:
                status, raw = self._once(method, path, body, timeout)
            except _Retryable as exc:
                problem, hint = str(exc), "is it running? check its log"
            else:
                if status == 429 or status >= 500:
                    problem, hint = f"{path} answered HTTP {status}: {first_line(raw)}", "check its log"
                elif status in (401, 403):
                    raise self._refused(path, status, raw)
                elif status >= 400:
                    kind = ServerBusy if busy_reply(path, status, raw) else EngineError
                    raise kind(f"{self.name}: {path} answered HTTP {status}: {first_line(raw)}")
                else:
                    return self._decode(path, raw, expect_json)
            if attempt < retries:
                self.retried += 1
                time.sleep(self.backoff_s * 2 ** attempt)
        tries = f" (after {retries + 1} tries)" if retries else ""
        raise EngineError(f"{self.name}: {problem}{tries}; {hint}")

    def _refused(self, path: str, status: int, raw: bytes) -> EngineError:
        fix = (f"{API_KEY_ENV} is not the key it was started with" if self._key else
               f"it was started with --api-key: set {API_KEY_ENV} to that key")
        return EngineError(f"{self.name}: {path} answered HTTP {status}: {first_line(raw)}; {fix}")

    def _once(self, method: str, path: str, body: object, timeout: float) -> tuple[int, bytes]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=self._headers)
        try:
            return fetch(request, timeout)  # the whole call within timeout, headers and body alike
        except TimeoutError as exc:
            raise self._timeout(path, timeout) from exc
        except http.client.HTTPException as exc:  # dropped mid-reply, garbled status line
            raise _Retryable(f"connection to {path} dropped ({type(exc).__name__})") from exc
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, (socket.timeout, TimeoutError)):
                raise self._timeout(path, timeout) from exc
            if isinstance(reason, ConnectionRefusedError):
                raise _Retryable("connection refused") from exc
            if isinstance(reason, (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)):
                raise _Retryable(f"connection to {path} dropped ({type(reason).__name__})") from exc
            raise _Retryable(f"cannot connect ({reason})") from exc

    def _timeout(self, path: str, timeout: float) -> EngineError:
        return EngineError(f"{self.name}: no reply to {path} within {timeout:g} s; raise engine.kwargs.timeout_s "
                           "or check the server")

    def _decode(self, path: str, raw: bytes, expect_json: bool) -> Any:
        if not expect_json:
            return raw.decode("utf-8", "replace")
        try:
            return json.loads(raw)
        except ValueError as exc:
            head = raw[:60].decode("utf-8", "replace")
            raise EngineError(f"{self.name}: {path} sent a reply that is not JSON (starts {head!r})") from exc


def reply_field(server: ServerClient, path: str, reply: object, key: str) -> Any:
    """``reply[key]``; a reply without it is one ``EngineError`` naming the endpoint and the field."""
    if not isinstance(reply, dict) or key not in reply:
        got = f"keys {sorted(reply)[:8]}" if isinstance(reply, dict) else f"a {type(reply).__name__}"
        raise EngineError(f"{server.name}: {path} sent a reply without the field {key!r} ({got}); is it an SGLang "
                          "server of the version prover serve pins?")
    return reply[key]


def positive_int(server: ServerClient, path: str, reply: object, key: str) -> int:
    value = reply_field(server, path, reply, key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise EngineError(f"{server.name}: {path} field {key!r} is {value!r}, not a positive integer")
    return value


def together(fns: list[Callable[[], Any]], timeout_s: float | None = None, what: str = "") -> list[Any]:
    """Run every function in its own thread; their results, in order.

    The first exception is raised as soon as it happens (not after the others end), and past
    ``timeout_s`` it is an ``EngineError``. Threads are daemons: one stuck in a collective or a socket
    wait cannot keep the process alive after the error has been reported.
    """
    done: queue.Queue = queue.Queue()
    results: list[Any] = [None] * len(fns)

    def run(k: int, fn: Callable[[], Any]) -> None:
        try:
            done.put((k, fn(), None))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            done.put((k, None, exc))

    for k, fn in enumerate(fns):
        threading.Thread(target=run, args=(k, fn), daemon=True).start()
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    for _ in fns:
        try:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            k, value, exc = done.get(timeout=left)
        except queue.Empty as err:
            raise EngineError(f"{what or 'server calls'} did not finish within {timeout_s:g} s") from err
        if exc is not None:
            raise exc
        results[k] = value
    return results
