"""The chat interface every LLM caller shares: ``ChatModel``, its reply, its one error, and the message
and usage helpers around a request (see the package docstring, ``prover/chat/__init__.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prover.errors import ProverError

if TYPE_CHECKING:
    from prover.types import JudgeUsage


class ChatError(ProverError):
    """A chat request failed for good: timeout, refused, server error after retries, unreadable reply.

    ``kind`` names the failure for metrics (``judge/errors/<kind>``): "timeout", "connection",
    "http_<status>" for a 4xx, "http_5xx", "empty" (a reply without a message) or "other";
    ``attempts`` counts the requests sent, retries included."""

    def __init__(self, message: str, kind: str = "other", attempts: int = 1) -> None:
        super().__init__(message)
        self.kind, self.attempts = kind, attempts


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # the JSON text the model wrote, unparsed (it may be malformed)


@dataclass
class ChatReply:
    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    dollars: float = 0.0  # 0 for free or unpriced (local) models, and for a reply served from the cache
    cached: bool = False  # served from the response cache: nothing was spent
    cached_dollars: float = 0.0  # a cached reply's dollars when it was first paid (0 when not cached)
    attempts: int = 1  # requests sent for this reply, retries included


def assistant_message(reply: ChatReply) -> dict:
    """The reply as an OpenAI assistant message, to append to the conversation."""
    msg: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.tool_calls:
        msg["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                             for c in reply.tool_calls]
    return msg


def tool_message(call_id: str, content: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def ask(chat: ChatModel, messages: list[dict], tools: list[dict] | None = None,
        schema: dict | None = None) -> ChatReply:
    """``chat.chat``, handing ``schema`` only to a structured model: a ChatModel written before schemas
    existed (a plugin's, a test's) takes no such argument and is asked as before."""
    if schema is not None and getattr(chat, "structured", False):
        return chat.chat(messages, tools, schema=schema)
    return chat.chat(messages, tools) if tools else chat.chat(messages)


def count_reply(usage: JudgeUsage, reply: ChatReply) -> None:
    """Add what one reply cost to ``usage``: a cached reply costs nothing now and counts apart, with what
    it cost when first paid (``cached_dollars``), so that ``calls`` and ``dollars`` are what was paid."""
    usage.calls += 0 if reply.cached else 1
    usage.retries += max(0, reply.attempts - 1)  # a cached reply has 0 attempts
    usage.cached_calls += int(reply.cached)
    usage.cached_dollars += reply.cached_dollars
    usage.prompt_tokens += reply.prompt_tokens
    usage.completion_tokens += reply.completion_tokens
    usage.dollars += reply.dollars


class ChatModel:
    """Base class: ``chat`` answers one request; ``close`` releases what the model holds."""

    name: str = "chat"
    structured: bool = False  # honours ``schema``: the reply is one JSON object under it
    max_reply_tokens: int | None = None  # the most tokens of one reply, when known (a schema can fit in it)

    def chat(self, messages: list[dict], tools: list[dict] | None = None, schema: dict | None = None) -> ChatReply:
        raise NotImplementedError

    def check_ready(self) -> None:
        """Raise a one-line ProverError if the model cannot answer (no key); nothing to check by default."""

    def close(self) -> None:
        """Nothing to release by default."""
