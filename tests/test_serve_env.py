"""`prover serve-env`: prover envs served over OpenEnv's protocol, played with OpenEnv's own client
(``openenv.core.generic_client.GenericEnvClient``) against a real server on 127.0.0.1, episode by episode equal
to the same env played in this process. Needs the ``openenv`` extra; those tests skip without it."""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from prover.cli import main
from prover.envs import make_env

HAS_OPENENV = importlib.util.find_spec("openenv") is not None
needs_openenv = pytest.mark.skipif(not HAS_OPENENV, reason="openenv-core is not installed: pip install -e '.[openenv]'")
PIVOT_ARGS = ["pivot-sim", "env.kwargs.n_pivots=2", "delay=3"]
PIVOT_KWARGS = {"n_pivots": 2, "delay": 3}
TIMEOUT_S = 60  # one client message, or a server's start; every wait in this file is bounded


class EnvServer:
    """`prover serve-env` as a child process on a port the OS picks (--port 0), read from its first line."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "prover.cli", "serve-env", *argv, "--port", "0"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=dict(os.environ, OMP_NUM_THREADS="1"))
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.url = self._wait_url()

    def _pump(self) -> None:
        try:
            for line in self.proc.stdout:
                self.lines.put(line)
        except ValueError:  # the pipe was closed by communicate() while this thread read it
            pass

    def _wait_url(self) -> str:
        deadline = time.monotonic() + 2 * TIMEOUT_S  # openenv's imports take seconds on a busy machine
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            if line.startswith("serving "):
                return line.split(" at ", 1)[1].split()[0]
        self.proc.kill()
        pytest.fail(f"prover serve-env did not start: {self.proc.communicate(timeout=TIMEOUT_S)}")

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str]:
        self.proc.send_signal(sig)
        try:
            _, err = self.proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate(timeout=TIMEOUT_S)
            pytest.fail("prover serve-env did not stop")
        return self.proc.returncode, err


def client(url: str):
    from openenv.core.generic_client import GenericEnvClient

    return GenericEnvClient(base_url=url, connect_timeout_s=TIMEOUT_S, message_timeout_s=TIMEOUT_S).sync()


@pytest.fixture(scope="module")
def pivot_server():
    server = EnvServer(PIVOT_ARGS)
    yield server
    server.stop()


def play_both(remote, env, seed: int, actions: list[str] | None, split: str = "train") -> list:
    """One episode on the server and on ``env`` in this process, the same actions; asserts every step equal
    and returns the server's results. ``actions`` None: the in-process env's expert picks each one."""
    first = remote.reset(seed=seed, split=split)
    obs, info = env.reset(seed=seed, options={"split": split})
    spec, history = env.agent_spec, []
    assert (first.observation["text"], first.observation["info"], first.reward, first.done) == (obs, info, None, False)
    task = info["task"]
    assert first.observation["prompt"] == spec.render(task, obs, info["admissible_actions"], [], 0)
    results, t = [first], 0
    while True:
        action = env.expert_action() if actions is None else actions[t]
        got = remote.step({"text": action})
        history.append((obs, action))
        obs, reward, terminated, truncated, info = env.step(action)
        seen = got.observation
        assert (seen["text"], got.reward, got.done) == (obs, reward, terminated or truncated), f"turn {t}"
        assert (seen["terminated"], seen["truncated"], seen["info"]) == (terminated, truncated, info), f"turn {t}"
        assert seen["admissible_actions"] == info["admissible_actions"] and seen["task"] == task
        done = terminated or truncated
        assert seen["prompt"] == ("" if done else spec.render(task, obs, info["admissible_actions"], history, t + 1))
        results.append(got)
        t += 1
        if done or (actions is not None and t == len(actions)):
            return results


@needs_openenv
@pytest.mark.slow
def test_an_expert_episode_equals_the_in_process_one_and_ends_with_its_pivotal_turns(pivot_server):
    env = make_env("pivot-sim", **PIVOT_KWARGS)
    with client(pivot_server.url) as remote:
        results = play_both(remote, env, seed=3, actions=None)
        state = remote.state()
    actions = [env.replay_record()[2][t] for t in range(len(results) - 1)]
    assert results[-1].done and results[-1].reward == 1.0 and results[-1].observation["info"]["won"]
    # pivot-sim's definition: a turn is pivotal when the best achievable success depends on its action. On the
    # expert's path (turn budget to spare) that is each rack, where a wrong item loses; walking and waiting
    # lose nothing
    assert results[-1].observation["pivotal_turns"] == [t for t, a in enumerate(actions) if a.startswith("take ")]
    assert len(results[-1].observation["pivotal_turns"]) == 2
    assert all(r.observation["pivotal_turns"] is None for r in results[:-1])
    assert state["step_count"] == len(actions) and state["done"] and state["won"] and state["seed"] == 3
    assert state["env_name"] == "pivot-sim" and state["state_key"] == repr(env.state_key())


@needs_openenv
@pytest.mark.slow
def test_a_fixed_action_list_with_a_wrong_item_and_a_refused_action(pivot_server):
    env = make_env("pivot-sim", **PIVOT_KWARGS)
    probe = make_env("pivot-sim", **PIVOT_KWARGS)
    info, prefix = probe.reset(seed=11, options={"split": "test"})[1], []
    while not (right := probe.expert_action()).startswith("take "):  # the expert's walk to the first rack
        prefix.append(right)
        info = probe.step(right)[4]
    wrong = next(a for a in info["admissible_actions"] if a.startswith("take ") and a != right)
    # then "go forward" on: refused at the second rack (an item must be taken), until the env's step cap
    actions = prefix + ["fly away", wrong] + ["go forward"] * 100
    with client(pivot_server.url) as remote:
        results = play_both(remote, env, seed=11, actions=actions, split="test")
    k = len(prefix)
    assert results[k + 1].observation["info"]["is_action_valid"] is False  # "fly away" is refused, not fatal
    assert results[-1].done and results[-1].observation["truncated"] and results[-1].reward == 0.0
    # pivotal: the turns spent at the first rack while it is open (turn k, refused, and turn k + 1, the wrong
    # item), where the right item keeps success possible and a wrong one loses it; the second rack, after the
    # wrong item, is not: every action there gives 0
    assert results[-1].observation["pivotal_turns"] == [k, k + 1]


@needs_openenv
@pytest.mark.slow
def test_sessions_are_independent_and_a_drawn_seed_is_reported(pivot_server):
    with client(pivot_server.url) as one, client(pivot_server.url) as two:
        a = one.reset()
        b = two.reset(seed=5)
        one.step({"text": "go forward"})
        state_a, state_b = one.state(), two.state()
    assert state_a["step_count"] == 1 and state_b["step_count"] == 0 and state_b["seed"] == 5
    env = make_env("pivot-sim", **PIVOT_KWARGS)
    assert env.reset(seed=state_a["seed"])[0] == a.observation["text"]  # the seed the env drew replays it
    assert env.reset(seed=5)[0] == b.observation["text"]


@needs_openenv
@pytest.mark.slow
@pytest.mark.parametrize("call, words", [
    (lambda c: c.step({"text": "go forward"}), "call reset first"),
    (lambda c: c.reset(sed=3), "unknown argument(s) ['sed']"),
    (lambda c: c.reset(seed=-1), "a run seed is an integer from 0 to 2147483647"),
    (lambda c: c.reset(seed=2**64), "reset seed 18446744073709551616: a run seed is an integer from 0 to"),
    (lambda c: c.reset(seed=1, options={"split": "test", "colour": "red"}), "reset options ['colour'] unknown"),
    (lambda c: c.reset(seed=1, split=3), "reset split: give a name"),
    (lambda c: c.reset(seed=1, split="dev"), "unknown split 'dev'"),
])
def test_bad_calls_are_one_line_server_errors(pivot_server, call, words):
    with client(pivot_server.url) as remote:
        with pytest.raises(RuntimeError, match="Server error") as err:
            call(remote)
        assert words in str(err.value) and "\n" not in str(err.value)
        assert remote.reset(seed=1).observation["text"]  # the session goes on


@needs_openenv
@pytest.mark.slow
def test_the_stateless_http_routes(pivot_server):
    """OpenEnv's HTTP routes build a fresh env per request: /reset answers, /step is a one-line 400."""
    def post(path: str, body: dict) -> tuple[int, dict]:
        request = urllib.request.Request(pivot_server.url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as reply:
                return reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    status, reply = post("/reset", {"seed": 3})
    assert status == 200 and reply["observation"]["text"] == make_env("pivot-sim", **PIVOT_KWARGS).reset(seed=3)[0]
    status, reply = post("/step", {"action": {"text": "go forward"}})
    assert status == 400 and "call reset first" in reply["detail"]
    with urllib.request.urlopen(pivot_server.url + "/health", timeout=TIMEOUT_S) as reply:
        assert json.loads(reply.read()) == {"status": "healthy"}


def raw_session(url: str):
    """A WebSocket to the server's /ws, spoken to in raw text (OpenEnv's client sends only well-formed messages)."""
    from websockets.sync.client import connect

    return connect(url.replace("http", "ws", 1) + "/ws", open_timeout=TIMEOUT_S, close_timeout=5,
                   max_size=None)


@needs_openenv
@pytest.mark.slow
def test_every_malformed_message_is_one_line_and_the_session_goes_on(pivot_server):
    long_action = json.dumps({"type": "step", "data": {"text": "go " * 30_000}})  # 90 000 characters, 90 kB
    cases = [
        ("[1,2]", "a message is a JSON object with a type (reset, step, state, close), not a JSON array"),
        ('"reset"', "not a JSON string"),
        ("{not json", "a message is one JSON object; this one does not parse"),
        ('{"type": "fly"}', "unknown message type 'fly'; this server takes reset, step, state, close"),
        ('{"type": "reset", "data": [1], "x": 1}', "a reset message holds type and data only, not ['x']"),
        ('{"type": "reset", "data": [1]}', "a reset message's data is a JSON object, not a JSON array"),
        ('{"type": "step", "data": {"text": 5}}', "holds the action as text, {\"text\": \"...\"}, not a JSON number"),
        ('{"type": "step"}', "not no text"),
        (json.dumps({"type": "reset", "data": {"seed": 2**70}}), "a run seed is an integer from 0 to 2147483647"),
        (json.dumps({"type": "reset", "data": {"seed": 1, "options": {"max_turns": 9}}}),
         "reset options ['max_turns'] unknown; options hold split only"),
        (long_action, "an action is text of at most 65536 characters (the env's action space), not 90000 characters"),
    ]
    with raw_session(pivot_server.url) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"seed": 1}}))
        assert json.loads(ws.recv(timeout=TIMEOUT_S))["type"] == "observation"
        for text, words in cases:
            ws.send(text)
            reply = json.loads(ws.recv(timeout=TIMEOUT_S))
            line = reply["data"]["message"]
            assert reply["type"] == "error" and words in line and "\n" not in line, (text[:80], line)
        ws.send(json.dumps({"type": "step", "data": {"text": "go forward"}}))  # the session goes on
        assert json.loads(ws.recv(timeout=TIMEOUT_S))["type"] == "observation"


