"""The litellm judge against what llama.cpp's server does, replayed by the scripted OpenAI server on
127.0.0.1: it refuses response_format json_schema (HTTP 500, a pydantic validation error) and takes
json_object with the schema; with the model's own chat template it returns tool calls as text in
``content``; a model answers in the prompt's python-call spelling; first answers run longer than L."""

from __future__ import annotations

import json

import pytest

from openai_server import ScriptedServer, status, text_reply, tool_reply
from prover.judges.agentic import answer_schema
from prover.types import Group, JudgeRequest, Segment, Trajectory, Turn
from test_judges_llm import judge_for  # the same judge over the scripted server

SUCCESS = ["go to cabinet 1", "open cabinet 1", "take mug 1 from cabinet 1", "go to sinkbasin 1",
           "clean mug 1 with sinkbasin 1", "put mug 1 in/on countertop 1"]
FAILED = ["go to countertop 1", "go to countertop 1", "look"]
VALID = {"traj_id": "s", "start_turn": 1, "end_turn": 2, "rationale": "opens the cabinet the failed runs skip"}

# what llama.cpp's server answers a response_format of type json_schema (HTTP 500)
REFUSAL = ("1 validation error for ResponseFormat\ntype\n  Input should be 'text' or 'json_object' "
           "[type=literal_error, input_value='json_schema', input_type=str]")


def trajectory(traj_id: str, actions: list[str], won: bool) -> Trajectory:
    turns = [Turn(prompt_ids=[1], completion_ids=[2], logprobs=[-0.1], observation=f"You are in the kitchen ({t}).",
                  completion_text=a, action=a, format_valid=True, action_valid=True,
                  reward=float(won and t == len(actions) - 1), state_key=t) for t, a in enumerate(actions)]
    return Trajectory(traj_id, "task-0", "clean some mug and put it in countertop", turns, won=won)


@pytest.fixture
def request_():
    group = Group("task-0", [trajectory("s", SUCCESS, True), trajectory("f1", FAILED, False)])
    return JudgeRequest(group, target=0, max_turns=4)


@pytest.fixture
def server():
    pytest.importorskip("litellm")
    with ScriptedServer() as srv:
        yield srv


def formats(server: ScriptedServer) -> list[dict | None]:
    return [r["body"].get("response_format") for r in server.requests]


# -- 1. structured output in the form the server reads, and errors that are not transient --------

def test_auto_resends_a_refused_json_schema_as_json_object_and_keeps_to_it(server, request_):
    server.push(status(500, REFUSAL), text_reply(json.dumps(VALID)), text_reply(json.dumps(VALID)))
    judge = judge_for(server, structured=True, mode="answer-only", max_tokens=96)
    first, second = judge.propose(request_), judge.propose(request_)
    schema = answer_schema(request_, 2000, 96)
    assert first.proposal.segment == second.proposal.segment == Segment("s", 1, 2)
    sent = formats(server)
    assert len(sent) == 3 and sent[0]["type"] == "json_schema"
    # once refused, once resent, and the json_object form from then on: no second refusal to pay for
    assert sent[1] == sent[2] == {"type": "json_object", "schema": schema}
    assert (first.usage.errors, first.usage.retries, second.usage.retries) == (0, 1, 0)


def test_a_fixed_structured_format_is_sent_as_is(server, request_):
    server.push(text_reply(json.dumps(VALID)), status(500, REFUSAL))
    schema = answer_schema(request_, 2000, 96)
    ok = judge_for(server, structured=True, structured_format="json_object", mode="answer-only",
                   max_tokens=96).propose(request_)
    refused = judge_for(server, structured=True, structured_format="json_schema", mode="answer-only",
                        max_tokens=96, max_retries=3).propose(request_)
    assert ok.proposal.segment == Segment("s", 1, 2) and formats(server)[0] == {"type": "json_object", "schema": schema}
    assert refused.proposal is None and len(server.requests) == 2  # json_schema asked for: no resend, no retry


def test_a_validation_error_is_not_retried(server, request_):
    message = ("1 validation error for ChatCompletionRequest\nmessages.1.content\n  Input should be a valid "
               "string [type=string_type, input_value=None, input_type=NoneType]")
    server.push(*[status(500, message)] * 4)
    result = judge_for(server, max_retries=3).propose(request_)
    assert result.proposal is None and len(server.requests) == 1 and "after 1 attempt(s)" in result.failure


