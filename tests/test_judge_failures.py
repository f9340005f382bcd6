"""A judge that fails is visible: failures counted by kind, retries counted, lost proposals
counted and their reasons saved, a warning line when every request of a step failed, a stop after
``judge.max_failed_steps`` such steps, and bounded tool answers and rationales. Judges talk to a real
OpenAI-compatible server on 127.0.0.1 (tests/openai_server.py), scripted per test."""

from __future__ import annotations

import copy
import json
import socket
from types import SimpleNamespace

import numpy as np
import pytest

from openai_server import ScriptedServer, slow, status, text_reply, tool_reply
from prover.chat import ReplyCache
from prover.config import TrainConfig
from prover.credit.base import CreditContext
from prover.credit.prover import ProVer
from prover.episodes.branching import BranchResult
from prover.errors import ConfigError, JudgeError
from prover.judges.agentic import LiteLLMJudge, LiteLLMJudgeConfig
from prover.judges.health import FailureWatch, judge_metrics, usage_metrics
from prover.judges.tools import turn_text
from prover.progress import judge_warning
from prover.rundir.samples import saved_groups
from prover.types import Group, JudgeRequest, JudgeResult, JudgeUsage, Trajectory, Turn

KEY = "sk-test-0123456789abcdefSECRET"


@pytest.fixture
def server():
    pytest.importorskip("litellm")
    with ScriptedServer() as srv:
        yield srv


def judge_for(url: str, **overrides) -> LiteLLMJudge:
    fields = dict(model="openai/test-judge", api_base=url, backoff_s=0.0, timeout_s=10.0, cache=False,
                  max_repairs=0, concurrency=1)
    return LiteLLMJudge(LiteLLMJudgeConfig(**{**fields, **overrides}))


def trajectory(traj_id: str, n: int, won: bool, obs: str = "You are in the kitchen.") -> Trajectory:
    turns = [Turn([1], [2], [-0.1], obs, f"<action>act {t}</action>", f"act {t}", True, True,
                  1.0 if won and t == n - 1 else 0.0, (traj_id, t)) for t in range(n)]
    return Trajectory(traj_id, "task-0", "put a mug in the sink", turns, won=won)


def request_for(*failed: Trajectory) -> JudgeRequest:
    return JudgeRequest(Group("task-0", [trajectory("s", 4, True), *failed]), target=0)


def closed_port_url() -> str:
    with socket.socket() as sock:  # bound, then closed: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


# -- each failure has a kind ---------------------------------------------------------------------

@pytest.mark.parametrize("script, overrides, kind, lost", [
    ([status(401, "bad key")], {}, "http_401", True),
    ([status(404, "no such model")], {}, "http_404", True),
    ([status(503), status(502)], {"max_retries": 1}, "http_5xx", True),
    ([slow(2.0, text_reply("late"))], {"timeout_s": 0.3}, "timeout", True),
    ([text_reply("")], {}, "empty", False),  # a reply came: the request did not fail, its answer did
    ([text_reply("I cannot decide.")], {}, "unreadable", False),
])
def test_every_failure_is_counted_by_kind(server, script, overrides, kind, lost):
    server.push(*script)
    result = judge_for(server.url, **overrides).propose(request_for(trajectory("f", 3, False)))
    assert result.proposal is None and result.usage.errors_by_kind == {kind: 1} and result.usage.errors == 1
    assert result.error == (kind if lost else "")
    if lost:
        assert f"({kind})" in result.failure


def test_an_unreachable_server_is_a_connection_error():
    pytest.importorskip("litellm")
    result = judge_for(closed_port_url(), max_retries=0).propose(request_for(trajectory("f", 3, False)))
    assert result.usage.errors_by_kind == {"connection": 1} and result.error == "connection"


def test_a_judge_whose_server_is_down_is_refused_before_any_work(server):
    """A run checks its judge before any work: a server that answers anything (the scripted one answers GET with
    501) passes; a closed port is one line naming the address and what to start, with no request sent."""
    judge_for(server.url).check_ready()
    assert server.requests == []  # the probe is a GET, never a chat request
    url = closed_port_url()
    with pytest.raises(ConfigError) as caught:
        judge_for(url).check_ready()
    text = str(caught.value)
    assert "\n" not in text and f"no server answers at {url} (" in text and "`prover serve-judge`" in text
    mocked = judge_for(url, litellm_kwargs={"mock_response": "ok"})
    mocked.check_ready()  # LiteLLM answers a mocked model itself: no server to look for


# -- retries and lost proposals in the step's metrics and saved groups ----------------------------

class Halfway:
    """A Brancher stand-in: from the state before turn t, continuations win at rate t / 4."""

    def continue_from(self, requests, seed=0, **_):
        return [BranchResult(r, np.array([k < r.n * r.turn / 4 for k in range(r.n)]), 0, [])
                for r in requests]


