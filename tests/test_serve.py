"""`prover serve` on CPU: the commands it would run, bad input as one-line errors, and real start /
health-wait / stop cycles against a stand-in ``sglang.launch_server`` module (written here into
tmp_path) that serves /health on the port it is given.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import queue
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from prover.cli import main
from prover.commands.serve import ensure_venv, healthy
from prover.config_load import parse_override

# A stand-in for SGLang's launcher: FAKE_SGLANG=ok serves /health (after a short start-up), =exit dies at
# once, =sick answers 503 forever. It records its arguments and pid in $FAKE_SGLANG_RECORD/<port>.json, and
# logs them as SGLang logs its server_args (the --api-key among them).
FAKE_LAUNCHER = '''
import argparse, json, os, signal, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer

ap = argparse.ArgumentParser()
ap.add_argument("--host")
ap.add_argument("--port", type=int)
args, _ = ap.parse_known_args()
mode = os.environ.get("FAKE_SGLANG", "ok")
record = os.environ.get("FAKE_SGLANG_RECORD")
if record:
    with open(os.path.join(record, f"{args.port}.json"), "w") as f:
        json.dump({"argv": sys.argv[1:], "pid": os.getpid()}, f)
print(f"server_args={sys.argv[1:]}", flush=True)
if mode == "exit":
    print("RuntimeError: CUDA out of memory (stand-in)", file=sys.stderr)
    sys.exit(3)
time.sleep(0.5)


class Health(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" and mode == "ok" else 503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
HTTPServer((args.host, args.port), Health).serve_forever()
'''


@pytest.fixture
def fake_sglang(tmp_path):
    """(folder to put on PYTHONPATH, folder where each fake server records itself)."""
    pkg = tmp_path / "fake" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text(FAKE_LAUNCHER)
    record = tmp_path / "record"
    record.mkdir()
    return pkg.parent, record


@pytest.fixture
def model_dir(tmp_path):
    m = tmp_path / "Qwen3.5-2B"
    m.mkdir()
    (m / "config.json").write_text("{}")
    return m


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_cli(argv, capsys) -> tuple[int, str, str]:
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


# -- dry run and bad input -------------------------------------------------------------------------

def test_dry_run_prints_the_commands_and_the_train_overrides(model_dir, tmp_path, capsys):
    judge = tmp_path / "Qwen3.5-9B"
    judge.mkdir()
    (judge / "config.json").write_text("{}")
    p0, p1, pj = free_port(), None, free_port()
    p1 = p0 + 1
    rc, out, _ = run_cli(["serve", "--model", str(model_dir), "--gpus", "2,3", "--port", str(p0),
                          "--judge-model", str(judge), "--judge-gpus", "0,1", "--judge-port", str(pj),
                          "--venv", str(tmp_path / "venv"), "--server-arg=--context-length 4096", "--dry-run"],
                         capsys)
    assert rc == 0
    lines = out.strip().splitlines()
    venv_py = str(tmp_path / "venv" / "bin" / "python")
    assert lines[0] == f"{sys.executable} -m venv {tmp_path / 'venv'}"
    assert lines[1] == f"{venv_py} -m pip install sglang==0.5.23"
    servers = [shlex.split(line) for line in lines[2:5]]
    for argv, port, gpu, seed in ((servers[0], p0, 2, 0), (servers[1], p1, 3, 1)):
        assert argv == [venv_py, "-m", "sglang.launch_server", "--model-path", str(model_dir), "--host",
                        "127.0.0.1", "--port", str(port), "--random-seed", str(seed), "--mem-fraction-static",
                        "0.8", "--base-gpu-id", str(gpu), "--context-length", "4096"]
    assert servers[2][servers[2].index("--base-gpu-id") + 1] == "0"
    assert servers[2][servers[2].index("--tp-size") + 1] == "2"  # both judge GPUs, tensor-parallel
    assert servers[2][servers[2].index("--served-model-name") + 1] == "judge"
    train = shlex.split(lines[5])
    assert train[:3] == ["prover", "train", "engine.name=sglang"]
    overrides = dict(parse_override(t) for t in train[2:])  # what `prover train` will read
    assert overrides["engine.kwargs.urls"] == [f"http://127.0.0.1:{p0}", f"http://127.0.0.1:{p1}"]
    assert overrides["judge.name"] == "litellm" and overrides["judge.model"] == "openai/judge"
    assert overrides["judge.api_base"] == f"http://127.0.0.1:{pj}/v1"
    assert len(lines) == 6


def test_tensor_and_data_parallel_servers(model_dir, capsys):
    rc, out, err = run_cli(["serve", "--model", str(model_dir), "--gpus", "0,1,2,3", "--tp", "2", "--dp", "2",
                            "--port", str(free_port()), "--python", "py", "--dry-run"], capsys)
    [server, _train] = out.strip().splitlines()  # --python: no venv commands; 4 GPUs = one tp2 x dp2 server
    assert server.startswith("py -m sglang.launch_server") and "--tp-size 2 --dp-size 2" in server
    assert "--base-gpu-id 0" in server and rc == 0
    assert "keep engine.kwargs.sync=disk" in err  # SGLang takes no broadcast update with dp_size > 1


@pytest.mark.parametrize("case", ["missing", "no_config", "port", "gpus", "split", "judge_port", "key_arg"])
def test_bad_input_is_one_line_exit_2(case, model_dir, tmp_path, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        argv, expect = {
            "missing": (["--model", str(tmp_path / "nope")], "no such folder"),
            "no_config": (["--model", str(tmp_path)], "has no config.json"),
            "port": (["--model", str(model_dir), "--port", str(taken)], f"port {taken} on 127.0.0.1 is not free"),
            "gpus": (["--model", str(model_dir), "--gpus", "0,2", "--tp", "2"], "GPUs [0, 2] of one server are "
                     "not consecutive"),
            "split": (["--model", str(model_dir), "--gpus", "0,1,2", "--tp", "2"], "not a multiple of the 2"),
            "judge_port": (["--model", str(model_dir), "--gpus", "0,1", "--port", "30500", "--judge-model",
                            str(model_dir), "--judge-port", "30501"], "share ports"),
            "key_arg": (["--model", str(model_dir), "--server-arg=--api-key sk-x"], "PROVER_SGLANG_API_KEY, not"),
        }[case]
        rc, out, err = run_cli(["serve", *argv, "--dry-run"], capsys)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("prover: error: ") and expect in err, err


KEY = "sk-serve-test-5e8d21"


def test_the_api_key_reaches_every_server_but_no_printed_line(model_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PROVER_SGLANG_API_KEY", KEY)
    rc, out, err = run_cli(["serve", "--model", str(model_dir), "--port", str(free_port()), "--judge-model",
                            str(model_dir), "--judge-port", str(free_port()), "--python", "py", "--dry-run"], capsys)
    assert rc == 0 and KEY not in out + err
    [policy, judge, train] = out.strip().splitlines()
    for line in (policy, judge):  # a shell where the variable is set runs the printed line with the key
        argv = subprocess.run(["bash", "-c", f'set -- {line}; printf "%s\\n" "$@"'], capture_output=True, text=True,
                              env=dict(os.environ, PROVER_SGLANG_API_KEY=KEY), timeout=30).stdout.splitlines()
        assert argv[argv.index("--api-key") + 1] == KEY and '--api-key "$PROVER_SGLANG_API_KEY"' in line
    assert "judge.api_key_env=PROVER_SGLANG_API_KEY" in train.split()  # the litellm judge sends it too


@pytest.mark.slow
def test_a_served_key_is_passed_on_and_blanked_in_the_logs(fake_sglang, model_dir, tmp_path):
    fake_dir, record = fake_sglang
    port, logs = free_port(), tmp_path / "logs"
    serve = Serve(["--model", str(model_dir), "--port", str(port), "--python", sys.executable, "--log-dir",
                   str(logs), "--timeout", "60"], dict(_env(fake_dir, record, "ok"), PROVER_SGLANG_API_KEY=KEY))
    out = serve.wait_for("Ctrl-C stops the servers")
    argv = json.loads((record / f"{port}.json").read_text())["argv"]
    assert argv[argv.index("--api-key") + 1] == KEY
    serve.proc.send_signal(signal.SIGINT)
    rc, err = serve.finish()
    log = (logs / f"policy-{port}.log").read_text()
    assert rc == 0 and "server_args=" in log and "'--api-key', '***'" in log
    assert KEY not in "".join(out) + err + log


@pytest.mark.slow
def test_bad_input_from_the_console_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "prover.cli", "serve", "--model", str(tmp_path / "nope")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "--model" in proc.stderr and "Traceback" not in proc.stderr


# -- real processes --------------------------------------------------------------------------------

class Serve:
    """`prover serve` as a child process, its stdout read line by line without blocking the test."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "prover.cli", "serve", *argv], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        try:
            for line in self.proc.stdout:
                self.lines.put(line)
        except ValueError:  # the test closed the pipe (communicate) while this thread was reading
            pass

    def wait_for(self, text: str, timeout: float = 120) -> list[str]:
        seen, deadline = [], time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                seen.append(self.lines.get(timeout=0.2))
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            if text in seen[-1]:
                return seen
        self.proc.kill()
        pytest.fail(f"no {text!r} from prover serve; stdout {seen}, stderr {self.proc.stderr.read()}")

    def finish(self, timeout: float = 60) -> tuple[int, str]:
        try:
            _, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail("prover serve did not stop")
        return self.proc.returncode, err


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _env(fake_dir: Path, record: Path, mode: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake_dir), os.environ.get("PYTHONPATH", "")]),
                FAKE_SGLANG=mode, FAKE_SGLANG_RECORD=str(record), PYTHONWARNINGS="ignore")