@needs_openenv
@pytest.mark.slow
def test_a_websocket_message_past_the_bound_closes_that_session_only(pivot_server):
    from websockets.exceptions import ConnectionClosed

    from prover.commands.serve_env_guard import MAX_MESSAGE_BYTES

    with raw_session(pivot_server.url) as ws:
        ws.send(json.dumps({"type": "step", "data": {"text": "x" * MAX_MESSAGE_BYTES}}))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=TIMEOUT_S)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009  # message too big
    with client(pivot_server.url) as remote:
        assert remote.reset(seed=1).observation["text"]


@needs_openenv
@pytest.mark.slow
def test_http_bodies_are_bounded_and_bad_ones_are_one_line(pivot_server):
    import http.client
    from urllib.parse import urlsplit

    from prover.commands.serve_env_guard import MAX_MESSAGE_BYTES

    where = urlsplit(pivot_server.url)

    def post(body, chunked: bool = False) -> tuple[int, dict]:
        conn = http.client.HTTPConnection(where.hostname, where.port, timeout=TIMEOUT_S)
        try:
            headers = {"Content-Type": "application/json"}
            if chunked:
                conn.request("POST", "/reset", body=iter([body[i:i + 65536] for i in range(0, len(body), 65536)]),
                             headers=headers, encode_chunked=True)
            else:
                conn.request("POST", "/reset", body=body, headers=headers)
            reply = conn.getresponse()
            return reply.status, json.loads(reply.read())
        finally:
            conn.close()

    big = json.dumps({"seed": 1, "episode_id": "x" * (2 * MAX_MESSAGE_BYTES)}).encode()
    for chunked in (False, True):
        status, reply = post(big, chunked)
        assert status == 413 and reply["detail"].startswith(f"a request body holds at most {MAX_MESSAGE_BYTES} bytes")
    status, reply = post(b"[1,2]")
    assert status == 422 and reply["detail"] == ("request body: Input should be a valid dictionary or object to "
                                                 "extract fields from")
    status, reply = post(json.dumps({"seed": 2**64}).encode())
    assert status == 400 and "a run seed is an integer from 0 to 2147483647" in reply["detail"]
    status, reply = post(json.dumps({"seed": 1, "options": {"colour": "red"}}).encode())
    assert status == 400 and "reset options ['colour'] unknown" in reply["detail"]
    assert post(json.dumps({"seed": 3}).encode())[0] == 200


