"""The sglang engine against real HTTP servers on 127.0.0.1 that speak SGLang's native API
(tests/sglang_server.py, backed by the tiny Qwen3 policy), and ``prover train`` through it.

Reference values come from the definitions: the ``hf`` engine on the same folder for greedy ids and
log-probs, SGLang's documented formats for hand-built replies, and the prefix-cache rule (a prompt seen
before reuses all but its last token)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch

from prover.config import LearnerConfig
from prover.engines.hf import HFEngine
from prover.engines.sglang import SGLangEngine, parse_generation, request_seed, sampling_params
from prover.episodes.turn_prompts import agent_spec_for, encode_prompt
from prover.errors import ConfigError, EngineError
from prover.types import SamplingParams
from sglang_server import SGLangTestServer

FAST = {"retries": 2, "retry_backoff_s": 0.01}
GREEDY = SamplingParams(max_new_tokens=12, temperature=0.0)


@pytest.fixture
def server(tiny_policy_dir):
    # reads weights back (/get_weights_by_name), as SGLang does for a Llama-class model though not for Qwen3
    with SGLangTestServer(str(tiny_policy_dir), weights_readable=True) as s:
        yield s


def make_engine(folder, *servers, **kwargs) -> SGLangEngine:
    return SGLangEngine(str(folder), urls=[s.url for s in servers], **{**FAST, **kwargs})


def env_prompts(tokenizer, seeds) -> list[list[int]]:
    """First-turn prompts of alfworld-sim tasks, as rollout builds them."""
    from prover.envs import make_env

    env, out = make_env("alfworld-sim"), []
    for seed in seeds:
        obs, info = env.reset(seed=seed, options={"split": "train"})
        text = agent_spec_for(env).render(info.get("task", obs), obs, info.get("admissible_actions"), [], 0)
        out.append(encode_prompt(tokenizer, text))
    return out


def generate_bodies(server) -> list[dict]:
    return [body for path, body in server.requests if path == "/generate"]


def weight(server_url: str, name: str) -> torch.Tensor:
    req = urllib.request.Request(server_url + "/get_weights_by_name", method="POST",
                                 data=json.dumps({"name": name, "truncate_size": 10_000}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return torch.tensor(json.loads(r.read()))


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text, text
    return text


# -- config and request building ---------------------------------------------------------------------

def test_bad_engine_kwargs_are_one_line_config_errors(tiny_policy_dir):
    with pytest.raises(ConfigError, match="unknown config field 'engine.kwargs.timeout'.*engine.kwargs.timeout_s"):
        SGLangEngine(str(tiny_policy_dir), urls=["http://127.0.0.1:1"], timeout=3)
    with pytest.raises(ConfigError, match="engine.kwargs.urls"):
        SGLangEngine(str(tiny_policy_dir))
    with pytest.raises(ConfigError, match="not an http"):
        SGLangEngine(str(tiny_policy_dir), urls=["127.0.0.1:30000"])
    with pytest.raises(ConfigError, match="engine.kwargs.sync"):
        SGLangEngine(str(tiny_policy_dir), urls=["http://127.0.0.1:1"], sync="nfs")


def test_sampling_params_are_all_explicit():
    params = SamplingParams(max_new_tokens=8, temperature=0.7, top_p=0.9, top_k=0)
    assert sampling_params(params, [3, 5], 42) == {
        "max_new_tokens": 8, "temperature": 0.7, "top_p": 0.9, "top_k": -1, "stop_token_ids": [3, 5],
        "skip_special_tokens": False, "no_stop_trim": True, "sampling_seed": 42}
    assert sampling_params(SamplingParams(top_k=20), [3], None)["top_k"] == 20
    assert "sampling_seed" not in sampling_params(params, [3], None)
    seeds = [request_seed(7, i) for i in range(100)]
    assert len(set(seeds)) == 100 and all(0 <= s < 2 ** 31 for s in seeds)
    assert request_seed(7, 3) == request_seed(7, 3) != request_seed(8, 3)


def test_requests_carry_every_knob_and_a_seed_per_prompt(server, tiny_policy_dir):
    eng = make_engine(tiny_policy_dir, server)
    prompt = env_prompts(eng.tokenizer, [1])[0]
    params = SamplingParams(max_new_tokens=5, temperature=0.7, top_p=0.9, top_k=0)
    gens = eng.generate([prompt] * 3, params, seed=11)
    body = generate_bodies(server)[-1]
    assert body["input_ids"] == [prompt] * 3
    assert body["return_logprob"] is True and body["logprob_start_len"] == -1
    for i, sp in enumerate(body["sampling_params"]):
        assert (sp["temperature"], sp["top_p"], sp["top_k"], sp["max_new_tokens"]) == (0.7, 0.9, -1, 5)
        assert sp["stop_token_ids"] == eng.stop_ids
        assert sp["sampling_seed"] == request_seed(11, i)  # identical prompts, distinct seeds
    assert all(1 <= len(g.token_ids) <= 5 and len(g.logprobs) == len(g.token_ids) for g in gens)
    eng.generate([prompt], params)  # no seed given: none sent
    assert "sampling_seed" not in generate_bodies(server)[-1]["sampling_params"][0]
    make_engine(tiny_policy_dir, server, send_seed=False).generate([prompt], params, seed=1)
    assert "sampling_seed" not in generate_bodies(server)[-1]["sampling_params"][0]


# -- reply parsing -----------------------------------------------------------------------------------

def _item(ids, lps, finish, **meta):
    return {"text": "x", "output_ids": ids, "meta_info": {
        "output_token_logprobs": [[lp, t, None] for lp, t in zip(lps, ids)], "finish_reason": finish,
        "completion_tokens": len(ids), "cached_tokens": 7, **meta}}


def test_parse_generation_reads_sglang_results():
    g = parse_generation(_item([5, 9, 2], [-0.5, -1.0, -0.25], {"type": "stop", "matched": 2}), {2}, "s")
    assert (g.token_ids, g.logprobs, g.finish_reason, g.cached_tokens) == ([5, 9, 2], [-0.5, -1.0, -0.25], "stop", 7)
    # SGLang checks the length before stop tokens; a stop token at the limit still ended the completion
    g = parse_generation(_item([5, 2], [-0.5, -0.1], {"type": "length", "length": 2}), {2}, "s")
    assert g.finish_reason == "stop"
    g = parse_generation(_item([5, 6], [-0.5, -0.1], {"type": "length", "length": 2}), {2}, "s")
    assert g.finish_reason == "length"


@pytest.mark.parametrize("item, message", [
    ({"text": "x"}, "not SGLang's format"),
    ({**_item([5, 6], [-0.5, -0.1], None), "output_ids": [5, 6, 7]}, "output_ids"),
    (_item([5, 6], [-0.5, -0.1], None, completion_tokens=3), "completion_tokens"),
    (_item([5, 6], [None, -0.1], None), "not SGLang's format"),
    (_item([5], [-0.5], {"type": "abort", "message": "out of memory"}), "aborted a request \\(out of memory\\)"),
])
def test_malformed_results_are_one_line_errors(item, message):
    with pytest.raises(EngineError, match=message) as err:
        parse_generation(item, {2}, "SGLang server http://x")
    assert one_line(err.value).startswith("SGLang server http://x: ")


# -- numbers: the same model gives the same ids and log-probs -----------------------------------------

def test_greedy_ids_and_logprobs_match_the_hf_engine(server, tiny_policy_dir):
    eng, hf = make_engine(tiny_policy_dir, server), HFEngine(str(tiny_policy_dir), device="cpu")
    prompts = env_prompts(eng.tokenizer, [1, 2, 3, 4])
    got, want = eng.generate(prompts, GREEDY), hf.generate(prompts, GREEDY)
    for g, w in zip(got, want):
        assert g.token_ids == w.token_ids and g.finish_reason == w.finish_reason
        np.testing.assert_allclose(g.logprobs, w.logprobs, atol=1e-4)
    # sampled completions, re-scored: at temperature 1 the sampling log-probs are the model's own
    sampled = eng.generate(prompts, SamplingParams(max_new_tokens=12, temperature=1.0), seed=5)
    completions = [g.token_ids for g in sampled]
    scores, ref = eng.logprobs(prompts, completions), hf.logprobs(prompts, completions)
    scoring = [b for b in generate_bodies(server) if b["sampling_params"][0]["max_new_tokens"] == 0][-1]
    assert scoring["logprob_start_len"] == [len(p) - 1 for p in prompts]  # SGLang's first entry is None
    for s, r, g in zip(scores, ref, sampled):
        np.testing.assert_allclose(s, r, atol=1e-4)
        np.testing.assert_allclose(s, g.logprobs, atol=1e-4)
    assert [len(x) for x in eng.logprobs(prompts[:2], [[], completions[1]])] == [0, len(completions[1])]


def test_seeded_sampling_repeats_and_siblings_differ(server, tiny_policy_dir):
    eng = make_engine(tiny_policy_dir, server)
    prompts = env_prompts(eng.tokenizer, [1]) * 4
    params = SamplingParams(max_new_tokens=12, temperature=1.0)
    first = [g.token_ids for g in eng.generate(prompts, params, seed=3)]
    assert [g.token_ids for g in eng.generate(prompts, params, seed=3)] == first
    assert len({tuple(t) for t in first}) > 1, "siblings of a group must not share a sampling seed"
    assert [g.token_ids for g in eng.generate(prompts, params, seed=4)] != first


# -- prefix cache and routing --------------------------------------------------------------------------

def test_cached_tokens_count_a_seen_prefix_and_a_sync_clears_them(server, tiny_policy_dir):
    from prover.learning.learner import Learner

    eng = make_engine(tiny_policy_dir, server)
    p = env_prompts(eng.tokenizer, [1])[0]
    first = eng.generate([p], GREEDY)[0]
    assert first.cached_tokens == 0  # the cache was flushed when the server loaded the policy
    assert eng.generate([p], GREEDY)[0].cached_tokens == len(p) - 1  # all but the last token reused
    longer = p + first.token_ids + [p[-1]]
    assert eng.generate([longer], GREEDY)[0].cached_tokens == len(p) + len(first.token_ids) - 1
    assert eng.take_counts() == pytest.approx({
        "cost/engine_requests": 3, "cost/prompt_tokens": 2 * len(p) + len(longer),
        "cost/cached_tokens": 2 * len(p) + len(first.token_ids) - 2,
        "cost/prefill_tokens": len(longer) - len(first.token_ids) + 2,  # requested less cached
        "engine/cached_ratio": (2 * len(p) + len(first.token_ids) - 2) / (2 * len(p) + len(longer)),
        "cost/engine_retries": 0})
    assert eng.take_counts()["cost/engine_requests"] == 0
    eng.update_weights(Learner(tiny_policy_dir, LearnerConfig()))
    assert eng.generate([p], GREEDY)[0].cached_tokens == 0


def test_routing_keeps_each_task_and_its_branches_on_one_server(tiny_policy_dir):
    from prover.envs import make_env
    from prover.episodes.branching import Brancher, BranchRequest
    from prover.rollout import Rollout

    with SGLangTestServer(str(tiny_policy_dir)) as a, SGLangTestServer(str(tiny_policy_dir)) as b:
        eng = make_engine(tiny_policy_dir, a, b)
        rollout = Rollout(lambda: make_env("alfworld-sim"), eng, max_turns=3,
                          sampling=SamplingParams(max_new_tokens=12, temperature=1.0))
        batch = rollout.run([1, 2], 3, seed=0, record_snapshots=True)
        served = {s.url: [tuple(p) for body in generate_bodies(s) for p in body["input_ids"]] for s in (a, b)}

        def servers_of(prompts):
            return {url for url, seen in served.items() for p in prompts if tuple(p) in seen}
        homes = [servers_of([t.prompt_ids for tr in g.trajectories for t in tr.turns]) for g in batch.groups]
        assert [len(h) for h in homes] == [1, 1] and homes[0] != homes[1]
        home = {g.task_id: h for g, h in zip(batch.groups, homes)}
        eng.take_counts()
        before = {s.url: len(generate_bodies(s)) for s in (a, b)}
        requests = [BranchRequest(tr, 1, 2) for g in batch.groups for tr in g.trajectories if len(tr.turns) > 1]
        assert requests
        Brancher(rollout).continue_from(requests, seed=1)
        counts = eng.take_counts()
        # each branch resends its turn's exact prompt, which its server has cached but for the last token
        assert counts["cost/cached_tokens"] >= sum(2 * (len(r.trajectory.turns[1].prompt_ids) - 1) for r in requests)
        for r in requests:
            replay = r.trajectory.turns[1].prompt_ids
            got = {s.url for s in (a, b) for body in generate_bodies(s)[before[s.url]:] for p in body["input_ids"]
                   if p == replay}
            assert got == home[r.trajectory.task_id]


# -- failures: retries, timeouts, garbage, a dying server ----------------------------------------------

def test_5xx_and_429_are_retried_then_succeed(server, tiny_policy_dir):
    eng = make_engine(tiny_policy_dir, server)
    p = env_prompts(eng.tokenizer, [1])
    server.faults.statuses = [500, 429]
    assert len(eng.generate(p, GREEDY)) == 1
    assert eng.take_counts()["cost/engine_retries"] == 2
    server.faults.statuses = [500, 502, 503]
    with pytest.raises(EngineError, match=r"/generate answered HTTP 503: scripted HTTP 503 \(after 3 tries\)") as err:
        eng.generate(p, GREEDY)
    assert "second line" not in one_line(err.value)
    n = len(generate_bodies(server))
    server.faults.statuses = [400]  # a client error is not retried
    with pytest.raises(EngineError, match="HTTP 400"):
        eng.generate(p, GREEDY)
    assert len(generate_bodies(server)) == n + 1


def test_slow_server_is_a_timeout_not_a_hang(server, tiny_policy_dir):
    eng = make_engine(tiny_policy_dir, server, timeout_s=0.5)
    server.faults.delay_s = 3.0
    n, t0 = len(generate_bodies(server)), time.monotonic()
    with pytest.raises(EngineError, match=r"no reply to /generate within 0.5 s") as err:
        eng.generate(env_prompts(eng.tokenizer, [1]), GREEDY)
    assert time.monotonic() - t0 < 3.0, "a timeout must not wait for the reply"
    assert len(generate_bodies(server)) == n + 1, "a timeout is not retried"
    one_line(err.value)


def test_garbage_reply_is_a_one_line_error(server, tiny_policy_dir):
    eng = make_engine(tiny_policy_dir, server)
    server.faults.garbage = 1
    with pytest.raises(EngineError, match=r"/generate sent a reply that is not JSON \(starts '<html>502") as err:
        eng.generate(env_prompts(eng.tokenizer, [1]), GREEDY)
    one_line(err.value)


def test_a_server_that_dies_is_a_clear_error(server, tiny_policy_dir):
    eng = make_engine(tiny_policy_dir, server)
    p = env_prompts(eng.tokenizer, [1])
    server.faults.die_after_generates = 1
    eng.generate(p, GREEDY)
    with pytest.raises(EngineError, match=rf"SGLang server {server.url}: connection refused \(after 3 tries\)") as e:
        eng.generate(p, GREEDY)
    one_line(e.value)
    with pytest.raises(EngineError, match="connection refused"):
        make_engine(tiny_policy_dir, server)  # the health check at start


# -- weight sync ---------------------------------------------------------------------------------------

def _nudge(learner, amount: float) -> None:
    with torch.no_grad():
        for p in learner.unwrapped().parameters():
            p.add_(amount * torch.randn_like(p))


def test_disk_sync_puts_the_learners_weights_on_the_server(server, tiny_policy_dir):
    from prover.learning.learner import Learner

    learner = Learner(tiny_policy_dir, LearnerConfig())
    eng = make_engine(tiny_policy_dir, server, check_weights=True)
    _nudge(learner, 0.1)
    state = learner.policy_state_dict()
    changed = "model.layers.1.mlp.up_proj.weight"
    assert not torch.equal(weight(server.url, changed), state[changed])
    eng.update_weights(learner)
    for name in ("model.embed_tokens.weight", changed, "model.norm.weight"):
        assert torch.equal(weight(server.url, name), state[name].float())
    assert [p.name for p in eng.syncer.root.iterdir()] == ["v1"]
    eng.update_weights(learner)
    assert [p.name for p in eng.syncer.root.iterdir()] == ["v2"]  # older versions are removed
    hf = HFEngine(str(eng.syncer.root / "v2"), device="cpu")
    prompts = env_prompts(eng.tokenizer, [1, 2])
    assert [g.token_ids for g in eng.generate(prompts, GREEDY)] == [g.token_ids for g in hf.generate(prompts, GREEDY)]


def test_failed_or_fake_disk_sync_is_a_clear_error(server, tiny_policy_dir):
    from prover.learning.learner import Learner

    learner = Learner(tiny_policy_dir, LearnerConfig())
    eng = make_engine(tiny_policy_dir, server, check_weights=True)
    server.faults.fail_sync = True
    with pytest.raises(EngineError, match="update_weights_from_disk answered HTTP 400: .*scripted failure") as err:
        eng.update_weights(learner)
    one_line(err.value)
    server.faults.fail_sync, server.faults.fake_sync = False, True
    _nudge(learner, 0.1)
    with pytest.raises(EngineError, match="weight check after sync: .* differs from the learner's") as err:
        eng.update_weights(learner)
    one_line(err.value)


def _post(url: str, path: str, body: dict) -> None:
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=30).read()


def test_distributed_sync_over_gloo(tiny_policy_dir):
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
                           group_name="prover_test_sync", sync_timeout_s=30, check_weights=True, bucket_mb=0.05, **FAST)
        for _ in range(2):  # the group is made once and reused
            _nudge(learner, 0.1)
            eng.update_weights(learner)
            state = learner.policy_state_dict()
            for name in ("model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight", "model.norm.weight"):
                assert torch.equal(weight(url, name), state[name].float())
        _post(url, "/_faults", {"fail_sync": True})
        with pytest.raises(EngineError, match="distributed weight sync 3 failed .* half-updated") as err:
            eng.update_weights(learner)
        one_line(err.value)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# -- end to end: prover train through a server, and through one that dies --------------------------------

def test_train_through_sglang_and_survive_a_dying_server(tiny_run_overrides, tiny_policy_dir, tmp_path, capsys):
    from safetensors.torch import load_file

    from prover.cli import main

    run = tmp_path / "run"
    engine = ["engine.name=sglang", "engine.kwargs.retries=1", "engine.kwargs.retry_backoff_s=0.05"]

    def history():
        return [(r["phase"], r["step"]) for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]
    with SGLangTestServer(str(tiny_policy_dir), weights_readable=True) as srv:
        assert main(["train", *tiny_run_overrides, "steps=2", *engine, f"engine.kwargs.urls=[{srv.url}]",
                     "engine.kwargs.check_weights=true"]) == 0
        assert srv.syncs == 3  # the starting policy, then one sync per step
        final = load_file(str(run / "checkpoints" / "step-2" / "model.safetensors"))
        live = srv.model.state_dict()
        assert all(torch.equal(live[k], v) for k, v in final.items())
    assert history() == [("eval", 0), ("train", 1), ("train", 2), ("eval", 2)]
    for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()):
        if r["phase"] == "train":  # a group's G episodes share their first prompt, so the cache serves it
            assert r["cost/rollout_engine_requests"] > 0
            assert 0 < r["cost/rollout_cached_tokens"] < r["cost/rollout_prompt_tokens"]
    capsys.readouterr()

    with SGLangTestServer(str(tiny_policy_dir)) as dying:
        dying.faults.die_after_syncs = 2  # the starting policy and step 1's sync; gone in step 2's rollout
        assert main(["train", *tiny_run_overrides, "steps=2", *engine, f"engine.kwargs.urls=[{dying.url}]"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"prover: error: SGLang server {dying.url}: ") and "\n" not in err, err
    assert "Traceback" not in err
    assert history() == [("eval", 0), ("train", 1)]
    assert json.loads((run / "checkpoints" / "step-1" / "state.json").read_text()) == {"step": 1}
    assert not (run / "checkpoints" / "step-2").exists()

    with SGLangTestServer(str(tiny_policy_dir)) as fresh:
        assert main(["train", "--resume", "--run-dir", str(run), f"engine.kwargs.urls=[{fresh.url}]"]) == 0
    assert history() == [("eval", 0), ("train", 1), ("train", 2), ("eval", 2)]