def _wait_gone(pid: int, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])  # Ctrl-C; a scheduler or a trap
def test_start_wait_healthy_and_stop(stop_signal, fake_sglang, model_dir, tmp_path):
    fake_dir, record = fake_sglang
    p0, pj = free_port(), free_port()
    serve = Serve(["--model", str(model_dir), "--gpus", "0,1", "--port", str(p0), "--judge-model", str(model_dir),
                   "--judge-port", str(pj), "--python", sys.executable, "--log-dir", str(tmp_path / "logs"),
                   "--timeout", "60"], _env(fake_dir, record, "ok"))
    out = serve.wait_for("Ctrl-C stops the servers")
    ports = [p0, p0 + 1, pj]
    assert all(healthy(f"http://127.0.0.1:{p}") for p in ports)
    train = next(line for line in out if line.strip().startswith("prover train"))
    assert f"engine.kwargs.urls=[http://127.0.0.1:{p0},http://127.0.0.1:{p0 + 1}]" in train
    assert f"judge.api_base=http://127.0.0.1:{pj}/v1" in train
    started = {p: json.loads((record / f"{p}.json").read_text()) for p in ports}
    assert started[p0 + 1]["argv"][started[p0 + 1]["argv"].index("--base-gpu-id") + 1] == "1"
    serve.proc.send_signal(stop_signal)
    rc, err = serve.finish()
    assert rc == 0 and "stopping the servers" in err
    for p in ports:
        assert _wait_gone(started[p]["pid"]), f"the server on port {p} is still running"
        assert not healthy(f"http://127.0.0.1:{p}", timeout_s=1)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["exit", "sick"])
