"""The chat layer: one small interface for every LLM the framework asks (LLM judges, the CriticSearch
critic), its two implementations, and what callers need around a request.

``ChatModel.chat(messages, tools, schema) -> ChatReply``: OpenAI-shaped messages and tool schemas in; the
reply text, its tool calls and what it cost out. ``schema`` is the JSON schema the caller's answer has
(a judge's final answer, a critic's labels): a model whose ``structured`` is true decodes the reply as
one JSON object under it (and is then offered no tools); callers pass it only to such a model (``ask``)
and parse the text either way. A request that fails for good raises ``ChatError`` (one line, no secret
in it); callers count it and carry on.

- ``base.py``     the interface, ``ChatReply``, ``ChatError``, message and usage helpers
- ``client.py``   ``LiteLLMChat``: any LiteLLM model, or a local OpenAI-compatible server (SGLang, vLLM)
- ``local.py``    ``LocalChat``: a Hugging Face folder in this process, no server
- ``cache.py``    ``ReplyCache``: replies by request, in memory and optionally on disk
- ``parsing.py``  reading reply text: the JSON answer, tool calls written as text
- ``render.py``   text a model reads: a trajectory with turn numbers, text cut to a budget

Nothing here imports litellm, torch or transformers until a model is built, and nothing here knows a
judge or a credit method: both rooms stand on this one.
"""

from __future__ import annotations

from prover.chat.base import (
    ChatError,
    ChatModel,
    ChatReply,
    ToolCall,
    ask,
    assistant_message,
    count_reply,
    tool_message,
)
from prover.chat.cache import ReplyCache
from prover.chat.client import LiteLLMChat, LiteLLMSettings, error_kind, redact_keys
from prover.chat.local import LocalChat, LocalSettings, expand_path, require_xgrammar, template_messages
from prover.chat.parsing import PyCall, find_call, find_json_object, parse_tool_calls
from prover.chat.render import cut_text, render_trajectory

__all__ = ["ChatError", "ChatModel", "ChatReply", "LiteLLMChat", "LiteLLMSettings", "LocalChat", "LocalSettings",
           "PyCall", "ReplyCache", "ToolCall", "ask", "assistant_message", "count_reply", "cut_text", "error_kind",
           "expand_path", "find_call", "find_json_object", "parse_tool_calls", "redact_keys", "render_trajectory",
           "require_xgrammar", "template_messages", "tool_message"]