def test_the_failure_keeps_the_whole_error_text_on_one_line(server, request_):
    cause = "Input should be 'text' or 'json_object' [type=literal_error, input_value='json_schema', input_type=str]"
    tail = "x" * 5000
    server.push(status(400, f"1 validation error for ResponseFormat\ntype\n  {cause}\n{tail}"))
    result = judge_for(server).propose(request_)
    assert result.proposal is None and "HTTP 400" in result.failure
    assert f"ResponseFormat type {cause}" in result.failure  # the cause, from past the first line
    assert "\n" not in result.failure and "  " not in result.failure
    assert len(result.failure) < 1200 and "more characters]" in result.failure  # bounded, and says so


# -- 2. tool calls written as text in content ------------------------------------------------------

SEARCH = {"name": "search_trajectory", "arguments": {"query": "countertop", "top_k": 2}}
SUBMIT = {"name": "submit_segment", "arguments": VALID}


@pytest.mark.parametrize("research, answer", [
    (f"<tool_call>\n{json.dumps(SEARCH)}\n</tool_call>", f"<tool_call>{json.dumps(SUBMIT)}</tool_call>"),
    (f"Let me look.\n```json\n{json.dumps(SEARCH)}\n```", f"```json\n{json.dumps(SUBMIT)}\n```"),
    (json.dumps(SEARCH), "Done: " + json.dumps(SUBMIT)),
    ("search_trajectory(query='countertop', top_k=2)",
     "submit_segment(traj_id='s', start_turn=1, end_turn=2, rationale='opens the cabinet the failed runs skip')"),
], ids=["tool_call-tags", "fenced-json", "bare-json", "python-call"])
def test_tool_calls_written_as_text_are_read(server, request_, research, answer):
    server.push(text_reply(research), text_reply(answer))
    result = judge_for(server).propose(request_)
    assert result.proposal.segment == Segment("s", 1, 2)
    assert result.proposal.rationale == VALID["rationale"]
    assert (result.usage.tool_calls, result.usage.repairs, result.usage.errors) == (2, 0, 0)
    assistant, answered = server.requests[1]["body"]["messages"][-2:]
    assert assistant["tool_calls"][0]["function"]["name"] == "search_trajectory"
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == SEARCH["arguments"]
    assert answered["role"] == "tool" and answered["content"].startswith("f1 turn")  # the search ran


def test_only_offered_tools_are_read_from_json_or_calls_and_tags_always():
    from prover.chat import parse_tool_calls
    from prover.judges.tools import SUBMIT_SCHEMA, TOOL_SCHEMAS

    unknown = '{"name": "delete_run", "arguments": {}} and delete_run(traj_id="s")'
    assert parse_tool_calls(unknown, TOOL_SCHEMAS) == (unknown, [])
    assert parse_tool_calls(json.dumps(VALID), TOOL_SCHEMAS)[1] == []  # an answer object is no call
    prose, calls = parse_tool_calls("get_segment(traj_id='f1', start_turn=0, end_turn=1)", [SUBMIT_SCHEMA])
    assert calls == []  # offered only submit_segment
    assert parse_tool_calls(json.dumps(SUBMIT))[1] == []  # no tools offered: only <tool_call> blocks count
    prose, calls = parse_tool_calls(f"Now:\n```json\n{json.dumps(SUBMIT)}\n```\nthanks", TOOL_SCHEMAS)
    assert prose == "Now:\n\nthanks" and [c.name for c in calls] == ["submit_segment"]
    assert json.loads(calls[0].arguments) == VALID


