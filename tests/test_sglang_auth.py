"""Servers that change the policy's weights: SGLang's ``--api-key`` end to end against the scripted server
(tests/sglang_server.py refuses what SGLang refuses), and the distributed sync's rendezvous, which must
listen on the address it is given and on no other.

The engine reads the key from PROVER_SGLANG_API_KEY and sends it on every request; without it a weight
update is one line naming the variable; with it a training run through the disk and the broadcast syncs
works, and no file of the run nor anything it printed holds the key."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch

from prover.config import LearnerConfig
from prover.engines.sglang import SGLangEngine
from prover.engines.sglang_http import API_KEY_ENV
from prover.engines.sglang_sync import join_weight_group, listen_socket
from prover.errors import EngineError
from prover.types import SamplingParams
from sglang_server import SGLangTestServer

KEY = "sk-prover-test-7f3a9c51"
FAST = {"retries": 1, "retry_backoff_s": 0.01}
GREEDY = SamplingParams(max_new_tokens=6, temperature=0.0)


def _post(url: str, body: dict, key: str | None = None) -> int:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as reply:
            return reply.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_keyless_weight_update_is_refused_in_one_line(tiny_policy_dir, monkeypatch):
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    with SGLangTestServer(str(tiny_policy_dir), api_key=KEY) as srv:
        body = {"model_path": str(tiny_policy_dir)}
        assert _post(srv.url + "/update_weights_from_disk", body) == 401  # what SGLang answers without it
        with pytest.raises(EngineError) as err:  # the engine loads the starting policy: a weight update
            SGLangEngine(str(tiny_policy_dir), urls=[srv.url], **FAST)
        line = str(err.value)
        assert "\n" not in line and "/update_weights_from_disk answered HTTP 401: Unauthorized" in line
        assert f"set {API_KEY_ENV} to that key" in line
        monkeypatch.setenv(API_KEY_ENV, "sk-wrong-key-0042")
        with pytest.raises(EngineError, match=f"{API_KEY_ENV} is not the key it was started with") as err:
            SGLangEngine(str(tiny_policy_dir), urls=[srv.url], **FAST)
        assert "sk-wrong-key-0042" not in str(err.value)
        assert srv.syncs == 0


def test_with_the_key_every_request_carries_it_and_weights_update(tiny_policy_dir, monkeypatch):
    from prover.learning.learner import Learner

    monkeypatch.setenv(API_KEY_ENV, KEY)
    with SGLangTestServer(str(tiny_policy_dir), api_key=KEY, weights_readable=True) as srv:
        eng = SGLangEngine(str(tiny_policy_dir), urls=[srv.url], check_weights=True, **FAST)
        assert eng.generate([[1, 2, 3]], GREEDY)[0].token_ids
        learner = Learner(tiny_policy_dir, LearnerConfig())
        with torch.no_grad():
            for p in learner.unwrapped().parameters():
                p.add_(0.1 * torch.randn_like(p))
        eng.update_weights(learner)  # checked by reading weights back, also with the key
        assert srv.syncs == 2
        assert srv.authorizations and set(srv.authorizations) == {f"Bearer {KEY}"}
        assert KEY not in json.dumps(eng.config.model_dump())


@pytest.mark.parametrize("sync", ["disk", "distributed"])
def test_a_train_run_through_keyed_servers_keeps_the_key_out_of_its_files(sync, tiny_run_overrides, tiny_policy_dir,
                                                                         tmp_path, monkeypatch, capsys):
    """The server runs in its own process, as SGLang does (a process group is per process)."""
    from prover.cli import main

    monkeypatch.setenv(API_KEY_ENV, KEY)
    proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("sglang_server.py")), str(tiny_policy_dir),
                             "--api-key", KEY, "--weights-readable"], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("ready "), line
        url = line.split()[1]
        engine = ["engine.name=sglang", f"engine.kwargs.urls=[{url}]", f"engine.kwargs.sync={sync}",
                  "engine.kwargs.backend=gloo", f"engine.kwargs.group_name=prover_test_auth_{sync}",
                  "engine.kwargs.check_weights=true", "engine.kwargs.sync_timeout_s=60"]
        assert main(["train", *tiny_run_overrides, "steps=1", *engine]) == 0
        assert _post(url + "/update_weights_from_disk", {"model_path": str(tiny_policy_dir)}) == 401
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    out, err = capsys.readouterr()
    assert KEY not in out + err
    run = tmp_path / "run"
    files = [p for p in run.rglob("*") if p.is_file()]
    assert any(p.name == "model.safetensors" for p in files) and any(p.name == "config.yaml" for p in files)
    assert [p for p in files if KEY.encode() in p.read_bytes()] == []


def _listening(port: int) -> set[str]:
    import psutil

    return {c.laddr.ip for c in psutil.Process().net_connections("tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port}


def test_the_weight_groups_rendezvous_listens_on_the_address_given_only():
    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    group = join_weight_group("127.0.0.1", port, 1, 0, "prover_test_bind", "gloo", 30.0)  # world of one: no wait
    try:
        assert _listening(port) == {"127.0.0.1"}  # torch's own tcp:// rendezvous listens on '::'
    finally:
        dist.destroy_process_group(group)


def test_a_rendezvous_port_in_use_is_one_line():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        with pytest.raises(EngineError, match=f"cannot listen on master_address '127.0.0.1' port {port}") as err:
            listen_socket("127.0.0.1", port)
    assert "\n" not in str(err.value)
