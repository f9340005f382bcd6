"""A real HTTP server on 127.0.0.1 that never finishes its reply: it sends one byte at a time with a pause
between them, in the headers, in a body of announced length, or as an endless chunked body. Every read
the client makes returns within the pause, so a per-read socket timeout never trips; only a bound on the
whole call stops a client."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any


class TrickleServer:
    """``mode``: 'body' (headers at once, then a Content-Length body one byte per ``pause_s``), 'chunked'
    (an endless chunked body, one one-byte chunk per ``pause_s``), 'headers' (the status line and headers
    themselves one byte per ``pause_s``) or 'error' (an HTTP 500 at once). ``mode`` may change while it
    serves: each connection reads it when it arrives."""

    def __init__(self, mode: str = "body", pause_s: float = 0.5) -> None:
        self.mode, self.pause_s = mode, pause_s
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._reply, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket, data: bytes) -> None:
        for i in range(len(data)):
            if self._stop.is_set():
                return
            conn.sendall(data[i:i + 1])
            time.sleep(self.pause_s)

    def _reply(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(5)
            conn.recv(1 << 20)  # the request; its content does not matter
            if self.mode == "error":
                conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                             b"Content-Length: 2\r\nConnection: close\r\n\r\n{}")
            elif self.mode == "headers":
                self._drip(conn, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + b"X-Pad: " + b"a" * 10**6)
            elif self.mode == "chunked":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
                while not self._stop.is_set():
                    conn.sendall(b"1\r\n \r\n")
                    time.sleep(self.pause_s)
            else:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
                self._drip(conn, b" " * 100000)
        except OSError:  # the client gave up: what a bounded client does
            pass
        finally:
            conn.close()

    def __enter__(self) -> TrickleServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self.sock.close()
