"""The LLM judges and their tools: the agentic loop against a real OpenAI-compatible HTTP server on
127.0.0.1 (scripted per test), LiteLLM's mock_response path, and the local judge on the tiny model.
In every case the judge recovers or drops the proposal with its usage counted; it never raises."""

from __future__ import annotations

import json
import logging

import pytest

from openai_server import ScriptedServer, slow, status, text_reply, tool_reply
from prover.chat import find_json_object, parse_tool_calls, render_trajectory, template_messages
from prover.judges import tools
from prover.judges.agentic import LiteLLMJudge, LiteLLMJudgeConfig
from prover.types import Group, JudgeRequest, Segment, Trajectory, Turn

SUCCESS = ["go to cabinet 1", "open cabinet 1", "take mug 1 from cabinet 1", "go to sinkbasin 1",
           "clean mug 1 with sinkbasin 1", "put mug 1 in/on countertop 1"]
FAILED_1 = ["go to countertop 1", "go to countertop 1", "go to countertop 1", "look"]
FAILED_2 = ["go to cabinet 1", "take mug 1 from cabinet 1", "go to drawer 2"]
VALID = {"traj_id": "s", "start_turn": 1, "end_turn": 2, "rationale": "opens the cabinet the failed runs skip"}


def trajectory(traj_id: str, actions: list[str], won: bool, invalid: tuple[int, ...] = ()) -> Trajectory:
    turns = [Turn(prompt_ids=[1], completion_ids=[2, 3], logprobs=[-0.1, -0.2],
                  observation=f"You are in the kitchen. Step {t}. You see a cabinet 1 and a countertop 1.",
                  completion_text=f"<action>{a}</action>", action=a, format_valid=True,
                  action_valid=t not in invalid, reward=1.0 if won and t == len(actions) - 1 else 0.0,
                  state_key=(traj_id, t)) for t, a in enumerate(actions)]
    return Trajectory(traj_id, "task-0", "clean some mug and put it in countertop", turns, won=won)


@pytest.fixture
def request_():
    group = Group("task-0", [trajectory("s", SUCCESS, True), trajectory("f1", FAILED_1, False),
                             trajectory("f2", FAILED_2, False, invalid=(2,))])
    return JudgeRequest(group, target=0, max_turns=4)


@pytest.fixture
def server():
    pytest.importorskip("litellm")
    with ScriptedServer() as srv:
        yield srv


def judge_for(server: ScriptedServer, **overrides) -> LiteLLMJudge:
    fields = dict(model="openai/test-judge", api_base=server.url, backoff_s=0.01, timeout_s=10.0, cache=False)
    return LiteLLMJudge(LiteLLMJudgeConfig(**{**fields, **overrides}))


def sent(server: ScriptedServer, k: int) -> list[dict]:
    """The messages of the k-th request the server received."""
    return server.requests[k]["body"]["messages"]


# -- tools ------------------------------------------------------------------------------------------

def test_search_is_fuzzy_ranked_and_over_failed_runs(request_):
    hits = tools.search_trajectory(request_.group, "drawers", top_k=3)  # plural: fuzzy word match
    assert [(h.traj_id, h.turn) for h in hits][:1] == [("f2", 2)]
    assert all(h.traj_id != "s" for h in hits)  # the successful run is shown in full, not searched
    exact = tools.search_trajectory(request_.group, "go to countertop 1", top_k=5)
    assert [h.turn for h in exact[:3]] == [0, 1, 2] and exact[0].score > exact[-1].score


@pytest.mark.parametrize("args, needle", [
    ({"query": "", "top_k": 3}, "non-empty string"), ({"query": "mug", "top_k": "3"}, "top_k must be an integer"),
    ({"query": "mug", "top_k": True}, "top_k must be an integer"), ({"query": "mug", "top_k": 99}, "from 1 to"),
    ({"query": "!!!"}, "no letters"), ({"query": "mug", "k": 2}, "unknown argument"),
])
def test_search_rejects_bad_arguments_with_a_message(request_, args, needle):
    out = tools.run_tool(request_.group, "search_trajectory", json.dumps(args))
    assert out.startswith("error:") and needle in out