def test_retries_and_lost_proposals_reach_the_metrics_and_groups(server, make_batch):
    batch = make_batch([[(True, 3, None), (False, 2, None)], [(True, 3, None), (False, 2, None)]])
    server.push(status(429, "slow down"), tool_reply(("submit_segment", {
        "traj_id": "g0-t0", "start_turn": 0, "end_turn": 1, "rationale": "it takes the mug"})),
        status(500, f"upstream failed for key {KEY}"), status(503))  # group 1: lost after 1 retry
    ctx = CreditContext(TrainConfig(), brancher=Halfway(), judge=judge_for(server.url, max_retries=1), step=1)
    adv = ProVer().assign(batch, ctx)
    m = adv.metrics  # one retry per group; one reply (the 429 and the 5xx are no replies); one lost request
    # two groups asked, one request each (retries apart): one answered after a 429, one failed on 503s
    assert (m["judge/retries"], m["judge/calls"], m["judge/errors"], m["judge/errors/http_5xx"]) == (2, 2, 1, 1)
    assert m["judge/failed_calls"] == 1
    assert not [k for k in m if k.startswith("judge/errors/") and k != "judge/errors/http_5xx"]
    assert (m["credit/proposals"], m["credit/valid_proposals"], m["credit/dropped_proposals"]) == (1, 1, 1)
    assert judge_warning({"step": 1, **m}) == ""  # one request got through: no warning
    failure = saved_groups(batch, adv, step=1, n=2)[1]["judge_failure"]
    assert failure.startswith("judge request failed (http_5xx)") and "HTTP 503" in failure
    assert KEY not in json.dumps(saved_groups(batch, adv, step=1, n=2))


# -- bounded tool answers and rationales -----------------------------------------------------------

def test_usage_metrics_name_every_count_a_judge_and_a_critic_log():
    """One function turns a JudgeUsage into metrics for ProVer's judge and for the critic methods: each count
    under its name, tokens as prompt plus completion."""
    usage = JudgeUsage(calls=5, failed_calls=2, prompt_tokens=30, completion_tokens=12, dollars=0.5, tool_calls=3,
                       repairs=1, errors=4, cached_calls=6, cached_dollars=0.25, retries=7,
                       errors_by_kind={"timeout": 3, "http_401": 1})
    cost = {"cost/judge_tokens": 42.0, "cost/judge_dollars": 0.5, "cost/judge_cached_dollars": 0.25}
    assert usage_metrics(usage, "credit/critic_") == {**cost, "credit/critic_calls": 5.0, "credit/critic_errors": 4.0,
                                                      "credit/critic_cached_calls": 6.0}
    assert judge_metrics(usage) == {**cost, "judge/calls": 5.0, "judge/errors": 4.0, "judge/cached_calls": 6.0,
                                    "judge/failed_calls": 2.0, "judge/repairs": 1.0, "judge/tool_calls": 3.0,
                                    "judge/retries": 7.0, "judge/errors/http_401": 1.0, "judge/errors/timeout": 3.0}


def test_a_huge_tool_answer_is_cut_and_so_is_what_the_cache_keys(server, tmp_path, monkeypatch):
    keyed = []  # (messages as they were then, key) of every cache lookup; the judge appends to the list later
    key_of = ReplyCache.key
    monkeypatch.setattr(ReplyCache, "key", staticmethod(
        lambda p: keyed.append((copy.deepcopy(p["messages"]), key_of(p))) or keyed[-1][1]))
    big = "A drawer full of spoons. " * 80_000  # 2,000,000 characters
    request = request_for(trajectory("f", 3, False, obs=big))
    full = f"[turn 0] {turn_text(request.group.trajectories[1].turns[0])}"
    answer = {"traj_id": "s", "start_turn": 0, "end_turn": 1, "rationale": "r"}
    server.push(tool_reply(("get_segment", {"traj_id": "f", "start_turn": 0, "end_turn": 0})),
                tool_reply(("submit_segment", answer)))
    cache = tmp_path / "cache"
    result = judge_for(server.url, cache=True, cache_dir=str(cache)).propose(request)
    assert result.proposal is not None
    cut = f"{full[:8000]}... [cut: {len(full) - 8000:,} more characters]"
    answer = server.requests[1]["body"]["messages"][-1]
    assert answer["role"] == "tool" and answer["content"] == cut
    # the second reply's cache entry is stored under the conversation with the cut answer
    messages, key = keyed[1]
    assert messages[-1]["content"] == cut and (cache / f"{key}.json").is_file()
    assert sum(f.stat().st_size for f in cache.iterdir()) < 10_000


def test_a_runaway_rationale_is_cut(server):
    server.push(tool_reply(("submit_segment", {"traj_id": "s", "start_turn": 0, "end_turn": 1,
                                               "rationale": "because " * 1000})))
    result = judge_for(server.url, max_rationale_chars=100).propose(request_for(trajectory("f", 3, False)))
    assert result.proposal.rationale == ("because " * 1000)[:100] + "... [cut: 7,900 more characters]"