@needs_openenv
@pytest.mark.slow
def test_alfworld_sim_first_admissible_actions_equal_in_process():
    server = EnvServer(["alfworld-sim"])
    try:
        env, probe = make_env("alfworld-sim"), make_env("alfworld-sim")
        info, actions = probe.reset(seed=2)[1], []
        for _ in range(8):  # a fixed list: each turn the alphabetically first admissible action
            actions.append(sorted(info["admissible_actions"])[0])
            _, _, terminated, truncated, info = probe.step(actions[-1])
            if terminated or truncated:
                break
        with client(server.url) as remote:
            results = play_both(remote, env, seed=2, actions=actions)
        assert len(results) == len(actions) + 1
    finally:
        rc, err = server.stop(signal.SIGINT)
    assert rc == 0 and "stopped" in err and "Traceback" not in err


@needs_openenv
@pytest.mark.slow
def test_sigterm_with_a_session_open_stops_gracefully():
    server = EnvServer(["pivot-sim"])
    with client(server.url) as remote:
        remote.reset(seed=1)
        rc, err = server.stop(signal.SIGTERM)
    assert rc == 0 and err.strip().splitlines()[-1] == "serve-env: stopped; pivot-sim's sessions are closed"
    assert "Traceback" not in err


# -- one-line errors, in this process -------------------------------------------------------------

