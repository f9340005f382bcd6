"""``prover serve``: SGLang servers for the policy and, optionally, a judge, in SGLang's own environment.

SGLang pins a CUDA torch, about forty CUDA wheels and an old openai, so it cannot share prover's
environment (a CPU torch, litellm). ``prover serve`` creates a separate venv once (default
``~/.cache/prover/sglang-venv``, ``pip install sglang==0.5.23``: several minutes, about 10 GB), starts
``python -m sglang.launch_server`` from it for each server, waits until every ``/health`` answers,
prints the overrides that point ``prover train`` at them, and stops them all on Ctrl-C. prover itself
never imports sglang; the ``sglang`` engine and the ``litellm`` judge reach the servers over HTTP.

Policy servers: one per group of ``--tp x --dp`` GPUs taken in order from ``--gpus`` (``--base-gpu-id``
is the group's first GPU, so a group must be consecutive ids), on ports ``--port``, ``--port + 1``, ...
A judge server (``--judge-model``) gets ``--judge-gpus`` and ``--judge-port``, and is reached by the
litellm judge as ``openai/<--judge-name>`` at ``http://<host>:<judge-port>/v1``.

API key: when the environment variable ``PROVER_SGLANG_API_KEY`` is set, every server is started with
``--api-key`` set to it and then refuses every request without it (``/health`` aside), the weight updates
(``/update_weights_from_disk``, ``/init_weights_update_group``, ``/update_weights_from_distributed``)
among them; ``prover train`` sends it when the same variable is set there, the litellm judge through
``judge.api_key_env``. Set it whenever the servers listen beyond 127.0.0.1. The key is never printed or
written: commands show ``"$PROVER_SGLANG_API_KEY"`` in its place, and it is blanked in the servers' logs.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from prover.commands.serve_checks import RISK_FLAG, check_exposure, check_layer_layout
from prover.engines.sglang_http import API_KEY_ENV, api_key_from_env, redact
from prover.errors import ConfigError, EngineError

DEFAULT_SPEC = "sglang==0.5.23"
DEFAULT_VENV = Path("~/.cache/prover/sglang-venv")
SPEC_MARKER = ".prover-sglang-spec"  # what the venv was installed with; a different --sglang reinstalls
HEALTH_TIMEOUT_S = 5.0  # one /health request; the server's start-up is bounded by --timeout


@dataclass
class Server:
    """One ``sglang.launch_server`` process: what it serves, where, and on which GPUs."""

    role: str  # "policy" or "judge"
    model: Path
    host: str
    port: int
    gpus: list[int]
    tp: int
    dp: int
    seed: int
    mem_fraction: float
    served_name: str | None = None
    extra: list[str] = field(default_factory=list)
    api_key: str | None = field(default=None, repr=False)  # --api-key; never printed (see ``shown``)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def name(self) -> str:
        return f"{self.role} server on port {self.port}"

    def argv(self, python: str) -> list[str]:
        argv = [python, "-m", "sglang.launch_server", "--model-path", str(self.model), "--host", self.host,
                "--port", str(self.port), "--random-seed", str(self.seed),
                "--mem-fraction-static", str(self.mem_fraction), "--base-gpu-id", str(self.gpus[0])]
        if self.tp > 1:
            argv += ["--tp-size", str(self.tp)]
        if self.dp > 1:
            argv += ["--dp-size", str(self.dp)]
        if self.served_name:
            argv += ["--served-model-name", self.served_name]
        if self.api_key:
            argv += ["--api-key", self.api_key]
        return argv + self.extra

    def shown(self, python: str) -> str:
        """The command as printed: the key stands as its variable, so the line still runs in a shell that
        has it set, and never appears itself."""
        return " ".join(f'"${API_KEY_ENV}"' if self.api_key and a == self.api_key else shlex.quote(a)
                        for a in self.argv(python))


def _gpu_list(text: str, flag: str) -> list[int]:
    try:
        gpus = [int(g) for g in text.split(",") if g.strip()]
    except ValueError as exc:
        raise ConfigError(f"{flag} {text!r}: give GPU ids separated by commas, e.g. 0,1") from exc
    if not gpus or min(gpus) < 0 or len(set(gpus)) != len(gpus):
        raise ConfigError(f"{flag} {text!r}: give distinct GPU ids >= 0, e.g. 0,1")
    return gpus


def _gpu_groups(gpus: list[int], per_server: int, flag: str) -> list[list[int]]:
    if len(gpus) % per_server:
        raise ConfigError(f"{flag} has {len(gpus)} GPUs, not a multiple of the {per_server} each server "
                          "needs (--tp x --dp)")
    groups = [gpus[i:i + per_server] for i in range(0, len(gpus), per_server)]
    for g in groups:
        if g != list(range(g[0], g[0] + per_server)):
            raise ConfigError(f"{flag}: GPUs {g} of one server are not consecutive ids (SGLang takes "
                              "--base-gpu-id and the next ones); list them in order, e.g. 0,1,2,3")
    return groups


def _model_dir(path: str, flag: str) -> Path:
    p = Path(path).expanduser()
    if not p.is_dir():
        raise ConfigError(f"{flag} {path!r}: no such folder (give a local Hugging Face checkpoint folder)")
    if not (p / "config.json").is_file():
        raise ConfigError(f"{flag} {path!r} has no config.json; it is not a Hugging Face checkpoint folder")
    check_layer_layout(p / "config.json", flag)
    return p.resolve()


def _check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            raise ConfigError(f"port {port} on {host} is not free ({exc.strerror}); pick another with "
                              "--port / --judge-port, or stop what holds it") from exc


def plan(args: argparse.Namespace) -> list[Server]:
    """Every server to start, checked: model folders, GPU groups, free and distinct ports."""
    for flag, value, ok, want in (("--tp", args.tp, args.tp >= 1, "at least 1"),
                                  ("--dp", args.dp, args.dp >= 1, "at least 1"),
                                  ("--mem-fraction", args.mem_fraction, 0 < args.mem_fraction < 1, "in (0, 1)"),
                                  ("--timeout", args.timeout, args.timeout > 0, "above 0")):
        if not ok:
            raise ConfigError(f"{flag} {value}: must be {want}")
    extra = [a for arg in args.server_arg for a in shlex.split(arg)]
    if any(a == "--api-key" or a.startswith("--api-key=") for a in extra):
        raise ConfigError(f"give the key in the environment variable {API_KEY_ENV}, not --server-arg "
                          "--api-key (a command line is printed and logged)")
    key = api_key_from_env()
    check_exposure(args.host, key, API_KEY_ENV, args.insecure_allow_anyone_to_replace_weights)
    model = _model_dir(args.model, "--model")
    groups = _gpu_groups(_gpu_list(args.gpus, "--gpus"), args.tp * args.dp, "--gpus")
    servers = [Server("policy", model, args.host, args.port + i, g, args.tp, args.dp, args.seed + i,
                      args.mem_fraction, extra=extra, api_key=key) for i, g in enumerate(groups)]
    if args.judge_model:
        judge_gpus = _gpu_list(args.judge_gpus, "--judge-gpus")
        _gpu_groups(judge_gpus, len(judge_gpus), "--judge-gpus")
        judge_dir = _model_dir(args.judge_model, "--judge-model")
        servers.append(Server("judge", judge_dir, args.host, args.judge_port, judge_gpus, len(judge_gpus), 1,
                              args.seed, args.mem_fraction, args.judge_name, extra, key))
    ports = [s.port for s in servers]
    if len(set(ports)) != len(ports):
        raise ConfigError(f"the servers would share ports {sorted(ports)}; move --judge-port away from "
                          f"--port ... --port + {len(groups) - 1}")
    for s in servers:
        if not 0 < s.port < 65536:
            raise ConfigError(f"port {s.port} of the {s.role} server is not a TCP port (1-65535)")
        _check_port_free(s.host, s.port)
    return servers


def train_overrides(servers: list[Server]) -> list[str]:
    """The ``prover train`` overrides that use these servers, shell-quoted."""
    urls = ",".join(s.url for s in servers if s.role == "policy")
    out = ["engine.name=sglang", shlex.quote(f"engine.kwargs.urls=[{urls}]")]
    for s in servers:
        if s.role == "judge":
            out += ["judge.name=litellm", f"judge.model=openai/{s.served_name}",
                    f"judge.api_base={s.url}/v1"] + ([f"judge.api_key_env={API_KEY_ENV}"] if s.api_key else [])
    return out


# -- the SGLang environment ------------------------------------------------------------------------

def venv_commands(venv: Path, spec: str) -> list[list[str]]:
    python = str(venv / "bin" / "python")
    return [[sys.executable, "-m", "venv", str(venv)],
            [python, "-m", "pip", "install", *shlex.split(spec)]]


def ensure_venv(venv: Path, spec: str, say: Callable[[str], None] = print) -> str:
    """The venv's python, after creating the venv and installing ``spec`` into it if not done yet."""
    python = venv / "bin" / "python"
    marker = venv / SPEC_MARKER
    if python.is_file() and marker.is_file() and marker.read_text().strip() == spec:
        return str(python)
    venv.parent.mkdir(parents=True, exist_ok=True)
    log = venv.parent / f"{venv.name}-install.log"
    say(f"installing {spec} into {venv} (once: several minutes, about 10 GB); log: {log}")
    with log.open("w") as out:
        for cmd in venv_commands(venv, spec):
            if cmd[1:3] == ["-m", "venv"] and python.is_file():
                continue  # the venv exists; only the install was missing or different
            if subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode != 0:
                raise EngineError(f"`{shlex.join(cmd)}` failed; see {log}")
    marker.write_text(spec + "\n")
    return str(python)