@pytest.mark.parametrize("args, needle", [
    ('{"traj_id": "f11", "start_turn": 0, "end_turn": 1}', "did you mean 'f1'"),
    ('{"traj_id": 1, "start_turn": 0, "end_turn": 1}', "must be a string"),
    ('{"traj_id": "f1", "start_turn": 2, "end_turn": 4}', "out of range"),
    ('{"traj_id": "f1", "start_turn": 2, "end_turn": 1}', "out of range"),
    ('{"traj_id": "f1", "start_turn": 1.0, "end_turn": 2}', "must be integers"),
    ('{"traj_id": "f1", "start_turn": 0}', "needs ['end_turn']"),
    ('{"traj_id": "f1", "start_turn": 0, "end_turn": 1', "not valid JSON"),
    ('[1, 2]', "must be a JSON object"),
])
def test_get_segment_rejects_bad_arguments_with_a_message(request_, args, needle):
    out = tools.run_tool(request_.group, "get_segment", args)
    assert out.startswith("error:") and needle in out


def test_get_segment_preview_and_rendering(request_):
    out = tools.run_tool(request_.group, "get_segment", {"traj_id": "f2", "start_turn": 1, "end_turn": 2})
    assert out.splitlines()[0].startswith("[turn 1] observation:") and "action: go to drawer 2" in out
    assert tools.run_tool(request_.group, "delete_run", "{}").startswith("error: unknown tool")
    line = tools.preview(request_.group.trajectories[1])
    assert "go to countertop 1 x3 | look" in line and "4 turns" in line
    assert "go to drawer 2 [invalid]" in tools.preview(request_.group.trajectories[2])
    text = render_trajectory(request_.success)
    assert "[turn 5]" in text and "succeeded" in text


def test_tool_schemas_are_openai_functions():
    names = [t["function"]["name"] for t in tools.TOOL_SCHEMAS]
    assert names == ["search_trajectory", "get_segment", "submit_segment"]
    assert all(t["type"] == "function" and t["function"]["parameters"]["type"] == "object"
               for t in tools.TOOL_SCHEMAS)


# -- the loop against a real server ---------------------------------------------------------------

def test_tool_calls_then_a_valid_answer(server, request_):
    server.push(tool_reply(("search_trajectory", {"query": "cabinet", "top_k": 3})),
                tool_reply(("get_segment", {"traj_id": "f2", "start_turn": 0, "end_turn": 2})),
                tool_reply(("submit_segment", VALID)))
    result = judge_for(server).propose(request_)
    assert result.proposal is not None and result.proposal.segment == Segment("s", 1, 2)
    assert result.proposal.rationale == VALID["rationale"] and result.failure == ""
    u = result.usage
    assert (u.calls, u.tool_calls, u.repairs, u.errors) == (3, 3, 0, 0)
    assert (u.prompt_tokens, u.completion_tokens, u.dollars) == (300, 30, 0.0)  # an unpriced model costs 0
    body = server.requests[0]["body"]
    assert body["model"] == "test-judge" and len(body["tools"]) == 3
    assert "[turn 5]" in sent(server, 0)[1]["content"]  # the successful run in full
    assert sent(server, 1)[-1]["role"] == "tool" and "f2 turn" in sent(server, 1)[-1]["content"]
    assert "[turn 2]" in sent(server, 2)[-1]["content"]


def test_malformed_json_arguments_are_answered_and_repaired(server, request_):
    server.push(tool_reply(("search_trajectory", '{"query": "mug", ')),
                tool_reply(("submit_segment", '{"traj_id": "s", "start_turn": 1,')),
                tool_reply(("submit_segment", VALID)))
    result = judge_for(server).propose(request_)
    assert result.proposal.segment == Segment("s", 1, 2)
    assert "not valid JSON" in sent(server, 1)[-1]["content"]  # the research tool's error
    assert "not valid JSON" in sent(server, 2)[-1]["content"] and sent(server, 2)[-1]["role"] == "tool"
    assert (result.usage.repairs, result.usage.errors, result.usage.calls) == (1, 1, 3)


