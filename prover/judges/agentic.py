"""The agentic LLM judges: ``litellm`` (any LiteLLM model or a local OpenAI-compatible server) and
``local`` (a Hugging Face folder in this process). Both run the same tool-calling loop.

The loop, per request (ProVer's propose step, docs/methods/prover.md):
1. The model sees the task, the successful trajectory in full with turn numbers, and one-line previews
   of the failed runs; it may call ``search_trajectory`` and ``get_segment`` (``tools.py``) for at most
   ``max_tool_turns`` replies, after which only ``submit_segment`` is offered.
2. Its answer, a ``submit_segment`` call (from the server, or written as text: ``parse_tool_calls``) or, in
   its text, a JSON object or a python-style ``submit_segment(...)`` with literal arguments, is checked
   with pydantic (``SegmentAnswer``) and then with ``validate_segment`` (bounds, at most L turns, a
   non-terminal end, no invalid action: the rules, and the legal segments they leave, are stated beside
   the answer format).
3. A failed check is sent back with the reason, the legal segments again and the segments already
   refused, up to ``max_repairs`` times (the ProVer paper used 3), and the repair turn offers only
   ``submit_segment`` (``repair_tools``); after that,
   or when a request fails for good (timeout, refused, 5xx after retries), the result has no proposal,
   a failure reason, and its usage counts the calls, tokens, dollars, tool calls, repairs and errors.

``mode: answer-only`` skips step 1's tools: the model is asked for the JSON object outright, for models
whose chat template has no tool support (SmolLM2). Structured output (``structured: true`` on the chat
settings, see ``prover/chat/``) applies wherever the model may only answer (answer-only, or agentic once
only ``submit_segment`` is left): the reply is then decoded under ``answer_schema``, a JSON object whose
``traj_id`` is the success's, whose (start_turn, end_turn) is a segment that passes validation, and whose
rationale is printable ASCII short enough for the whole object to fit in the model's reply budget, so it
always parses and can always be verified. Every reply is kept, cut to ``max_reply_chars``, in
the result's ``transcript`` (``groups.jsonl``, ``prover view``).

``propose`` never raises on what a model or a server does; ``propose_all`` runs requests on a thread
pool of ``concurrency`` workers.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from prover.chat import (
    ChatError,
    ChatModel,
    ChatReply,
    LiteLLMChat,
    LiteLLMSettings,
    LocalChat,
    LocalSettings,
    ToolCall,
    ask,
    assistant_message,
    count_reply,
    cut_text,
    find_call,
    find_json_object,
    require_xgrammar,
    tool_message,
)
from prover.errors import ConfigError, validation_line
from prover.judges.base import Judge, JudgeSettings, validate_segment
from prover.judges.prompts import ANSWER_ONLY_PROMPT, SYSTEM_PROMPT, repair_message, user_prompt
from prover.judges.tools import MAX_TOOL_CHARS, SUBMIT_SCHEMA, TOOL_SCHEMAS, parse_arguments, run_tool
from prover.learning.model_folder import check_model_dir
from prover.types import JudgeRequest, JudgeResult, JudgeUsage, Proposal, Segment

SUBMIT = SUBMIT_SCHEMA["function"]["name"]
NO_RESEARCH_LEFT = "error: no research turns left; call submit_segment now"
ECHO_CHARS = 200  # what an error message repeats of a model's bad value (it may be huge)
# printable ASCII but '"' and '\\': one byte a character and no escapes, so no token holds less than one
# character of it and a reply budget of N tokens surely fits N characters. The bound is in the pattern,
# not a maxLength: xgrammar ignores maxLength on a string that has a pattern
RATIONALE_PATTERN = r'^[ !#-\[\]-~]{0,%d}$'
# the most rationale characters a structured answer's schema allows: llama.cpp's grammar parser refuses a
# repetition that expands to more than 2000 rules (MAX_REPETITION_THRESHOLD, src/llama-grammar.cpp), and
# llama-cpp-python's server writes {0,N} as N nested optional groups, about 2N rules; over it the server
# fails to parse the grammar (llama-cpp-python 0.3.36 then dies)
GRAMMAR_RATIONALE_CHARS = 900


class SegmentAnswer(BaseModel):
    """The structured final answer. Numeric strings are accepted for turns ("3" -> 3); floats are not."""

    model_config = ConfigDict(extra="ignore")
    traj_id: str
    start_turn: int
    end_turn: int
    rationale: str = ""


class LoopSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_tool_turns: int = Field(8, ge=0, description="Most model replies spent on search_trajectory/get_segment "
                                "before only submit_segment is offered.")
    max_repairs: int = Field(3, ge=0, description="Invalid answers sent back with the reason before the "
                             "proposal is dropped (the ProVer paper used 3).")
    concurrency: int = Field(8, ge=1, description="Requests (groups) judged at the same time.")
    obs_chars: int = Field(600, ge=20, description="Characters of each observation shown in the successful run.")
    preview_chars: int = Field(400, ge=40, description="Characters of each failed run's preview line.")
    max_tool_chars: int = Field(MAX_TOOL_CHARS, ge=100, description="Characters kept of each tool answer "
                                "sent to the model (the rest is cut, and the answer says how much): every "
                                "answer is resent with each later request and is part of its cache key.")
    max_rationale_chars: int = Field(2000, ge=20, description="Characters kept of the model's rationale "
                                     "for a proposal (in groups.jsonl and `prover view`).")
    mode: Literal["agentic", "answer-only"] = Field("agentic", description="'agentic': research tools, then "
                                                    "submit_segment; 'answer-only': no tools, the model "
                                                    "replies with the JSON answer (models without a tool "
                                                    "template, e.g. SmolLM2).")
    max_reply_chars: int = Field(1000, ge=20, description="Characters kept of each model reply in the "
                                 "result's transcript (groups.jsonl's judge_replies, `prover view`).")
    repair_tools: Literal["submit", "all"] = Field(
        "submit", description="Tools offered on a repair turn (agentic): 'submit', only submit_segment (a "
        "server that honours tool_choice must then call it, and a structured model answers under the "
        "schema); 'all', the research tools too while they last (a 1.5B model then left the answer "
        "format and wrote prose).")


def valid_spans(request: JudgeRequest) -> dict[int, list[int]]:
    """Every (start, end) that ``validate_segment`` accepts for ``request``, as start -> its ends."""
    success, spans = request.success, {}
    for s in range(len(success.turns)):
        ends = [e for e in range(s, s + request.max_turns)
                if validate_segment(request, Segment(success.traj_id, s, e)) is None]
        if ends:
            spans[s] = ends
    return spans


def answer_schema(request: JudgeRequest, rationale_chars: int, reply_tokens: int | None = None) -> dict:
    """The JSON schema of a final answer to ``request``, for structured decoding.

    ``traj_id`` is the success's and (start_turn, end_turn) is one of the segments ``validate_segment``
    accepts (at most L turns, ending before the last, no rejected action), one alternative per start:
    every structured answer can be verified, and verification alone decides whether it was right. With
    no such segment, both turns only lie in 0..n-2. With ``reply_tokens`` known, the rationale is cut so
    that the whole object, as xgrammar writes it (", " and ": " separators), fits in it with the stop
    token: a structured reply is then never cut short, whatever the model. The rationale never exceeds
    ``GRAMMAR_RATIONALE_CHARS``, so that llama.cpp's server can parse the grammar."""
    success = request.success
    last = max(0, len(success.turns) - 2)
    chars = min(rationale_chars, GRAMMAR_RATIONALE_CHARS)
    if reply_tokens is not None:
        frame = json.dumps({"traj_id": success.traj_id, "start_turn": last, "end_turn": last, "rationale": ""})
        chars = max(0, min(chars, reply_tokens - len(frame.encode()) - 1))

    def answer(start: dict, end: dict) -> dict:
        return {"type": "object", "additionalProperties": False,
                "required": ["traj_id", "start_turn", "end_turn", "rationale"],
                "properties": {"traj_id": {"type": "string", "enum": [success.traj_id]},
                               "start_turn": start, "end_turn": end,
                               "rationale": {"type": "string", "pattern": RATIONALE_PATTERN % chars}}}

    spans = valid_spans(request)
    if not spans:
        turn = {"type": "integer", "minimum": 0, "maximum": last}
        return answer(turn, turn)
    return {"anyOf": [answer({"type": "integer", "enum": [s]}, {"type": "integer", "enum": ends})
                      for s, ends in spans.items()]}


