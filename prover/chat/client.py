"""``LiteLLMChat``: the chat interface on any LiteLLM model, or on ``openai/<name>`` plus ``api_base`` for a
local OpenAI-compatible server such as SGLang, vLLM or llama.cpp's; ``LiteLLMSettings`` says how to reach it.

API keys are read from the environment variable that ``api_key_env`` names, when the client is built;
the key itself never enters a config, a cache key, a cache file, a log line or a repr.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import socket
import time
import urllib.parse
import warnings
from types import ModuleType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from prover.chat.base import ChatError, ChatModel, ChatReply, ToolCall
from prover.chat.cache import ReplyCache
from prover.chat.parsing import THINK, parse_tool_calls
from prover.chat.render import cut_text
from prover.errors import ConfigError
from prover.system.httpio import within

log = logging.getLogger("prover.judges")  # the name it logged under before the chat layer had its own room
MOCK_KWARGS = {"mock_response", "mock_tool_calls"}  # LiteLLM answers these itself: no key, no server
PROBE_S = 10.0  # a server that does not accept a connection in this long is down or unreachable
RESERVED_KWARGS = {"api_key", "api_base", "base_url", "model", "messages", "tools", "timeout", "num_retries",
                   "max_retries"}


class LiteLLMSettings(BaseModel):
    """How to reach a LiteLLM model. Shared by the ``litellm`` judge and the CriticSearch critic."""

    model_config = ConfigDict(extra="forbid")
    model: str = Field("gpt-5.4-mini", description="LiteLLM model string: 'gpt-5.4-mini', 'anthropic/...', or "
                       "'openai/<served-name>' with api_base for a local SGLang/vLLM server (the ProVer paper used "
                       "gpt-5.4-mini).")
    api_base: str | None = Field(None, description="Base URL of an OpenAI-compatible server, e.g. "
                                 "http://127.0.0.1:30000/v1; None for the provider's own endpoint.")
    api_key_env: str | None = Field(None, description="Name of the environment variable holding the API key "
                                    "(the key itself never goes in a config); None lets LiteLLM read the "
                                    "provider's usual variable, e.g. OPENAI_API_KEY.")
    timeout_s: float = Field(60.0, gt=0.0, description="Seconds one request may take in all (connecting, "
                             "waiting, reading a reply however slowly it arrives) before it fails.")
    max_retries: int = Field(3, ge=0, description="Retries of a request answered 429 (rate limit) or 5xx.")
    backoff_s: float = Field(1.0, ge=0.0, description="First retry delay; it doubles each retry (with jitter).")
    max_backoff_s: float = Field(30.0, ge=0.0, description="Longest delay between two retries.")
    temperature: float = Field(0.0, ge=0.0, description="Sampling temperature (0: repeatable, cacheable).")
    max_tokens: int = Field(2048, ge=1, description="Most tokens per reply.")
    cache: bool = Field(True, description="Reuse the reply of an identical earlier request (in memory).")
    cache_dir: str | None = Field(None, description="Also keep replies as files in this folder, across runs.")
    structured: bool = Field(False, description="Send the caller's JSON schema, when it gives one, as "
                             "response_format (see structured_format), with no tools.")
    structured_format: Literal["auto", "json_schema", "json_object"] = Field(
        "auto", description="How structured output sends the schema: 'json_schema' (OpenAI, SGLang, vLLM), "
        "'json_object' with the schema beside it (llama.cpp's server), or 'auto': json_schema, and json_object "
        "from then on once the server refuses the json_schema type.")
    litellm_kwargs: dict[str, Any] = Field(default_factory=dict, description="Extra keyword arguments for "
                                           "litellm.completion, e.g. {reasoning_effort: low} or, in tests, "
                                           "{mock_response: ...}; never an API key.")

    @field_validator("litellm_kwargs")
    @classmethod
    def _no_reserved(cls, value: dict[str, Any]) -> dict[str, Any]:
        bad = sorted(RESERVED_KWARGS & set(value))
        if bad:
            raise ValueError(f"litellm_kwargs may not set {bad}: use the fields of the same name, and "
                             "api_key_env (an environment variable name) for the key")
        return value


# What a provider's error may echo of a key, e.g. OpenAI's "Incorrect API key provided: sk-pr****wxyz"
KEY_LIKE = re.compile(r"\b(?:sk|pk|rk)[-_][A-Za-z0-9_*.\-]{6,}|\bBearer\s+\S+", re.IGNORECASE)


# A refusal that states a validation error, e.g. pydantic's "1 validation error for ... Input should be
# 'text' or 'json_object' [type=literal_error, ...]", as llama.cpp's server answers json_schema with HTTP 500
VALIDATION_ERROR = re.compile(r"validation error|Input should be|\[type=\w+", re.IGNORECASE)
# A refusal of the json_schema type of response_format (llama.cpp's server reads json_object only)
REFUSES_JSON_SCHEMA = re.compile(r"(?:should be|must be|expected|one of|supported)[^.]{0,80}json_object"
                                 r"|json_schema[^.]{0,60}(?:not supported|unsupported|not accepted|not allowed)"
                                 r"|input_value='json_schema'", re.IGNORECASE)
ERROR_CHARS = 1000  # what a failure reason keeps of a provider's error text


def redact_keys(text: str) -> str:
    """``text`` with anything that looks like an API key, or a fragment of one, replaced by ***."""
    return KEY_LIKE.sub("***", text)


def _import_litellm() -> ModuleType:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of the remote price map
    # Its pydantic models warn about ReadOnly TypedDicts when first built (at import and first call).
    warnings.filterwarnings("ignore", message=r".*`ReadOnly` qualifier", category=UserWarning)
    import litellm  # an optional extra, and slow to import

    litellm.suppress_debug_info = True  # no "Give Feedback" banners on every failed request
    return litellm


def _status(exc: BaseException) -> int | None:
    code = getattr(exc, "status_code", None)
    return code if isinstance(code, int) else None


def error_kind(exc: BaseException) -> str:
    """The kind of a failed request (see ``ChatError``), from the exception's type and HTTP status."""
    status = _status(exc)
    if "Timeout" in type(exc).__name__:  # litellm.Timeout carries 408; it is no answer, not a refusal
        return "timeout"
    if status is not None and 400 <= status < 500:
        return f"http_{status}"
    # LiteLLM reports a refused connection as HTTP 500 "Connection error."
    if "connection" in type(exc).__name__.lower() or "connection error" in str(exc).lower():
        return "connection"
    return "http_5xx" if status is not None and status >= 500 else "other"


