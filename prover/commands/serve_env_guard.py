"""What ``prover serve-env`` refuses before OpenEnv's server reads it: an ASGI layer around OpenEnv's app.

- A request body (HTTP) or a WebSocket message of more than ``MAX_MESSAGE_BYTES``: an HTTP body is kept no
  further and answered 413 with one line (the rest is read and dropped, up to 16 MiB, so that the client
  sees the answer); uvicorn closes a WebSocket whose message is larger (code 1009,
  message too big; ``ws_max_size``), before reading it. The bound holds any message a client of a prover
  env needs: an action of 65 536 characters (the env's action space), each escaped as JSON at its longest.
- A WebSocket message that is not what OpenEnv's protocol says (a JSON object with ``type`` reset, step,
  state or close, and for reset and step a ``data`` object, a step's holding the action's ``text``): answered
  with an error message of one line, which OpenEnv's client raises as ``RuntimeError("Server error: ...")``,
  and the session goes on. OpenEnv itself would answer ``[1,2]`` with "'list' object has no attribute 'get'"
  and close the session.
- An HTTP body that does not validate: 422 with one line in ``detail`` (FastAPI gives a list of errors).
- What OpenEnv's server answers on a WebSocket, where its client would not show the reason: a validation
  error's first reason is written into its message, and a session refused at capacity is closed with
  1013 and the reason (``ReasonsShown``).

The bounds on what the messages hold (seeds, options, action length) are the env bridge's
(``prover.commands.openenv_bridge``), so that they hold for every route.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # fastapi comes with the optional openenv extra
    from fastapi import Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

# What ASGI passes an app (https://asgi.readthedocs.io): a message is a dict whose "type" says what it holds.
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Message, Receive, Send], Awaitable[None]]

MAX_MESSAGE_BYTES = 1 << 20  # 65 536 characters of \uXXXX escapes (6 bytes each) and the rest of a message
DRAIN_TIMES = 16  # a refused body is read on (and dropped) up to this many times the bound
MESSAGE_TYPES = ("reset", "step", "state", "close")
TRY_AGAIN_LATER = 1013  # the WebSocket close code for a server that is full for now (RFC 6455, IANA)
CLOSE_REASON_BYTES = 123  # a close frame's reason, at most (RFC 6455 5.5: 125 bytes less the code)
MESSAGE_KEYS = ("type", "data")
JSON_NAMES = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean",
              type(None): "null"}


def json_name(value: object) -> str:
    return JSON_NAMES.get(type(value), type(value).__name__)


def message_problem(text: str) -> str:
    """Why a WebSocket message is not one of OpenEnv's protocol, in one line, or ''."""
    try:
        message = json.loads(text)
    except ValueError as exc:
        return f"a message is one JSON object; this one does not parse ({exc})"
    if not isinstance(message, dict):
        return (f"a message is a JSON object with a type ({', '.join(MESSAGE_TYPES)}), not a JSON "
                f"{json_name(message)}")
    kind = message.get("type")
    if kind not in MESSAGE_TYPES:
        shown = repr(kind) if len(repr(kind)) <= 40 else f"{repr(kind)[:40]}..."
        return f"unknown message type {shown}; this server takes {', '.join(MESSAGE_TYPES)}"
    unknown = sorted(str(k)[:40] for k in message if k not in MESSAGE_KEYS)
    if unknown:
        return f"a {kind} message holds {' and '.join(MESSAGE_KEYS)} only, not {unknown[:5]}"
    data = message.get("data", {})
    if kind in ("reset", "step") and not isinstance(data, dict):
        return f"a {kind} message's data is a JSON object, not a JSON {json_name(data)}"
    if kind == "step" and not isinstance(data.get("text"), str):
        return ('a step message\'s data holds the action as text, {"text": "..."}, not '
                f"{'no text' if 'text' not in data else 'a JSON ' + json_name(data['text'])}")
    return ""