def reply_record(reply: ChatReply, max_chars: int) -> str:
    """One reply as kept in a transcript: its text, then each tool call it made, cut to ``max_chars``."""
    calls = "".join(f"\n-> {c.name}({c.arguments})" for c in reply.tool_calls)
    return cut_text((reply.text + calls).strip(), max_chars)


class Unreadable(str):
    """Why an answer could not even be read (no JSON, broken JSON): counted as an error, then repaired."""


class Refused(str):
    """Why a readable answer's segment failed validation; ``segment`` is that answer's."""

    segment: Segment

    def __new__(cls, why: str, segment: Segment) -> Refused:
        refused = super().__new__(cls, why)
        refused.segment = segment
        return refused


def read_answer(arguments: str | None, text: str) -> SegmentAnswer | str:
    """A submit_segment call's arguments (or, without one, the reply text) -> answer, or why not.

    The text is read as a JSON object with traj_id, else as a python-style ``submit_segment(...)`` call
    (``find_call``: literal arguments only, parsed and never run; positional ones in the fields' order)."""
    if arguments is not None:
        raw = parse_arguments(arguments)
        if isinstance(raw, str):
            return Unreadable(raw)
    else:
        raw = find_json_object(text)
        if raw is None:  # the prompt spells the answer as a call: a model may write it so, as text
            call = find_call(text, [SUBMIT], {SUBMIT: list(SegmentAnswer.model_fields)})
            if call is not None and call.error:
                return Unreadable(f"error: {call.error}")
            raw = call.arguments if call is not None else None
        if raw is None:
            return Unreadable("error: no answer found; call submit_segment (or reply with one JSON object "
                              "with traj_id, start_turn, end_turn, rationale)")
    try:
        return SegmentAnswer.model_validate(raw)
    except ValidationError as exc:
        at = None if exc.errors()[0]["loc"] else "answer"
        return "error: " + validation_line(exc, what="", at=at, echo=lambda v: cut_text(repr(v), ECHO_CHARS))