def test_out_of_range_segments_then_a_repaired_one(server, request_):
    server.push(tool_reply(("submit_segment", {**VALID, "end_turn": 9})),
                tool_reply(("submit_segment", {**VALID, "start_turn": 5, "end_turn": 5})),
                text_reply('Final: {"traj_id": "s", "start_turn": 0, "end_turn": 4, "rationale": "x"}'),
                text_reply("```json\n" + json.dumps(VALID) + "\n```"))  # JSON in text is read too
    result = judge_for(server).propose(request_)
    assert result.proposal.segment == Segment("s", 1, 2)
    assert "out of range" in sent(server, 1)[-1]["content"]
    assert "final turn" in sent(server, 2)[-1]["content"]
    assert "at most 4" in sent(server, 3)[-1]["content"] and sent(server, 3)[-1]["role"] == "user"
    assert result.usage.repairs == 3 and result.usage.errors == 0


def test_invalid_answers_past_the_repair_budget_are_dropped(server, request_):
    server.push(*[tool_reply(("submit_segment", {**VALID, "traj_id": "f1"}))] * 2,
                text_reply("I think turn 2 matters."), tool_reply(("submit_segment", {**VALID, "start_turn": 3})))
    result = judge_for(server).propose(request_)
    assert result.proposal is None and "after 3 repair(s)" in result.failure
    assert len(server.requests) == 4 and result.usage.repairs == 3 and result.usage.errors == 1


def test_a_slow_answer_past_the_timeout_is_dropped(server, request_):
    server.push(slow(3.0, tool_reply(("submit_segment", VALID))))
    result = judge_for(server, timeout_s=0.5).propose(request_)
    assert result.proposal is None and "Timeout" in result.failure
    assert result.usage.errors == 1 and len(server.requests) == 1  # not retried
    assert result.usage.calls == result.usage.failed_calls == 1


def test_rate_limit_is_retried(server, request_):
    server.push(status(429, "slow down"), tool_reply(("submit_segment", VALID)))
    result = judge_for(server).propose(request_)
    assert result.proposal.segment == Segment("s", 1, 2)
    assert len(server.requests) == 2 and result.usage.errors == 0


def test_repeated_server_errors_drop_the_proposal(server, request_):
    server.push(status(500), status(502), status(503))
    result = judge_for(server, max_retries=2).propose(request_)
    assert result.proposal is None and "HTTP 503" in result.failure and "after 3 attempt(s)" in result.failure
    assert len(server.requests) == 3 and result.usage.errors == 1
    assert result.usage.calls == result.usage.failed_calls == 1 and result.usage.retries == 2


def test_the_research_cap_leaves_only_submit(server, request_):
    server.push(tool_reply(("search_trajectory", {"query": "mug"})),
                tool_reply(("get_segment", {"traj_id": "f1", "start_turn": 0, "end_turn": 0})),
                tool_reply(("submit_segment", VALID)))
    result = judge_for(server, max_tool_turns=1).propose(request_)
    assert [t["function"]["name"] for t in server.requests[1]["body"]["tools"]] == ["submit_segment"]
    assert "no research turns left" in sent(server, 2)[-2]["content"]  # the tool answer, then the repair
    assert result.proposal.segment == Segment("s", 1, 2) and result.usage.repairs == 1


def test_concurrent_requests_keep_order_and_the_limit(server, request_):
    def by_target(body: dict) -> dict:  # answer each request for its own successful run
        prompt = body["messages"][1]["content"]
        traj_id = prompt.split("submit_segment(traj_id='")[1].split("'")[0]
        return slow(0.05, tool_reply(("submit_segment", {**VALID, "traj_id": traj_id})))

    requests = []
    for k in range(5):
        group = Group("t", [trajectory(f"s{k}", SUCCESS, True), trajectory(f"f{k}", FAILED_1, False)])
        requests.append(JudgeRequest(group, 0))
    server.push(*[by_target] * 5)
    results = judge_for(server, concurrency=2).propose_all(requests)
    assert [r.proposal.segment.traj_id for r in results] == [f"s{k}" for k in range(5)]
    assert server.max_in_flight <= 2