def transient(exc: BaseException, text: str) -> bool:
    """Whether a failed request may succeed when sent again: a 429 or a 5xx, unless its text states a
    validation error (the same request is refused the same way again, however often it is sent)."""
    status = _status(exc)
    if status is None or not (status == 429 or status >= 500):
        return False
    return VALIDATION_ERROR.search(text) is None and REFUSES_JSON_SCHEMA.search(text) is None


def response_format(schema: dict, kind: str) -> dict:
    """``schema`` as a response_format: the json_schema type, or json_object with the schema beside it
    (the form llama.cpp's server reads)."""
    if kind == "json_object":
        return {"type": "json_object", "schema": schema}
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}}


def _retry_after(exc: BaseException) -> float:
    """The server's Retry-After header in seconds, when it sent one."""
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    try:
        return float(headers.get("retry-after", 0.0))
    except (TypeError, ValueError):
        return 0.0


class LiteLLMChat(ChatModel):
    """``litellm.completion`` with a timeout, retries with exponential backoff on 429 and 5xx (not on one
    that states a validation error), a reply cache keyed by the request, and the cost from LiteLLM's price
    map (0 when the model is unpriced).

    For servers that render the model's own chat template (llama.cpp's): tool calls that come back as text
    in ``content`` are read from it when ``tool_calls`` is empty, a request offering a single tool names it
    in ``tool_choice``, and ``structured_format: auto`` resends a structured request that the server
    refuses as json_schema once as json_object, then keeps to that."""

    def __init__(self, settings: LiteLLMSettings) -> None:
        self.settings = settings
        self.name = settings.model
        self.structured = settings.structured
        self.max_reply_tokens = settings.max_tokens
        self._api_key: str | None = None
        if settings.api_key_env:
            self._api_key = os.environ.get(settings.api_key_env) or None
            if self._api_key is None:
                raise ConfigError(f"environment variable {settings.api_key_env!r} (api_key_env) is not set; "
                                  "export the model's API key in it")
        elif settings.api_base:
            self._api_key = "unused"  # the OpenAI client needs some key; local servers ignore it
        self.cache = ReplyCache(settings.cache_dir) if settings.cache else None
        self._litellm: Any = None
        # the structured format sent: auto starts with json_schema and keeps json_object once refused
        self._format = "json_object" if settings.structured_format == "json_object" else "json_schema"

    def __repr__(self) -> str:  # never the key
        return f"LiteLLMChat(model={self.settings.model!r}, api_base={self.settings.api_base!r})"

    def _redact(self, text: str) -> str:
        if self._api_key and len(self._api_key) >= 4:
            text = text.replace(self._api_key, "***")
        return redact_keys(text)

    def payload(self, messages: list[dict], tools: list[dict] | None = None, schema: dict | None = None) -> dict:
        """The request as sent (and as keyed in the cache), in the structured format now in use."""
        s = self.settings
        payload = {"model": s.model, "api_base": s.api_base, "messages": messages, "tools": tools or None,
                   "temperature": s.temperature, "max_tokens": s.max_tokens, **s.litellm_kwargs}
        if schema is not None and self.structured:  # the answer itself, as text: no tool call to make
            payload["tools"] = None
            payload["response_format"] = response_format(schema, self._format)
        elif tools and len(tools) == 1:
            # one tool is offered only when its call is the answer due: name it, so that a server that
            # honours tool_choice (llama.cpp's constrains the reply to its arguments) returns that call
            payload["tool_choice"] = {"type": "function", "function": {"name": tools[0]["function"]["name"]}}
        return payload

    def chat(self, messages: list[dict], tools: list[dict] | None = None, schema: dict | None = None) -> ChatReply:
        payload = self.payload(messages, tools, schema)
        try:
            return self._complete(payload, tools)
        except ChatError as err:
            if not self._falls_back(payload, err):
                raise
            # llama.cpp's server takes the schema only as json_object: say so once, then always send that
            self._format = "json_object"
            log.warning("judge model %s refused response_format json_schema; sending json_object from now on",
                        self.settings.model)
            reply = self._complete(self.payload(messages, tools, schema), tools)
            reply.attempts += err.attempts
            return reply

    def _falls_back(self, payload: dict, err: ChatError) -> bool:
        """Whether ``err`` is a refusal of the json_schema type that ``structured_format: auto`` answers by
        sending the json_object form instead."""
        sent = (payload.get("response_format") or {}).get("type")
        return (self.settings.structured_format == "auto" and sent == "json_schema"
                and REFUSES_JSON_SCHEMA.search(str(err)) is not None)

    def _complete(self, payload: dict, tools: list[dict] | None) -> ChatReply:
        """The reply to ``payload``: from the cache when an identical request was answered, else sent."""
        key = ReplyCache.key(payload)
        if self.cache is not None and (hit := self.cache.get(key)) is not None:
            # nothing is spent now, but what the reply first cost is kept, so reports can show the cost
            # of a run without the cache (a file from before dollars were stored reads as 0)
            return ChatReply(hit.text, list(hit.tool_calls), cached=True, attempts=0, cached_dollars=hit.dollars)
        if self._litellm is None:
            self._litellm = self._load()
        reply = self._send(payload, tools)
        if self.cache is not None:
            self.cache.put(key, ChatReply(reply.text, reply.tool_calls, reply.prompt_tokens,
                                          reply.completion_tokens, reply.dollars))
        return reply

    def _send(self, payload: dict, tools: list[dict] | None) -> ChatReply:
        """One request, retried with backoff while its failure is transient; a ChatError when it fails."""
        s = self.settings
        for attempt in range(s.max_retries + 1):
            try:
                # LiteLLM's timeout bounds each read, and a trickling server never trips it: bound the whole
                # request, and give up at once when the process is stopping (SIGTERM, Ctrl-C)
                resp = within(lambda: self._litellm.completion(
                    **payload, api_key=self._api_key, timeout=s.timeout_s, num_retries=0, max_retries=0,
                    drop_params=True), s.timeout_s, f"a request to {s.model}")
            except Exception as exc:  # noqa: BLE001 - every provider error becomes one line; retry the transient ones
                status, text = _status(exc), self._error_text(exc)
                what = f"{type(exc).__name__}" + (f" (HTTP {status})" if status else "") + f": {text}"
                if transient(exc, text) and attempt < s.max_retries:
                    delay = min(s.max_backoff_s, max(s.backoff_s * 2 ** attempt, _retry_after(exc)))
                    log.warning("judge model %s: %s; retry %d/%d in %.2fs", s.model, what, attempt + 1,
                                s.max_retries, delay)
                    time.sleep(delay * (1.0 + 0.1 * random.random()))
                    continue
                raise ChatError(f"model {s.model!r}: {what} (after {attempt + 1} attempt(s))",
                                error_kind(exc), attempt + 1) from None
            return self._read(resp, attempt + 1, tools)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _error_text(self, exc: BaseException) -> str:
        """The whole error text on one line, secrets redacted, cut to ERROR_CHARS: the cause of a server's
        refusal is often past its first line (a validation error's field and reason)."""
        return cut_text(self._redact(" ".join(str(exc).split())), ERROR_CHARS)

    def check_ready(self) -> None:
        """The key (see ``_load``) and, with ``api_base``, a server that answers there: without this a run
        whose server is down would train on, every request failing and its groups falling back to GRPO."""
        if self._litellm is None:
            self._litellm = self._load()
        if self.settings.api_base and not MOCK_KWARGS & set(self.settings.litellm_kwargs):
            self._probe(self.settings.api_base)

    def _probe(self, api_base: str) -> None:
        """A TCP connection to ``api_base``'s host and port within PROBE_S, name lookup included; nothing is sent,
        so a server that is busy, slow or strict about paths still passes. Refused, unreachable or unresolvable
        is a one-line error."""
        try:
            parts = urllib.parse.urlsplit(api_base)
            host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
            if not host:
                raise ValueError("no host in it")
            within(lambda: socket.create_connection((host, port), timeout=PROBE_S).close(),
                   min(PROBE_S, self.settings.timeout_s), f"a connection to {host}:{port}")
        except (OSError, ValueError) as exc:  # refused, timed out (TimeoutError), a malformed URL or port
            reason = cut_text(" ".join(str(exc or type(exc).__name__).split()), 200)
            raise ConfigError(f"model {self.settings.model!r}: no server answers at {api_base} ({reason}); start "
                              "it first (a local judge: `prover serve-judge`) or fix api_base") from None

    def _load(self) -> Any:
        """Import litellm; without api_key_env or api_base, check the provider's key variable is set
        (a missing key otherwise comes back as a retried HTTP 500 on every request)."""
        litellm = _import_litellm()
        s = self.settings
        mocked = MOCK_KWARGS & set(s.litellm_kwargs)
        if self._api_key is None and not mocked:
            missing = litellm.validate_environment(model=s.model).get("missing_keys") or []
            if missing:
                raise ConfigError(f"model {s.model!r} needs the environment variable(s) {missing}; export the "
                                  "key there, or name another variable with api_key_env")
        return litellm

    def _read(self, resp: Any, attempts: int, tools: list[dict] | None = None) -> ChatReply:
        try:
            msg = resp.choices[0].message
            calls = []
            for i, tc in enumerate(getattr(msg, "tool_calls", None) or []):
                args = tc.function.arguments
                calls.append(ToolCall(id=tc.id or f"call_{i}", name=tc.function.name or "",
                                      arguments=args if isinstance(args, str) else json.dumps(args)))
            text = msg.content if isinstance(msg.content, str) else ""
        except (AttributeError, IndexError, TypeError) as exc:
            raise ChatError(f"model {self.settings.model!r} sent a reply without a message: {exc}", "empty",
                            attempts) from exc
        if tools and not calls:
            # a server that leaves the output of the model's own chat template as it is (llama.cpp's, for some models)
            # returns the calls as text in content; read them as LocalChat does
            prose, calls = parse_tool_calls(THINK.sub("", text), tools)
            text = prose if calls else text
        usage = getattr(resp, "usage", None)
        return ChatReply(text, calls, prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                         completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
                         dollars=self._cost(resp), attempts=attempts)

    def _cost(self, resp: Any) -> float:
        """LiteLLM's price for the reply; 0 for unpriced models (it raises for those) and never a crash."""
        hidden = getattr(resp, "_hidden_params", None) or {}
        if isinstance(hidden.get("response_cost"), (int, float)):
            return float(hidden["response_cost"])
        try:
            return float(self._litellm.completion_cost(completion_response=resp) or 0.0)
        except Exception:  # noqa: BLE001 - ModelNotMappedError and friends: a local model costs nothing we can price
            return 0.0
