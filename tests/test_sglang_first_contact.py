"""Issue 45: the five places where SGLang 0.5.23 behaves otherwise than prover's engine first assumed,
each against the stand-in (tests/sglang_server.py), which now copies 0.5.23 there and cites the lines.

1. a broadcast weight update runs inside /begin_weight_update .. /end_weight_update, and close() does not
   hang after a refused broadcast;
2. input_token_logprobs starts with None, so scoring starts one token early;
3. /get_weights_by_name fails for Qwen classes, so check_weights is refused at start, in one line;
4. /flush_cache (and a weight update's own flush) is refused while requests run or wait: waited out, up to
   sync_timeout_s;
5. sync=distributed with a dp_size > 1 server is refused at start.

Expected values come from the definitions: the hf engine on the same folder for log-probs, the learner's
own tensors for synced weights."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch

from prover.config import LearnerConfig
from prover.engines.hf import HFEngine
from prover.engines.sglang import SGLangEngine
from prover.errors import ConfigError, EngineError
from sglang_server import SGLangTestServer

FAST = {"retries": 1, "retry_backoff_s": 0.01}


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and "Traceback" not in text, text
    return text


def weight(url: str, name: str) -> torch.Tensor:
    req = urllib.request.Request(url + "/get_weights_by_name", method="POST",
                                 data=json.dumps({"name": name, "truncate_size": 10_000}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return torch.tensor(json.loads(r.read()))


def nudge(learner, amount: float = 0.1) -> None:
    with torch.no_grad():
        for p in learner.unwrapped().parameters():
            p.add_(amount * torch.randn_like(p))


@pytest.fixture
def readable(tiny_policy_dir):
    """A server that reads weights back, as SGLang does for a Llama-class model."""
    with SGLangTestServer(str(tiny_policy_dir), weights_readable=True) as s:
        yield s


# -- 1. a session around every broadcast update; close() cannot hang ---------------------------------

def test_distributed_sync_runs_in_a_weight_update_session_and_close_returns(tiny_policy_dir):
    """The server runs in its own process, as SGLang does: a process group is per process."""
    from prover.learning.learner import Learner

    proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("sglang_server.py")), str(tiny_policy_dir),
                             "--weights-readable"], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("ready "), line
        url = line.split()[1]
        learner = Learner(tiny_policy_dir, LearnerConfig())
        eng = SGLangEngine(str(tiny_policy_dir), urls=[url], sync="distributed", backend="gloo",
                           group_name="prover_test_session", sync_timeout_s=20, bucket_mb=0.05, **FAST)
        for _ in range(2):  # a session per sync: a second begin would be refused were the first left open
            nudge(learner)
            eng.update_weights(learner)
            state = learner.policy_state_dict()
            for name in ("model.embed_tokens.weight", "model.layers.1.mlp.down_proj.weight", "model.norm.weight"):
                assert torch.equal(weight(url, name), state[name].float())
        # a broadcast the server refuses leaves the trainer's side waiting; the error is one line, and
        # close() returns all the same
        urllib.request.urlopen(urllib.request.Request(url + "/_faults", data=b'{"fail_sync": true}', method="POST",
                                                      headers={"Content-Type": "application/json"}), timeout=30)
        with pytest.raises(EngineError, match="distributed weight sync 3 failed .*scripted failure") as err:
            eng.update_weights(learner)
        one_line(err.value)
        closer = threading.Thread(target=eng.close, daemon=True)
        closer.start()
        closer.join(40)  # close() waits at most sglang_sync.CLOSE_WAIT_S (10 s)
        assert not closer.is_alive(), "close() hung after a refused broadcast"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# -- 2. input log-probs start with None -----------------------------------------------------------

def test_logprobs_score_the_first_completion_token_too(readable, tiny_policy_dir):
    eng = SGLangEngine(str(tiny_policy_dir), urls=[readable.url], **FAST)
    hf = HFEngine(str(tiny_policy_dir), device="cpu")
    prompts = [eng.tokenizer.encode("go to the kitchen"), eng.tokenizer.encode("open the fridge then")]
    completions = [[11, 12, 13], [21]]  # a one-token completion is all "first token"
    got, want = eng.logprobs(prompts, completions), hf.logprobs(prompts, completions)
    for g, w, c in zip(got, want, completions):
        assert len(g) == len(c) and np.isfinite(g).all()
        np.testing.assert_allclose(g, w, atol=1e-4)
    body = [b for p, b in readable.requests if p == "/generate"][-1]
    assert body["logprob_start_len"] == [len(p) - 1 for p in prompts]


def test_a_scoring_reply_of_the_wrong_shape_names_endpoint_and_field(readable, tiny_policy_dir):
    eng = SGLangEngine(str(tiny_policy_dir), urls=[readable.url], **FAST)
    readable._generate = lambda h, body: (200, [{"meta_info": {"input_token_logprobs": 5}}])
    with pytest.raises(EngineError, match="/generate scoring result field meta_info.input_token_logprobs") as err:
        eng.logprobs([[1, 2, 3]], [[4]])
    assert one_line(err.value).startswith(f"SGLang server {readable.url}: ")


# -- 3. check_weights on a Qwen server ------------------------------------------------------------

def test_check_weights_on_a_server_that_cannot_read_weights_back_is_refused_at_start(tiny_policy_dir):
    with SGLangTestServer(str(tiny_policy_dir)) as qwen:  # the tiny policy is a Qwen3: no get_weights_by_name
        assert not qwen.weights_readable
        with pytest.raises(ConfigError, match="cannot read .* back .*check_weights=false") as err:
            SGLangEngine(str(tiny_policy_dir), urls=[qwen.url], check_weights=True, **FAST)
        one_line(err.value)
        assert qwen.syncs == 0  # refused before the servers were told to load anything
        SGLangEngine(str(tiny_policy_dir), urls=[qwen.url], **FAST)  # without the check it runs
        assert qwen.syncs == 1


# -- 4. a flush refused while requests run or wait ------------------------------------------------

def test_a_sync_waits_until_the_server_is_idle_then_flushes(readable, tiny_policy_dir):
    from prover.learning.learner import Learner

    learner = Learner(tiny_policy_dir, LearnerConfig())
    eng = SGLangEngine(str(tiny_policy_dir), urls=[readable.url], sync_timeout_s=30, check_weights=True, **FAST)
    prompt = eng.tokenizer.encode("look around")
    eng.generate([prompt], eng_params())
    nudge(learner)
    readable.busy_for(0.6)  # requests whose clients gave up still run for a while
    eng.update_weights(learner)
    state = learner.policy_state_dict()
    assert torch.equal(weight(readable.url, "model.layers.0.mlp.up_proj.weight"),
                       state["model.layers.0.mlp.up_proj.weight"].float())
    flushes = [p for p, _ in readable.requests if p == "/flush_cache"]
    assert len(flushes) >= 2  # refused at least once, then done
    assert readable.cache.match(prompt) == 0  # the cache holds nothing computed with the old weights


def test_a_server_busy_past_the_sync_deadline_is_one_named_error(readable, tiny_policy_dir):
    from prover.learning.learner import Learner

    learner = Learner(tiny_policy_dir, LearnerConfig())
    eng = SGLangEngine(str(tiny_policy_dir), urls=[readable.url], sync_timeout_s=0.5, **FAST)
    readable.busy_for(60)
    started = time.monotonic()
    with pytest.raises(EngineError, match="/flush_cache answered HTTP 400.*still busy after 0.5 s") as err:
        eng.update_weights(learner)
    one_line(err.value)
    assert time.monotonic() - started < 30  # bounded by the deadline, not by the server


# -- 5. sync=distributed against a data-parallel server ----------------------------------------------

def test_distributed_sync_with_a_dp_server_is_refused_at_start(tiny_policy_dir):
    with SGLangTestServer(str(tiny_policy_dir), dp_size=2) as dp:
        with pytest.raises(ConfigError, match="dp_size=2.*sync=disk") as err:
            SGLangEngine(str(tiny_policy_dir), urls=[dp.url], sync="distributed", backend="gloo", **FAST)
        one_line(err.value)
        assert dp.syncs == 0 and not any(p == "/init_weights_update_group" for p, _ in dp.requests)
        SGLangEngine(str(tiny_policy_dir), urls=[dp.url], **FAST)  # sync=disk takes it


def test_a_server_info_reply_of_the_wrong_shape_names_endpoint_and_field(readable, tiny_policy_dir):
    readable._server_info = lambda h, body: (200, {"tp_size": 1})
    with pytest.raises(EngineError, match="/get_server_info sent a reply without the field 'dp_size'") as err:
        SGLangEngine(str(tiny_policy_dir), urls=[readable.url], sync="distributed", backend="gloo", **FAST)
    one_line(err.value)


def eng_params():
    from prover.types import SamplingParams

    return SamplingParams(max_new_tokens=4, temperature=0.0)