def test_the_response_cache_in_memory_and_on_disk(server, request_, tmp_path):
    server.push(tool_reply(("submit_segment", VALID)))
    judge = judge_for(server, cache=True, cache_dir=str(tmp_path / "cache"))
    first, second = judge.propose(request_), judge.propose(request_)
    assert first.proposal.segment == second.proposal.segment and len(server.requests) == 1
    assert (second.usage.cached_calls, second.usage.calls, second.usage.prompt_tokens) == (1, 0, 0)
    again = judge_for(server, cache=True, cache_dir=str(tmp_path / "cache")).propose(request_)  # a new process
    assert again.proposal.segment == Segment("s", 1, 2) and again.usage.cached_calls == 1
    assert len(server.requests) == 1


def test_a_cached_reply_counts_apart_with_what_it_first_cost(server, request_, tmp_path):
    # priced by hand: the server reports 100 prompt and 10 completion tokens -> 100 * 0.001 + 10 * 0.002
    price = {"input_cost_per_token": 0.001, "output_cost_per_token": 0.002}
    server.push(tool_reply(("submit_segment", VALID)))
    judge = judge_for(server, cache=True, cache_dir=str(tmp_path / "cache"), litellm_kwargs=price)
    first, second = judge.propose(request_), judge.propose(request_)
    assert len(server.requests) == 1  # the second, identical request never reached the server
    u1, u2 = first.usage, second.usage
    assert (u1.calls, u1.cached_calls, u1.cached_dollars) == (1, 0, 0.0) and u1.dollars == pytest.approx(0.12)
    assert (u2.calls, u2.cached_calls, u2.dollars) == (0, 1, 0.0)  # paid: nothing
    assert u2.cached_dollars == pytest.approx(u1.dollars)  # what it cost when it was paid
    again = judge_for(server, cache=True, cache_dir=str(tmp_path / "cache"), litellm_kwargs=price).propose(request_)
    assert (again.usage.cached_calls, again.usage.dollars) == (1, 0.0)  # the cost survives on disk too
    assert again.usage.cached_dollars == pytest.approx(0.12) and len(server.requests) == 1


def test_the_api_key_never_leaks(server, request_, tmp_path, monkeypatch, caplog):
    key = "sk-test-SECRET-0123456789"
    monkeypatch.setenv("PROVER_TEST_JUDGE_KEY", key)
    server.push(status(500, f"bad key {key}"), status(500, f"bad key {key}"),
                tool_reply(("submit_segment", VALID)))
    cfg = LiteLLMJudgeConfig(model="openai/test-judge", api_base=server.url, api_key_env="PROVER_TEST_JUDGE_KEY",
                             backoff_s=0.01, max_retries=1, cache_dir=str(tmp_path / "cache"))
    judge = LiteLLMJudge(cfg)
    with caplog.at_level(logging.DEBUG):
        failed, ok = judge.propose(request_), judge.propose(request_)
    headers = {k.lower(): v for k, v in server.requests[0]["headers"].items()}
    assert headers["authorization"] == f"Bearer {key}"  # the server needs it ...
    assert ok.proposal is not None and failed.proposal is None and "***" in failed.failure
    files = list((tmp_path / "cache").iterdir())
    assert len(files) == 1  # ... but no body, cache key, cache file, log, failure or config holds it
    leaks = [json.dumps(r["body"]) for r in server.requests] + [f.name + f.read_text() for f in files] + [
        caplog.text, failed.failure, repr(cfg), cfg.model_dump_json(), repr(judge.chat)]
    assert not [text for text in leaks if key in text]


def test_a_missing_key_variable_is_a_config_error(monkeypatch):
    from prover.errors import ConfigError

    monkeypatch.delenv("PROVER_TEST_UNSET_KEY", raising=False)
    with pytest.raises(ConfigError, match="PROVER_TEST_UNSET_KEY"):
        LiteLLMJudge(LiteLLMJudgeConfig(api_key_env="PROVER_TEST_UNSET_KEY"))
    with pytest.raises(ValueError, match="may not set"):
        LiteLLMJudgeConfig(litellm_kwargs={"api_key": "sk-x"})


# -- LiteLLM's mock_response (no server) -----------------------------------------------------------