def answer_tool_calls(request: JudgeRequest, reply: ChatReply, may_research: bool, messages: list[dict],
                      usage: JudgeUsage, max_chars: int = MAX_TOOL_CHARS) -> ToolCall | None:
    """Answer every research call of a reply (and any extra submit); return its first submit_segment."""
    submit = next((c for c in reply.tool_calls if c.name == SUBMIT), None)
    for call in reply.tool_calls:  # every call gets an answer: the API requires one per call id
        if call is submit:
            continue  # answered by the loop, and only if it needs repairing
        usage.tool_calls += 1
        if call.name == SUBMIT:
            out = "error: only the first submit_segment of a reply is read"
        elif not may_research:
            out = NO_RESEARCH_LEFT
        else:
            out = run_tool(request.group, call.name, call.arguments, max_chars)
        messages.append(tool_message(call.id, out))
    return submit


def check_answer(request: JudgeRequest, reply: ChatReply, submit: ToolCall | None,
                 usage: JudgeUsage, rationale_chars: int = 2000) -> Proposal | str:
    """The reply's final answer as a verified-ready proposal, or the reason to send back."""
    if submit is not None:
        usage.tool_calls += 1
        answer = read_answer(submit.arguments, reply.text)
    elif reply.tool_calls:  # only research calls, with none left
        return NO_RESEARCH_LEFT
    else:
        answer = read_answer(None, reply.text)
    if isinstance(answer, str):
        if isinstance(answer, Unreadable):
            usage.count_error("empty" if not reply.text.strip() and not reply.tool_calls else "unreadable")
        return answer
    segment = Segment(answer.traj_id, answer.start_turn, answer.end_turn)
    problem = validate_segment(request, segment)
    # the rationale is kept in groups.jsonl and shown by `prover view`: a runaway one is cut
    return Proposal(segment, cut_text(answer.rationale, rationale_chars)) if problem is None else \
        Refused(problem, segment)