def test_a_server_that_fails_is_one_line_naming_its_log(mode, fake_sglang, model_dir, tmp_path):
    fake_dir, record = fake_sglang
    port = free_port()
    serve = Serve(["--model", str(model_dir), "--port", str(port), "--python", sys.executable,
                   "--log-dir", str(tmp_path / "logs"), "--timeout", "3"], _env(fake_dir, record, mode))
    rc, err = serve.finish(timeout=90)
    log = tmp_path / "logs" / f"policy-{port}.log"
    assert rc == 2 and err.count("\n") == 1 and str(log) in err, err
    if mode == "exit":
        assert "exited with code 3" in err and "CUDA out of memory" in log.read_text()
    else:
        assert "did not answer" in err and "within 3 s" in err
    pid = json.loads((record / f"{port}.json").read_text())["pid"]
    assert _wait_gone(pid), "the failed server was left running"


@pytest.mark.slow
def test_a_server_that_dies_later_stops_the_others(fake_sglang, model_dir, tmp_path):
    fake_dir, record = fake_sglang
    port = free_port()
    serve = Serve(["--model", str(model_dir), "--gpus", "0,1", "--port", str(port), "--python", sys.executable,
                   "--log-dir", str(tmp_path / "logs"), "--timeout", "60", "--poll", "0.2"],
                  _env(fake_dir, record, "ok"))
    serve.wait_for("Ctrl-C stops the servers")
    pids = [json.loads((record / f"{p}.json").read_text())["pid"] for p in (port, port + 1)]
    os.kill(pids[1], signal.SIGKILL)  # a crash while serving (out of memory, a driver fault)
    rc, err = serve.finish()
    assert rc == 2 and err.count("\n") == 1
    assert f"the policy server on port {port + 1} exited with code -9; see {tmp_path / 'logs'}" in err
    assert _wait_gone(pids[0]), "the surviving server was left running"