# -- a judge that fails every request: the warning and the stop ----------------------------------

def usage_of(calls: int, errors: dict[str, int]) -> JudgeUsage:
    return JudgeUsage(calls=calls, errors=sum(errors.values()), errors_by_kind=dict(errors))


def test_the_warning_line_comes_from_the_step_record():
    record = {"step": 3, "judge/calls": 0.0, "judge/cached_calls": 0.0, "judge/errors": 6.0,
              "judge/errors/http_401": 6.0}
    want = "judge: all 6 calls of step 3 failed (http_401 x6); these groups trained as plain GRPO"
    assert judge_warning(record) == want
    assert judge_warning({**record, "judge/calls": 1.0}) == ""  # one reply came back
    assert judge_warning({"step": 3, "judge/calls": 0.0, "judge/errors": 0.0}) == ""  # a free judge


def test_the_run_stops_after_max_failed_steps_in_a_row():
    failed, fine = usage_of(0, {"http_401": 2}), usage_of(2, {})
    lost = [JudgeResult(None, failure="judge request failed (http_401): no", error="http_401")] * 2
    settings = SimpleNamespace(config=SimpleNamespace(max_failed_steps=2))
    watch = FailureWatch()
    watch.observe(failed, lost, settings, step=1)
    watch.observe(fine, lost, settings, step=2)  # a step with a reply breaks the streak
    watch.observe(failed, lost, settings, step=3)
    watch.observe(JudgeUsage(), [], settings, step=4)  # asking nothing neither breaks nor extends it
    with pytest.raises(JudgeError, match=r"every request failed in 2 steps in a row \(step 5: http_401 x2"):
        watch.observe(failed, lost, settings, step=5)
    never = FailureWatch()
    for step in range(10):  # 0 never stops
        never.observe(failed, lost, SimpleNamespace(config=SimpleNamespace(max_failed_steps=0)), step)
    assert never.streak == 10



@pytest.fixture
def one_win_per_group(monkeypatch):
    """The untrained tiny policy rarely wins: the longest episode of each train group is marked won, with
    valid turns, so that every group is eligible and the judge is asked about each one."""
    from prover.rollout import Rollout

    play = Rollout.run

    def run(self, *args, **kwargs):
        batch = play(self, *args, **kwargs)
        if kwargs.get("split") == "train":
            for group in batch.groups:
                best = max(group.trajectories, key=lambda t: len(t.turns))
                best.won = len(group.trajectories) > 1 and len(best.turns) > 1
                for turn in best.turns:
                    turn.format_valid = turn.action_valid = True
        return batch
    monkeypatch.setattr(Rollout, "run", run)


@pytest.mark.slow
def test_a_judge_failing_every_request_warns_then_stops(server, tiny_run_overrides, tmp_path,
                                                                  monkeypatch, capsys, one_win_per_group):
    from prover.cli import main

    monkeypatch.setenv("PROVER_TEST_JUDGE_KEY", KEY)
    server.push(*[status(401, f"Incorrect API key provided: {KEY}")] * 20)
    run = tmp_path / "run"
    small = ["warmstart.enabled=false", "rollout.max_turns=3", "rollout.group_size=2", "eval.episodes=1"]
    rc = main(["train", *tiny_run_overrides, *small, "steps=3", "credit.name=prover",
               "judge.name=litellm", "judge.model=openai/x", f"judge.api_base={server.url}",
               "judge.api_key_env=PROVER_TEST_JUDGE_KEY", "judge.max_failed_steps=2"])
    out, err = capsys.readouterr()
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith("prover: error: judge: every request failed in 2 steps")
    assert "http_401" in err and "Traceback" not in err
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["phase"] == "train"]
    assert [r["step"] for r in train] == [1]  # step 2 stopped the run before its record
    for r in train:
        asked = r["credit/eligible_groups"] - r["credit/unprovable_groups"]
        assert asked > 0 and r["judge/errors/http_401"] == r["judge/errors"] == asked
        # every request sent is counted (401 is not retried: one per group asked), and each failed
        assert r["credit/dropped_proposals"] == asked and r["judge/calls"] == r["judge/failed_calls"] == asked
        n = int(asked)
        assert f"judge: all {n} calls of step {r['step']} failed (http_401 x{n}); these groups trained as " \
               "plain GRPO" in out
    groups = [json.loads(line) for line in (run / "groups.jsonl").read_text().splitlines()]
    assert groups and all("(http_401)" in g["judge_failure"] and "401" in g["judge_failure"] for g in groups)
    everything = out + err + (run / "metrics.jsonl").read_text() + (run / "groups.jsonl").read_text()
    assert KEY not in everything and KEY[:12] not in everything