@pytest.fixture
def never_serves(monkeypatch):
    """Bad input must stop the command before it binds a port; were a check gone, the test fails at once
    instead of serving until killed."""
    import prover.commands.serve_env as serve_env

    def refuse(host: str, port: int):
        raise AssertionError(f"serve-env got as far as binding {host}:{port}")

    monkeypatch.setattr(serve_env, "bind", refuse)


def one_line(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("prover: error: ") and "Traceback" not in err
    return err


def test_an_unknown_env_name_is_one_line(capsys, never_serves):
    assert "no-such-env" in one_line(["serve-env", "no-such-env"], capsys)


@pytest.mark.parametrize("arg, words", [("rollout.group_size=8", "not an env setting"),
                                        ("n_pivots=0", "n_pivots"), ("novalue", "KEY=VALUE")])
def test_bad_env_settings_are_one_line(arg, words, capsys, never_serves):
    assert words in one_line(["serve-env", "pivot-sim", arg], capsys)


def test_without_openenv_it_says_how_to_install(monkeypatch, capsys, never_serves):
    monkeypatch.setitem(sys.modules, "openenv", None)  # as if not installed: find_spec None, the import fails
    assert ".[openenv]" in one_line(["serve-env", "pivot-sim"], capsys)


@needs_openenv
@pytest.mark.slow
def test_a_busy_port_is_one_line(capsys):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        assert f"port {port} on 127.0.0.1 is not free" in one_line(["serve-env", "pivot-sim", "--port", str(port)],
                                                                   capsys)


@needs_openenv
def test_info_is_made_json_plain():
    import numpy as np

    from prover.commands.openenv_bridge import plain

    assert plain({"a": (1, np.float32(0.5)), 2: [np.bool_(True), None, "x"], "p": Path("/t")}) == {
        "a": [1, 0.5], "2": [True, None, "x"], "p": "/t"}
    assert type(plain(np.int64(3))) is int


@needs_openenv
def test_a_failing_pivotal_turns_is_reported_and_the_step_still_answers(monkeypatch):
    from prover.commands.openenv_bridge import EnvAction, ProverEnvironment
    from prover.errors import ContractError

    env = make_env("pivot-sim", **PIVOT_KWARGS)

    def broken(trajectory):
        raise ValueError("no oracle\nfor this")

    monkeypatch.setattr(env, "pivotal_turns", broken)
    served = ProverEnvironment("pivot-sim", env=env)
    served.reset(seed=3)
    while not (last := served.step(EnvAction(text=env.expert_action()))).done:
        pass
    assert last.reward == 1.0 and last.pivotal_turns is None
    assert last.info["pivotal_turns_error"] == "ValueError: no oracle for this" and last.info["won"] is True
    with pytest.raises(ContractError, match="the episode is over"):
        served.step(EnvAction(text="go forward"))


def test_settings_come_from_the_config_file_and_the_arguments(tmp_path: Path):
    from prover.commands.serve_env import env_settings

    config = tmp_path / "c.yaml"
    config.write_text("env:\n  name: pivot-sim\n  kwargs: {n_pivots: 1, delay: 5}\nrollout:\n  group_size: 4\n")
    assert env_settings(None, str(config), ["delay=2"]) == ("pivot-sim", {"n_pivots": 1, "delay": 2})
    assert env_settings("alfworld-sim", None, []) == ("alfworld-sim", {})
    # typed by the field, as `prover train` reads overrides: task_types is a sequence of str
    assert env_settings("alfworld-sim", None, ["task_types=[yes, 010]"]) == ("alfworld-sim",
                                                                           {"task_types": ["yes", "010"]})


def test_a_bad_env_section_is_one_line(tmp_path: Path, capsys, never_serves):
    config = tmp_path / "c.yaml"
    config.write_text("env:\n  name: pivot-sim\n  kwarg: {n_pivots: 1}\n")
    assert "unknown config field 'env.kwarg'" in one_line(["serve-env", "--config", str(config)], capsys)