def _fake_wheel(folder: Path, launcher: str) -> Path:
    """A minimal ``sglang`` wheel holding the stand-in launcher: pip installs it with no index."""
    files = {"sglang/__init__.py": "", "sglang/launch_server.py": launcher,
             "sglang-0.0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: sglang\nVersion: 0.0.1\n",
             "sglang-0.0.1.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                              "Tag: py3-none-any\n"}
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    record.append("sglang-0.0.1.dist-info/RECORD,,")
    wheel = folder / "sglang-0.0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
        z.writestr("sglang-0.0.1.dist-info/RECORD", "\n".join(record) + "\n")
    return wheel


@pytest.fixture(scope="module")
def sglang_venv(tmp_path_factory):
    """(venv, pip spec, notes): a venv made by ensure_venv from a stand-in sglang wheel (once per module:
    creating a venv takes seconds)."""
    root = tmp_path_factory.mktemp("venv")
    spec = f"--no-index {_fake_wheel(root, FAKE_LAUNCHER)}"
    notes: list[str] = []
    ensure_venv(root / "sglang-venv", spec, notes.append)
    return root / "sglang-venv", spec, notes


@pytest.mark.slow
def test_the_sglang_venv_is_created_once_and_serves(sglang_venv, model_dir, tmp_path):
    """The default path: a venv of its own, `pip install <--sglang>` into it, servers started from it."""
    venv, spec, notes = sglang_venv
    assert len(notes) == 1 and "sglang-venv-install.log" in notes[0]
    assert ensure_venv(venv, spec, notes.append) == str(venv / "bin" / "python") and len(notes) == 1  # reused
    port = free_port()
    env = dict(os.environ, FAKE_SGLANG="ok", FAKE_SGLANG_RECORD=str(tmp_path))
    serve = Serve(["--model", str(model_dir), "--port", str(port), "--venv", str(venv), "--sglang", spec,
                   "--log-dir", str(tmp_path / "logs"), "--timeout", "60"], env)
    serve.wait_for("Ctrl-C stops the servers")
    serve.proc.send_signal(signal.SIGINT)
    assert serve.finish()[0] == 0
    launched = json.loads((tmp_path / f"{port}.json").read_text())
    assert launched["argv"][:2] == ["--model-path", str(model_dir)]


@pytest.mark.slow
def test_a_failed_install_names_its_log_and_keeps_the_old_one(sglang_venv, tmp_path):
    from prover.errors import EngineError

    venv, spec, notes = sglang_venv
    with pytest.raises(EngineError, match=r"pip install --no-index .*nothing.whl` failed; see .*install.log"):
        ensure_venv(venv, f"--no-index {tmp_path / 'nothing.whl'}", notes.append)
    assert ensure_venv(venv, spec, notes.append) and len(notes) == 2  # the working install is still recorded