# -- running the servers ---------------------------------------------------------------------------

def healthy(url: str, timeout_s: float = HEALTH_TIMEOUT_S) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout_s) as reply:
            return reply.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _copy_redacted(source: IO[bytes], log: Path, key: str) -> None:
    """A server's output into its log, the key blanked: SGLang logs its arguments at start (``server_args=``,
    ``api_key`` among them)."""
    with source, log.open("wb") as out:
        for line in iter(source.readline, b""):
            out.write(redact(line.decode("utf-8", "surrogateescape"), key).encode("utf-8", "surrogateescape"))
            out.flush()


def _start(s: Server, python: str, log: Path) -> tuple[subprocess.Popen, threading.Thread | None]:
    """The server's process, writing to ``log``: straight (the child keeps its own descriptor), or, with
    a key, through a thread of ours that blanks it."""
    if not s.api_key:
        with log.open("w") as out:
            return subprocess.Popen(s.argv(python), stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True), None
    proc = subprocess.Popen(s.argv(python), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    pump = threading.Thread(target=_copy_redacted, args=(proc.stdout, log, s.api_key), daemon=True)
    pump.start()
    return proc, pump


class Running:
    """Started servers with their log files; ``stop()`` ends each one's whole process group."""

    def __init__(self, servers: list[Server], python: str, log_dir: Path) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self.items: list[tuple[Server, subprocess.Popen, Path]] = []
        self.pumps: list[threading.Thread] = []
        try:
            for s in servers:
                log = (log_dir / f"{s.role}-{s.port}.log").resolve()
                proc, pump = _start(s, python, log)
                self.items.append((s, proc, log))
                self.pumps += [pump] if pump else []
        except OSError as exc:
            self.stop()
            raise EngineError(f"could not start {python!r}: {exc.strerror}") from exc

    def check_alive(self) -> None:
        for s, proc, log in self.items:
            if proc.poll() is not None:
                raise EngineError(f"the {s.name} exited with code {proc.returncode}; see {log}")

    def wait_healthy(self, timeout_s: float, poll_s: float = 1.0) -> None:
        deadline = time.monotonic() + timeout_s
        waiting = list(self.items)
        while waiting:
            self.check_alive()
            waiting = [(s, p, log) for s, p, log in waiting if not healthy(s.url)]
            if waiting and time.monotonic() > deadline:
                s, _, log = waiting[0]
                raise EngineError(f"the {s.name} did not answer {s.url}/health within {timeout_s:.0f} s; "
                                  f"see {log}")
            if waiting:
                time.sleep(poll_s)

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM to each server's process group (SGLang's scheduler and detokenizer processes too, even
        when the launcher already died), then SIGKILL to what is left after ``grace_s``."""
        for _, proc, _ in self.items:
            _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for _, proc, _ in self.items:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
        for pump in self.pumps:  # the last lines reach the logs: the whole group is gone, the pipes end
            pump.join(timeout=5)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # the whole group is gone already


def serve(args: argparse.Namespace) -> int:
    servers = plan(args)
    venv = Path(args.venv).expanduser()
    python = args.python or str(venv / "bin" / "python")
    if args.dry_run:
        if not args.python:
            for cmd in venv_commands(venv, args.sglang):
                print(shlex.join(cmd))
        for s in servers:
            print(s.shown(python))
        print("prover train " + " ".join(train_overrides(servers)))
        _dp_note(args.dp)
        return 0
    running = None
    # Ctrl-C and SIGTERM (a job scheduler, a script's trap) both stop the servers; a shell starts
    # background jobs with SIGINT ignored, so Ctrl-C's handler is put back explicitly
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        if not args.python:
            python = ensure_venv(venv, args.sglang)
        print(f"starting {len(servers)} SGLang server(s); logs in {Path(args.log_dir).resolve()}", flush=True)
        running = Running(servers, python, Path(args.log_dir))
        running.wait_healthy(args.timeout)
        for s, proc, log in running.items:
            print(f"{s.name} is up at {s.url} (pid {proc.pid}, log {log})")
        print("train with:\n  prover train " + " ".join(train_overrides(servers)), flush=True)
        _dp_note(args.dp)
        print("Ctrl-C stops the servers.", flush=True)
        while True:
            running.check_alive()
            time.sleep(args.poll)
    except KeyboardInterrupt:
        print("interrupted: stopping the servers", file=sys.stderr)
        return 0
    finally:
        if running is not None:
            running.stop()


def _dp_note(dp: int) -> None:
    if dp > 1:  # tokenizer_control_mixin.py:451-453 in 0.5.23; the engine refuses the combination at start too
        print(f"note: with --dp {dp} keep engine.kwargs.sync=disk; SGLang takes a broadcast weight update "
              "(sync=distributed) only with --dp 1", file=sys.stderr, flush=True)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="start SGLang servers for the policy (and a judge) in their own venv",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="policy model folder (Hugging Face checkpoint)")
    p.add_argument("--gpus", default="0", help="GPU ids for the policy servers, e.g. 1 or 0,1,2,3 [0]")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel GPUs per policy server [1]")
    p.add_argument("--dp", type=int, default=1, help="data-parallel replicas inside each policy server [1]")
    p.add_argument("--host", default="127.0.0.1", help="address the servers listen on [127.0.0.1]")
    p.add_argument(RISK_FLAG, action="store_true", help=f"serve on a non-loopback --host without {API_KEY_ENV}, "
                   "so that anyone on that network can replace the policy's weights (refused without this flag)")
    p.add_argument("--port", type=int, default=30000, help="port of the first policy server [30000]")
    p.add_argument("--seed", type=int, default=0, help="--random-seed of the first server, +1 per server [0]")
    p.add_argument("--mem-fraction", type=float, default=0.8,
                   help="--mem-fraction-static: share of GPU memory for weights and KV cache [0.8]")
    p.add_argument("--judge-model", help="judge model folder (e.g. Qwen3.5-9B); no judge server if unset")
    p.add_argument("--judge-gpus", default="1", help="GPU ids of the judge server (all tensor-parallel) [1]")
    p.add_argument("--judge-port", type=int, default=30100, help="port of the judge server [30100]")
    p.add_argument("--judge-name", default="judge", help="name the judge is served under [judge]")
    p.add_argument("--server-arg", action="append", default=[],
                   help="extra launch_server arguments for every server, e.g. '--context-length 8192'")
    p.add_argument("--venv", default=str(DEFAULT_VENV), help=f"SGLang's own venv [{DEFAULT_VENV}]")
    p.add_argument("--sglang", default=DEFAULT_SPEC, help=f"what pip installs into it [{DEFAULT_SPEC}]")
    p.add_argument("--python", help="use this interpreter (which has sglang) instead of the venv")
    p.add_argument("--log-dir", default="sglang-logs", help="one log file per server [sglang-logs]")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds for all servers to be healthy [900]")
    p.add_argument("--poll", type=float, default=2.0, help=argparse.SUPPRESS)  # liveness check interval
    p.add_argument("--dry-run", action="store_true", help="print the commands and the train overrides only")
    p.set_defaults(fn=serve)
