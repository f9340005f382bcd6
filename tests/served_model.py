"""A real OpenAI-compatible model server on 127.0.0.1, as a subprocess: ``transformers serve`` (no
compile) or llama.cpp's ``python -m llama_cpp.server``. The process writes its log to a file, which the
test reads to count the requests the server received."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ACCESS_LINE = re.compile(r'"POST /v1/chat/completions HTTP/1\.[01]" \d{3}')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_threads() -> int:
    """The threads the test process was given (tests/conftest.py exports them to each worker), so that a server
    beside another worker does not oversubscribe the cores."""
    return int(os.environ.get("OMP_NUM_THREADS") or 2)


class ServedModel:
    """``with ServedModel(argv, port, log) as srv:`` starts ``argv`` and waits until ``/v1/models``
    answers (or fails with the log's tail); ``srv.api_base`` and ``srv.model`` are what a judge needs."""

    def __init__(self, argv: list[str], port: int, log: Path, *, ready_s: float = 300.0,
                 threads: int | None = None) -> None:
        threads = threads or server_threads()
        self.argv, self.port, self.log, self.ready_s, self.threads = argv, port, log, ready_s, threads
        self.api_base = f"http://127.0.0.1:{port}/v1"
        self.model = ""
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> ServedModel:
        env = {**os.environ, "OMP_NUM_THREADS": str(self.threads), "TOKENIZERS_PARALLELISM": "false"}
        self.process = subprocess.Popen(self.argv, stdout=self.log.open("wb"), stderr=subprocess.STDOUT, env=env,
                                        start_new_session=True)
        deadline = time.monotonic() + self.ready_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.__exit__()
                raise RuntimeError(f"{self.argv[:3]} exited with {self.process.returncode}: {self.tail()}")
            try:
                with urllib.request.urlopen(f"{self.api_base}/models", timeout=2) as r:
                    self.model = json.loads(r.read())["data"][0]["id"]
                return self
            except OSError:
                time.sleep(1.0)
        self.__exit__()
        raise RuntimeError(f"{self.argv[:3]} did not answer in {self.ready_s:.0f} s: {self.tail()}")

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def tail(self, n: int = 1500) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""

    def completions_served(self) -> int:
        """POSTs to /v1/chat/completions the server answered: uvicorn's access lines, with their status
        (an error dump that quotes the request line is not one)."""
        return len(ACCESS_LINE.findall(self.log.read_text(errors="replace")))


def transformers_serve(folder: Path, log: Path) -> ServedModel:
    port = free_port()
    exe = Path(sys.executable).with_name("transformers")
    return ServedModel([str(exe), "serve", str(folder), "--host", "127.0.0.1", "--port", str(port),
                        "--device", "cpu"], port, log)


def llama_cpp_serve(gguf: Path, alias: str, log: Path) -> ServedModel:
    """llama.cpp's server as `prover serve-judge` starts it."""
    from prover.judges.serve_judge import server_argv

    port = free_port()
    threads = server_threads()
    return ServedModel(server_argv(gguf, alias, port, threads=threads, n_ctx=8192), port, log, threads=threads)