def test_litellm_mock_response_and_mock_tool_calls(request_):
    pytest.importorskip("litellm")
    text = LiteLLMJudge(LiteLLMJudgeConfig(model="gpt-4o-mini", cache=False,
                                           litellm_kwargs={"mock_response": json.dumps(VALID)})).propose(request_)
    assert text.proposal.segment == Segment("s", 1, 2)
    assert text.usage.dollars > 0  # a priced model: cost from LiteLLM's bundled map, offline
    call = [{"id": "c0", "type": "function", "function": {"name": "submit_segment", "arguments": json.dumps(VALID)}}]
    tool = LiteLLMJudge(LiteLLMJudgeConfig(model="gpt-4o-mini", cache=False,
                                           litellm_kwargs={"mock_tool_calls": call})).propose(request_)
    assert tool.proposal.segment == Segment("s", 1, 2) and tool.usage.tool_calls == 1
    limited = LiteLLMJudge(LiteLLMJudgeConfig(model="gpt-4o-mini", cache=False, max_retries=1, backoff_s=0.0,
                                              litellm_kwargs={"mock_response": "litellm.RateLimitError"}))
    dropped = limited.propose(request_)
    assert dropped.proposal is None and dropped.usage.errors == 1 and "RateLimitError" in dropped.failure


# -- the local judge's text format -----------------------------------------------------------------

def test_tool_calls_are_parsed_from_text():
    text = ('<think>let me look</think>Checking. <tool_call>{"name": "get_segment", "arguments": '
            '{"traj_id": "f1", "start_turn": 0, "end_turn": 1}}</tool_call><tool_call>{"name": "search_tr')
    prose, calls = parse_tool_calls(text.replace("<think>let me look</think>", ""))
    assert prose == "Checking."
    assert calls[0].name == "get_segment" and json.loads(calls[0].arguments)["end_turn"] == 1
    assert calls[1].name == "" and calls[1].arguments.startswith('{"name"')  # cut off: answered with an error
    assert find_json_object('x {"a": 1} {"traj_id": "s"} y') == {"traj_id": "s"}


def test_messages_for_templates_with_and_without_tools_support():
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "u"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "get_segment", "arguments": '{"a": 1}'}}]},
            {"role": "tool", "tool_call_id": "c", "content": "result"}]
    native = template_messages(msgs, tools.TOOL_SCHEMAS, native_tools=True)
    assert native[2]["tool_calls"][0]["function"]["arguments"] == {"a": 1}  # an object, as Qwen's template wants
    plain = template_messages(msgs, tools.TOOL_SCHEMAS, native_tools=False)
    assert "<tools>" in plain[0]["content"] and '"submit_segment"' in plain[0]["content"]
    assert '<tool_call>{"name": "get_segment", "arguments": {"a": 1}}</tool_call>' in plain[2]["content"]
    # the tool's answer is env text, the wrapping the template's words
    assert plain[3] == {"role": "user", "content": "<tool_response>\nresult\n</tool_response>",
                        "env_spans": [(16, 22)]}


# -- the local judge on the tiny model -------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    from prover.envs import make_env
    from prover.policy.tiny import build_tiny_policy

    return build_tiny_policy(lambda: make_env("alfworld-sim"), tmp_path_factory.mktemp("tiny"), vocab_size=400,
                             hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, corpus_episodes=20)


def test_local_judge_terminates_and_counts(tiny_model_dir, request_):
    from prover.judges.agentic import LocalJudge, LocalJudgeConfig

    cfg = LocalJudgeConfig(model_path=str(tiny_model_dir), dtype="float32", device="cpu", max_new_tokens=8,
                           max_tool_turns=2, max_repairs=2)
    judge = LocalJudge(cfg)
    result, = judge.propose_all([request_])  # a random tiny model cannot answer: it must be dropped, counted
    u = result.usage
    assert result.proposal is None and "after 2 repair(s)" in result.failure
    assert u.repairs == 2 and 3 <= u.calls <= 1 + cfg.max_tool_turns + cfg.max_repairs
    assert u.prompt_tokens > 1000 and 0 < u.completion_tokens <= 8 * u.calls and u.dollars == 0.0
    judge.close()


