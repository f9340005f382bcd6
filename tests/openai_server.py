"""A real OpenAI chat-completions server on 127.0.0.1 for judge and critic tests, scripted per test.

Each POST to /v1/chat/completions takes the next step of the script (a reply, an HTTP error, a slow
reply) or, when a step is a function, asks it for the reply given the request body. An exhausted
script answers 500, so an unexpected extra request shows up as an error instead of a hang.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

USAGE = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}


def tool_reply(*calls: tuple[str, Any]) -> dict:
    """Tool calls ``(name, arguments)``; dict arguments are sent as JSON text, strings as they are."""
    return {"tool_calls": [(name, args if isinstance(args, str) else json.dumps(args)) for name, args in calls]}


def text_reply(text: str) -> dict:
    return {"text": text}


def status(code: int, message: str = "scripted error") -> dict:
    return {"status": code, "message": message}


def slow(seconds: float, then: dict) -> dict:
    return {**then, "delay": seconds}


def _completion(step: dict, model: str) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": step.get("text")}
    finish = "stop"
    if step.get("tool_calls"):
        message["tool_calls"] = [{"id": f"call_{k}", "type": "function", "function": {"name": n, "arguments": a}}
                                 for k, (n, a) in enumerate(step["tool_calls"])]
        finish = "tool_calls"
    return {"id": "chatcmpl-test", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": USAGE}


class ScriptedServer:
    def __init__(self) -> None:
        self.script: list[dict | Callable[[dict], dict]] = []
        self.requests: list[dict] = []  # {"headers": {...}, "body": {...}}
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep pytest output clean
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append({"headers": dict(self.headers), "body": body})
                    step = server.script.pop(0) if server.script else status(500, "script exhausted")
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    if callable(step):
                        step = step(body)
                    time.sleep(step.get("delay", 0.0))
                    if "status" in step:
                        code, out = step["status"], {"error": {"message": step["message"], "type": "server_error"}}
                    else:
                        code, out = 200, _completion(step, body.get("model", ""))
                    data = json.dumps(out).encode()
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout): fine
                    pass
                finally:
                    with server.lock:
                        server.in_flight -= 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)

    def push(self, *steps: dict | Callable[[dict], dict]) -> None:
        with self.lock:
            self.script.extend(steps)

    def __enter__(self) -> ScriptedServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