class AgenticJudge(Judge):
    """The loop; subclasses say which ``ChatModel`` answers (``make_chat``)."""

    Config = LoopSettings
    config: LoopSettings  # the parsed settings of ``Config``

    def __init__(self, config: LoopSettings | None = None, chat: ChatModel | None = None) -> None:
        super().__init__(config)
        self._chat = chat
        self._lock = threading.Lock()

    def make_chat(self) -> ChatModel:
        raise NotImplementedError

    @property
    def chat(self) -> ChatModel:
        with self._lock:  # built once, on first use (a local model loads here, not at config time)
            if self._chat is None:
                self._chat = self.make_chat()
            return self._chat

    def _ask(self, request: JudgeRequest, messages: list[dict], may_research: bool) -> ChatReply:
        """One model reply: research tools while they last (agentic), else the answer alone, under the
        answer's schema when the chat model is structured."""
        cfg, chat = self.config, self.chat
        if may_research:
            return ask(chat, messages, TOOL_SCHEMAS)
        tools = None if cfg.mode == "answer-only" else [SUBMIT_SCHEMA]
        schema = answer_schema(request, cfg.max_rationale_chars, getattr(chat, "max_reply_tokens", None))
        return ask(chat, messages, tools, schema=schema)

    def propose(self, request: JudgeRequest) -> JudgeResult:
        cfg, usage, transcript = self.config, JudgeUsage(), []
        answer_only = cfg.mode == "answer-only"
        messages = [{"role": "system", "content": ANSWER_ONLY_PROMPT if answer_only else SYSTEM_PROMPT},
                    {"role": "user", "content": user_prompt(request, cfg.obs_chars, cfg.preview_chars, answer_only)}]
        research, repairs, refused = 0, 0, []
        while True:
            # a repair asks for the answer alone: research on a repair turn led small models away from it
            may_research = (not answer_only and research < cfg.max_tool_turns
                            and (repairs == 0 or cfg.repair_tools == "all"))
            try:
                reply = self._ask(request, messages, may_research)
            except ChatError as exc:
                usage.count_error(exc.kind)
                usage.calls, usage.failed_calls = usage.calls + 1, usage.failed_calls + 1  # sent, no reply
                usage.retries += exc.attempts - 1
                why = f"judge request failed ({exc.kind}): {exc}"
                return JudgeResult(None, usage, failure=why, error=exc.kind, transcript=transcript)
            count_reply(usage, reply)
            transcript.append(reply_record(reply, cfg.max_reply_chars))
            messages.append(assistant_message(reply))
            submit = answer_tool_calls(request, reply, may_research, messages, usage, cfg.max_tool_chars)
            if submit is None and reply.tool_calls and may_research:
                research += 1
                if research == cfg.max_tool_turns:
                    messages.append({"role": "user", "content": "No research turns left: call submit_segment now."})
                continue
            outcome = check_answer(request, reply, submit, usage, cfg.max_rationale_chars)
            if isinstance(outcome, Proposal):
                return JudgeResult(outcome, usage, transcript=transcript)
            if repairs >= cfg.max_repairs:
                why = f"no valid segment after {repairs} repair(s): {outcome}"
                return JudgeResult(None, usage, failure=cut_text(why, ECHO_CHARS * 2), transcript=transcript)
            repairs += 1
            usage.repairs += 1
            if isinstance(outcome, Refused):
                refused.append(outcome.segment)
            # the outcome may repeat a huge bad value
            feedback = cut_text(repair_message(request, outcome, refused, answer_only), cfg.max_tool_chars)
            messages.append(tool_message(submit.id, feedback) if submit is not None
                            else {"role": "user", "content": feedback})

    def propose_all(self, requests: list[JudgeRequest]) -> list[JudgeResult]:
        if len(requests) <= 1 or self.config.concurrency == 1:
            return [self.propose(r) for r in requests]
        self.chat  # noqa: B018  (build the model once, before the threads race to)
        pool = ThreadPoolExecutor(max_workers=min(self.config.concurrency, len(requests)))
        try:
            return list(pool.map(self.propose, requests))
        finally:  # a stop (SIGTERM, Ctrl-C) must not wait here for requests still in flight; they give up
            pool.shutdown(wait=False, cancel_futures=True)  # on their own (prover.system.httpio.within)

    def check_ready(self) -> None:
        self.chat.check_ready()

    def close(self) -> None:
        if self._chat is not None:
            self._chat.close()


class LiteLLMJudgeConfig(LoopSettings, LiteLLMSettings, JudgeSettings):
    model_config = ConfigDict(extra="forbid")


class LiteLLMJudge(AgenticJudge):
    """An LLM judge over an API (LiteLLM), with the search_trajectory and get_segment tools; it sees what the
    agent saw, never state_key or gold.

    ``judge.name=litellm``: e.g. ``judge.model=gpt-5.4-mini``, or ``judge.model=openai/qwen3.5-9b
    judge.api_base=http://127.0.0.1:30000/v1`` for a local SGLang/vLLM server."""

    Config = LiteLLMJudgeConfig
    config: LiteLLMJudgeConfig  # the parsed settings of ``Config``

    def __init__(self, config: LiteLLMJudgeConfig | None = None, chat: ChatModel | None = None) -> None:
        super().__init__(config, chat)
        if self._chat is None:  # fails now, at config time, when the API key's variable is unset
            self._chat = self.make_chat()

    def make_chat(self) -> ChatModel:
        return LiteLLMChat(self.config)


class LocalJudgeConfig(LoopSettings, LocalSettings, JudgeSettings):
    model_config = ConfigDict(extra="forbid")
    concurrency: int = Field(1, ge=1, description="Requests judged at the same time (one model serves "
                             "them one by one, so more only overlaps tool work).")


class LocalJudge(AgenticJudge):
    """An LLM judge run in this process (transformers), the same loop and tools as ``litellm``; it sees what
    the agent saw, never state_key or gold.

    ``judge.name=local judge.model_path=/path/to/Qwen3.5-9B``: the same loop, no server."""

    Config = LocalJudgeConfig
    config: LocalJudgeConfig  # the parsed settings of ``Config``

    def make_chat(self) -> ChatModel:
        return LocalChat(self.config)

    def check_ready(self) -> None:  # the folder, without loading the model (that waits for the first request)
        if not self.config.model_path:
            raise ConfigError("judge.model_path is not set: give the local Hugging Face checkpoint folder")
        check_model_dir(self.config.model_path)
        if self.config.structured:
            require_xgrammar()