class Guard:
    """OpenEnv's app behind the bounds above."""

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: dict, receive: Receive, send: Send) -> None:
        if scope.get("type") == "http":
            await self._http(scope, receive, send)
        elif scope.get("type") == "websocket":
            send = ReasonsShown(send)
            await self.app(scope, self._checked(receive, send), send)
        else:
            await self.app(scope, receive, send)

    async def _http(self, scope: dict, receive: Receive, send: Send) -> None:
        """The body read whole, up to the bound, then handed to the app as one message."""
        length = dict(scope.get("headers") or []).get(b"content-length", b"0")
        if not length.isdigit() or int(length) > self.max_bytes:
            await _drain(receive, DRAIN_TIMES * self.max_bytes)
            await _reply(send, 413, f"a request body holds at most {self.max_bytes} bytes, not "
                         f"{length.decode('latin-1')[:20]}")
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > self.max_bytes:  # a chunked body: no length said
                if more:
                    await _drain(receive, DRAIN_TIMES * self.max_bytes)
                await _reply(send, 413, f"a request body holds at most {self.max_bytes} bytes")
                return
        body = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def replay() -> dict:
            return body.pop() if body else await receive()

        await self.app(scope, replay, send)

    def _checked(self, receive: Receive, send: Send) -> Receive:
        """``receive`` that answers each malformed message itself, with one line, and waits for the next."""
        async def checked() -> dict:
            while True:
                message = await receive()
                if message["type"] != "websocket.receive":
                    return message
                text = message.get("text")
                problem = "send each message as a text frame of JSON" if text is None else message_problem(text)
                if not problem:
                    return message
                error = {"type": "error", "data": {"message": problem, "code": "VALIDATION_ERROR"}}
                await send({"type": "websocket.send", "text": json.dumps(error)})

        return checked


class ReasonsShown:
    """``send`` for a WebSocket session, so that OpenEnv's client shows the server's reason where OpenEnv's
    server sends it in a form the client does not print:

    - a validation error (``VALIDATION_ERROR``) carries its reasons in ``errors``, and the client prints only
      ``message`` ("Invalid message"): the first reason is written into the message, as one line;
    - a session refused at capacity (``CAPACITY_REACHED``) is told in a message sent right after the
      handshake, before the client has asked anything, then closed with 1000 (OK): a client that sends its
      reset after the close sees only ``ConnectionClosedOK``. The close is sent as 1013 (try again later)
      with the reason, which the client's exception prints.
    """

    def __init__(self, send: Send) -> None:
        self.send, self.refusal = send, ""

    async def __call__(self, message: dict) -> None:
        if message.get("type") == "websocket.send" and isinstance(message.get("text"), str):
            message = {**message, "text": self._shown(message["text"])}
        elif message.get("type") == "websocket.close" and self.refusal:
            message = {**message, "code": TRY_AGAIN_LATER, "reason": clip_bytes(self.refusal, CLOSE_REASON_BYTES)}
        await self.send(message)

    def _shown(self, text: str) -> str:
        try:
            reply = json.loads(text)
        except ValueError:
            return text
        data = reply.get("data") if isinstance(reply, dict) and reply.get("type") == "error" else None
        if not isinstance(data, dict):
            return text
        if data.get("code") == "CAPACITY_REACHED":
            self.refusal = " ".join(str(data.get("message", "the server is at capacity")).split())
        errors = data.get("errors")
        if data.get("code") == "VALIDATION_ERROR" and isinstance(errors, list) and errors:
            first = errors[0] if isinstance(errors[0], dict) else {}
            where = ".".join(str(p) for p in first.get("loc", ()))
            why = " ".join(str(first.get("msg", "does not validate")).split())[:200]
            data["message"] = f"{data.get('message', 'Invalid message')}: {where + ': ' if where else ''}{why}"
            return json.dumps(reply)
        return text


def clip_bytes(text: str, most: int) -> str:
    """``text`` cut to at most ``most`` bytes of UTF-8, on a character boundary."""
    return text.encode()[:most].decode(errors="ignore")


async def _drain(receive: Receive, most: int) -> None:
    """The rest of a refused body read and dropped, up to ``most`` bytes, so that the client, still sending,
    reads the reply instead of a reset connection; past ``most`` the connection is closed on it."""
    dropped = 0
    while dropped <= most:
        message = await receive()
        dropped += len(message.get("body", b""))
        if message["type"] != "http.request" or not message.get("more_body", False):
            return


async def _reply(send: Send, status: int, line: str) -> None:
    body = json.dumps({"detail": line}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


async def one_line_validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    """FastAPI's 422 for a body that does not validate, its first error as one line."""
    from fastapi.responses import JSONResponse  # fastapi comes with the optional openenv extra

    errors = exc.errors() if callable(getattr(exc, "errors", None)) else []
    first = errors[0] if errors else {}
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
    why = " ".join(str(first.get("msg", "does not validate")).split())[:200]
    return JSONResponse(status_code=422, content={"detail": f"request body{f' field {where}' if where else ''}: {why}"})
