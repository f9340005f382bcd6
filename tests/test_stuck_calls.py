"""Every network call is bounded as a whole, not per read, and a stop reaches a call in flight.
Real servers on 127.0.0.1 that trickle their replies (tests/trickle_server.py), a real training process and
a real SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from trickle_server import TrickleServer

TESTS = Path(__file__).parent
MODES = ["body", "chunked", "headers"]
TIMEOUT_S = 1.5
SLACK_S = 3.0  # a bounded call ends within its timeout plus this (one trickled byte, thread start-up)


def _timed(fn) -> tuple[float, BaseException]:
    start = time.monotonic()
    with pytest.raises(Exception) as info:
        fn()
    return time.monotonic() - start, info.value


@pytest.mark.parametrize("mode", MODES)
def test_the_retriever_gives_up_on_a_trickling_server_within_its_timeout(mode):
    from prover.errors import RetrievalError
    from prover.retrieval.http import HttpRetriever

    with TrickleServer(mode, pause_s=0.3) as srv:
        took, exc = _timed(lambda: HttpRetriever(srv.url, timeout=TIMEOUT_S).search("q"))
    assert isinstance(exc, RetrievalError) and f"did not answer within {TIMEOUT_S:g} s" in str(exc)
    assert took < TIMEOUT_S + SLACK_S


@pytest.mark.parametrize("mode", MODES)
def test_the_engine_client_gives_up_on_a_trickling_server_within_its_timeout(mode):
    from prover.engines.sglang_http import ServerClient
    from prover.errors import EngineError

    with TrickleServer(mode, pause_s=0.3) as srv:
        took, exc = _timed(lambda: ServerClient(srv.url, TIMEOUT_S, retries=0).get("/get_model_info"))
    assert isinstance(exc, EngineError) and f"within {TIMEOUT_S:g} s" in str(exc)
    assert took < TIMEOUT_S + SLACK_S


@pytest.mark.parametrize("mode", MODES)
def test_the_litellm_judge_model_gives_up_on_a_trickling_server_within_its_timeout(mode):
    pytest.importorskip("litellm")
    from prover.chat.base import ChatError
    from prover.chat.client import LiteLLMChat, LiteLLMSettings

    with TrickleServer(mode, pause_s=0.3) as srv:
        chat = LiteLLMChat(LiteLLMSettings(model="openai/x", api_base=srv.url + "/v1", timeout_s=TIMEOUT_S,
                                           max_retries=0, cache=False))
        chat.check_ready()  # litellm's import is not the request's time
        took, exc = _timed(lambda: chat.chat([{"role": "user", "content": "hi"}]))
    assert isinstance(exc, ChatError) and exc.kind == "timeout", exc
    assert took < TIMEOUT_S + SLACK_S


def _lock_is_free(folder: Path) -> bool:
    import fcntl

    fd = os.open(folder / ".lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


@pytest.mark.slow
def test_sigterm_stops_a_run_whose_judge_trickles_its_reply_at_once_and_the_run_resumes(tmp_path):
    """The judge's timeout is 10 minutes, so only the stop can end the call: one line, exit 143 within a few
    seconds, the lock free, and --resume continues from the last checkpoint."""
    pytest.importorskip("litellm")
    from conftest import TINY_RUN

    folder = tmp_path / "run"
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    with TrickleServer("error", pause_s=2.0) as srv:
        judge = ["credit.name=prover", "judge.name=litellm", "judge.model=openai/x", f"judge.api_base={srv.url}/v1",
                 "judge.timeout_s=600", "judge.max_retries=0", "judge.max_failed_steps=0", "judge.cache=false"]
        small = ["warmstart.enabled=false", "rollout.max_turns=3", "rollout.group_size=2", "eval.episodes=1"]
        argv = [*TINY_RUN, *small, *judge, f"run.dir={folder}"]
        proc = subprocess.Popen([sys.executable, str(TESTS / "judged_train.py"), *argv, "steps=5"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            for line in proc.stdout:
                if "step 1/" in line:  # step 1 was judged (each request answered 500) and checkpointed
                    break
            seen = srv.connections
            srv.mode = "chunked"  # step 2's requests never end
            end = time.monotonic() + 240
            while srv.connections == seen and time.monotonic() < end and proc.poll() is None:
                time.sleep(0.1)
            assert srv.connections > seen, "step 2 never asked the judge"
            time.sleep(1.0)  # the requests are in flight, a byte every 2 s
            proc.send_signal(signal.SIGTERM)
            stopped = time.monotonic()
            _, err = proc.communicate(timeout=60)
            took = time.monotonic() - stopped
        finally:
            proc.kill()
        assert proc.returncode == 143, err
        assert err.strip().splitlines() == ["prover: stopped by SIGTERM; the last checkpoint is intact "
                                            "(resume with --resume)"], err
        assert took < 10, f"SIGTERM took {took:.1f} s"
        assert _lock_is_free(folder)
        srv.mode = "error"
        done = subprocess.run([sys.executable, str(TESTS / "judged_train.py"), "--resume", "--run-dir", str(folder),
                               "steps=2"], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert (folder / "checkpoints" / "step-2").is_dir()