def test_local_chat_renders_tools_through_a_template_that_supports_them(tiny_model_dir):
    from prover.chat import LocalChat, LocalSettings

    chat = LocalChat(LocalSettings(model_path=str(tiny_model_dir), dtype="float32", device="cpu", max_new_tokens=4))
    assert not chat.native_tools  # the tiny template has no tools support: tools go into the system text
    plain = chat.tokenizer.decode(chat.encode([{"role": "user", "content": "hi"}], tools.TOOL_SCHEMAS))
    assert "<tools>" in plain and "submit_segment" in plain
    chat.tokenizer.chat_template = (
        "{% if tools %}TOOLS={{ tools | map(attribute='function') | map(attribute='name') | join(',') }};"
        "{% endif %}{% for m in messages %}{{ m['role'] }}:{{ m['content'] }}{% if m.tool_calls %}"
        "{% for c in m.tool_calls %}<call>{{ c.function.arguments | tojson }}</call>{% endfor %}{% endif %}"
        "{% endfor %}")
    chat.native_tools = True
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "get_segment", "arguments": '{"end_turn": 1}'}}]}]
    text = chat.tokenizer.decode(chat.encode(msgs, tools.TOOL_SCHEMAS))
    assert text.startswith("TOOLS=search_trajectory,get_segment,submit_segment;")
    assert '<call>{"end_turn": 1}</call>' in text  # an object, not a JSON string inside JSON
    reply = chat.chat([{"role": "user", "content": "hi"}])
    assert reply.prompt_tokens > 0 and 0 < reply.completion_tokens <= 4 and reply.dollars == 0.0


# -- what a judge's model is shown: never the gold, never the true state ---------------------------

GOLD, STATE = "GOLD-ANSWER-7f3a", "HIDDEN-STATE-91c2"


@pytest.fixture
def privileged_request():
    """The usual group, each run carrying a gold answer and state keys that no prompt may show."""
    group = Group("task-0", [trajectory("s", SUCCESS, True), trajectory("f1", FAILED_1, False),
                             trajectory("f2", FAILED_2, False, invalid=(2,))])
    for traj in group.trajectories:
        traj.gold = f"{GOLD} (clean the mug at sinkbasin 1)"
        for t, turn in enumerate(traj.turns):
            turn.state_key = (STATE, traj.traj_id, t)
    return JudgeRequest(group, target=0, max_turns=4)


def assert_nothing_privileged(text: str) -> None:
    assert GOLD not in text and STATE not in text


def test_the_litellm_judge_never_sends_gold_or_state_keys(server, privileged_request):
    server.push(tool_reply(("search_trajectory", {"query": "mug cabinet", "top_k": 20})),
                tool_reply(("get_segment", {"traj_id": "f2", "start_turn": 0, "end_turn": 2}),
                           ("get_segment", {"traj_id": "s", "start_turn": 0, "end_turn": 5})),
                tool_reply(("submit_segment", {**VALID, "end_turn": 9})),  # a repair message too
                tool_reply(("submit_segment", VALID)))
    result = judge_for(server).propose(privileged_request)
    assert result.proposal.segment == Segment("s", 1, 2) and len(server.requests) == 4
    messages = sent(server, 3)  # the last request holds the whole conversation
    tool_results = [m["content"] for m in messages if m["role"] == "tool"]
    assert "f2 turn" in tool_results[0] and "[turn 2]" in tool_results[1] and "[turn 5]" in tool_results[2]
    for request in server.requests:  # every message, tool schema and setting of every request
        assert_nothing_privileged(json.dumps(request["body"]))


def test_the_local_judge_never_sees_gold_or_state_keys(tiny_model_dir, privileged_request, monkeypatch):
    from prover.chat import LocalChat
    from prover.judges.agentic import LocalJudge, LocalJudgeConfig

    shown, encode = [], LocalChat.encode

    def spy(self, messages, tools_):  # what the chat template renders for the model, every request
        shown.append(json.dumps([messages, tools_]))
        ids = encode(self, messages, tools_)
        shown.append(self.tokenizer.decode(ids))
        return ids

    monkeypatch.setattr(LocalChat, "encode", spy)
    cfg = LocalJudgeConfig(model_path=str(tiny_model_dir), dtype="float32", device="cpu", max_new_tokens=8,
                           max_tool_turns=1, max_repairs=1)
    judge = LocalJudge(cfg)
    judge.propose(privileged_request)
    judge.close()
    assert len(shown) >= 4 and "[turn 5]" in shown[0]  # the successful run was shown, in full
    for text in shown:
        assert_nothing_privileged(text)