def test_local_chat_reads_calls_through_the_same_parser(monkeypatch):
    import threading
    from types import SimpleNamespace

    from prover.chat import LocalChat, LocalSettings
    from prover.judges.tools import TOOL_SCHEMAS

    written = "get_segment(traj_id='f1', start_turn=0, end_turn=1)<|im_end|>"
    chat = LocalChat.__new__(LocalChat)  # no model: the generated text is given
    chat.settings, chat.structured, chat.max_context = LocalSettings(model_path="x"), False, None
    chat._lock, chat._calls, chat.name = threading.Lock(), 0, "local:x"
    chat.tokenizer = SimpleNamespace(decode=lambda ids, skip_special_tokens: written)
    chat.engine = SimpleNamespace(generate=lambda *a, **k: [SimpleNamespace(token_ids=[1, 2])])
    monkeypatch.setattr(LocalChat, "encode", lambda self, messages, tools: [1])
    reply = chat.chat([{"role": "user", "content": "hi"}], TOOL_SCHEMAS)
    assert [(c.name, json.loads(c.arguments)) for c in reply.tool_calls] == \
        [("get_segment", {"traj_id": "f1", "start_turn": 0, "end_turn": 1})] and reply.text == ""


# -- 3. the answer as the prompt spells it: submit_segment(...) ------------------------------------

def test_find_call_reads_literal_arguments_by_name_and_position():
    from prover.chat import find_call

    text = ("The run avoids the loop. submit_segment(traj_id='t3', start_turn=2, end_turn=4, "
            "rationale='it opens (then checks) the cabinet')")
    call = find_call(text, ["submit_segment"])
    assert call.error == "" and call.arguments == {"traj_id": "t3", "start_turn": 2, "end_turn": 4,
                                                   "rationale": "it opens (then checks) the cabinet"}
    assert text[call.span[0]:call.span[1]].startswith("submit_segment(") and text.endswith(text[call.span[1] - 1])
    params = {"submit_segment": ["traj_id", "start_turn", "end_turn", "rationale"]}
    assert find_call("submit_segment('t3', 2, end_turn=4)", ["submit_segment"], params).arguments == \
        {"traj_id": "t3", "start_turn": 2, "end_turn": 4}
    assert "positional" in find_call("submit_segment('t3', 2)", ["submit_segment"]).error  # names unknown
    # the prompt's own template echoed, then the real answer: the readable one wins
    echo = "submit_segment(traj_id='t3', start_turn, end_turn, rationale) -> submit_segment(traj_id='t3', " \
           "start_turn=1, end_turn=1)"
    assert find_call(echo, ["submit_segment"]).arguments["start_turn"] == 1
    assert find_call("resubmit_segment(x=1) or submit_segment", ["submit_segment"]) is None


@pytest.mark.parametrize("bad", ["__import__('os').system('touch PWNED')", "open('PWNED', 'w')",
                                 "[x for x in ().__class__.__bases__]", "*['PWNED']", "**{'traj_id': 's'}"])
def test_a_call_with_a_non_literal_argument_is_refused_and_runs_nothing(bad, tmp_path, monkeypatch):
    from prover.chat import find_call, parse_tool_calls
    from prover.judges.agentic import read_answer
    from prover.judges.tools import TOOL_SCHEMAS

    monkeypatch.chdir(tmp_path)
    arg = bad if bad.startswith("*") else f"traj_id={bad}"
    text = f"submit_segment({arg}, start_turn=2, end_turn=4, rationale='r')"
    call = find_call(text, ["submit_segment"])
    assert call.arguments == {} and call.error.startswith(("argument 'traj_id'", "submit_segment(...)"))
    assert parse_tool_calls(text, TOOL_SCHEMAS)[1] == []  # left in the prose, where the reader says why
    answer = read_answer(None, text)
    assert isinstance(answer, str) and answer.startswith("error: ")
    assert "not a literal" in answer or "unpacks" in answer
    assert list(tmp_path.iterdir()) == []  # nothing was run: no file written


def test_a_python_call_answer_is_read_in_answer_only_mode(server, request_, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    server.push(text_reply("submit_segment(traj_id=__import__('os').system('touch PWNED'), start_turn=1, "
                           "end_turn=2, rationale='r')"),
                text_reply("Sure. submit_segment(traj_id='s', start_turn=1, end_turn=2, rationale='opens it')"))
    result = judge_for(server, mode="answer-only").propose(request_)
    assert result.proposal.segment == Segment("s", 1, 2) and result.proposal.rationale == "opens it"
    repair = server.requests[1]["body"]["messages"][-1]["content"]
    assert "argument 'traj_id' of submit_segment(...) is not a literal" in repair
    assert result.usage.errors_by_kind == {"unreadable": 1} and list(tmp_path.iterdir()) == []


# -- 4. segments no longer than L: the rule in the prompt, and a repair that says what to change ---

def test_the_prompt_states_the_length_rule_beside_the_answer_format(request_):
    from prover.judges.agentic import user_prompt

    for answer_only in (False, True):
        *_, how, rule = user_prompt(request_, answer_only=answer_only).splitlines()
        assert how.startswith(("Answer with submit_segment(traj_id='s'", 'Reply with one JSON object: {"traj_id"'))
        # L = 4, 6 turns: a segment holds at most 4 turns and ends at turn 4 at the latest
        assert rule.startswith("Rules: the segment spans at most 4 consecutive turns, so end_turn <= start_turn + 3;")
        assert "ends at turn 4 or earlier" in rule


def test_a_too_long_segment_is_told_which_bound_to_move(server):
    from prover.judges.base import validate_segment

    actions = [f"step {t}" for t in range(10)]
    request = JudgeRequest(Group("t", [trajectory("s", actions, True), trajectory("f1", FAILED, False)]), 0,
                           max_turns=4)
    # 2..7 is 6 turns; with L = 4 either start_turn >= 7 - 4 + 1 or end_turn <= 2 + 4 - 1
    assert validate_segment(request, Segment("s", 2, 7)) == \
        "segment 2..7 has 6 turns; at most 4 are allowed: choose start_turn >= 4 or end_turn <= 5"
    assert validate_segment(request, Segment("s", 0, 4)).endswith("choose start_turn >= 1 or end_turn <= 3")
    server.push(text_reply(json.dumps({**VALID, "start_turn": 2, "end_turn": 7})),
                text_reply(json.dumps({**VALID, "start_turn": 4, "end_turn": 7})))
    result = judge_for(server, mode="answer-only").propose(request)
    assert result.proposal.segment == Segment("s", 4, 7) and result.usage.repairs == 1
    assert "choose start_turn >= 4 or end_turn <= 5" in server.requests[1]["body"]["messages"][-1]["content"]


# -- 5. a repair asks for the answer alone --------------------------------------------------------
# Served by llama.cpp, Qwen2.5-Coder-1.5B answered a repair that still offered the research tools with prose
# ("To fix the segment, we need to ensure it ends before turn 9. Let's inspect ...") and no call, three times.

def offered(server: ScriptedServer, k: int) -> tuple[list[str], dict | None]:
    body = server.requests[k]["body"]
    return [t["function"]["name"] for t in body.get("tools") or []], body.get("tool_choice")


@pytest.mark.parametrize("repair_tools", ["submit", "all"])
def test_a_repair_offers_only_submit_segment_and_names_it(server, request_, repair_tools):
    server.push(tool_reply(("search_trajectory", {"query": "cabinet"})),
                tool_reply(("submit_segment", {**VALID, "end_turn": 5})),  # ends at the last turn: a repair
                tool_reply(("submit_segment", VALID)))
    result = judge_for(server, repair_tools=repair_tools).propose(request_)
    assert result.proposal.segment == Segment("s", 1, 2) and result.usage.repairs == 1
    research = ["search_trajectory", "get_segment", "submit_segment"]
    assert offered(server, 0) == offered(server, 1) == (research, None)  # before any repair: the tools, free
    named = {"type": "function", "function": {"name": "submit_segment"}}
    assert offered(server, 2) == ((["submit_segment"], named) if repair_tools == "submit" else (research, None))


def test_a_structured_repair_is_decoded_under_the_answer_schema(server, request_):
    server.push(tool_reply(("submit_segment", {**VALID, "start_turn": 0, "end_turn": 4})),  # 5 turns > L
                text_reply(json.dumps(VALID)))
    result = judge_for(server, structured=True, structured_format="json_object").propose(request_)
    assert result.proposal.segment == Segment("s", 1, 2) and result.usage.repairs == 1
    first, repair = server.requests[0]["body"], server.requests[1]["body"]
    assert first.get("response_format") is None and len(first["tools"]) == 3
    assert repair.get("tools") is None and repair.get("tool_choice") is None
    assert repair["response_format"] == {"type": "json_object", "schema": answer_schema(request_, 2000, 2048)}
