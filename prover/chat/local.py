"""``LocalChat``: the chat interface on a local Hugging Face checkpoint folder, no server.

Generation goes through prover's ``hf`` engine (transformers). Tools reach the model through the chat
template's own tools support when it has one (Qwen's templates render them and expect answers as
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``); for a template without it (the tiny
test model's) the same instructions and tags are written into the messages as plain text. Tool calls
are parsed back out of the generated text in that format (``parsing.py``). Dollars are always 0.

Structured output (``structured: true``, needs ``xgrammar``: ``pip install -e '.[smollm2]'``): when the
caller passes a JSON schema to ``chat``, decoding runs under xgrammar's transformers logits processor,
so the reply is one JSON object under that schema (no tools are rendered then); a reply can only fail
to parse when ``max_new_tokens`` cuts it. Off by default: the agentic judge on a model with a tool
template (Qwen) answers through ``submit_segment`` and needs no grammar, and xgrammar is an extra.
"""

from __future__ import annotations

import importlib.util
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from prover.chat.base import ChatError, ChatModel, ChatReply
from prover.chat.parsing import THINK, parse_tool_calls
from prover.episodes.literal_text import ENV_SPANS, encode_chat
from prover.errors import ConfigError
from prover.learning.model_folder import check_model_dir
from prover.types import SamplingParams

if TYPE_CHECKING:
    from transformers import LogitsProcessor, PreTrainedTokenizerBase

END_MARKS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "</s>")
GRAMMAR_CACHE = 64  # compiled grammars kept per model: a judge's schema differs by request (turn bounds)


class LocalSettings(BaseModel):
    """How to run a local checkpoint. Shared by the ``local`` judge and the CriticSearch critic."""

    model_config = ConfigDict(extra="forbid")
    model_path: str = Field("", description="Local Hugging Face checkpoint folder of the model (e.g. a "
                            "Qwen3.5-9B download); required.")
    dtype: Literal["float32", "bfloat16", "float16"] = Field("bfloat16", description="Parameter dtype.")
    device: str | None = Field(None, description="Torch device; None picks cuda when there is one, else cpu.")
    max_new_tokens: int = Field(1024, ge=1, description="Most tokens per reply.")
    temperature: float = Field(0.0, ge=0.0, description="Sampling temperature (0: greedy).")
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict, description="Extra chat-template "
                                                 "arguments, e.g. {enable_thinking: false} for Qwen3.")
    structured: bool = Field(False, description="Decode every reply the caller gives a JSON schema for (a "
                             "judge's final answer, a critic's labels) under that schema with xgrammar, so it "
                             "always parses; needs the smollm2 extra (xgrammar).")

    @field_validator("model_path")
    @classmethod
    def _expand(cls, value: str) -> str:  # "~/.cache/..." and "$HOME/..." in a YAML file mean what a shell means
        return expand_path(value)


def expand_path(value: str) -> str:
    """A local path as a shell reads it: ``~`` and ``$HOME`` expanded (YAML files do not do it)."""
    return os.path.expandvars(os.path.expanduser(value)) if value else value


def tools_as_text(tools: list[dict]) -> str:
    """Tool instructions for a chat template that cannot render tools itself (the Qwen wording's gist)."""
    specs = "\n".join(json.dumps(t) for t in tools)
    return ("\n\n# Tools\nYou may call these functions:\n<tools>\n" + specs + "\n</tools>\n"
            'To call one, write <tool_call>{"name": <function-name>, "arguments": <json-object>}</tool_call>.')


def _args_obj(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except (json.JSONDecodeError, TypeError):
        return arguments


def template_messages(messages: list[dict], tools: list[dict] | None, native_tools: bool) -> list[dict]:
    """OpenAI-shaped messages -> what the chat template renders (arguments as objects for Qwen's); the text
    of user and tool messages (a trajectory, a tool's output) is marked env text (``ENV_SPANS``)."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("role") == "assistant" and m.get("tool_calls"):
            calls = [{"name": c["function"]["name"], "arguments": _args_obj(c["function"]["arguments"])}
                     for c in m["tool_calls"]]
            if native_tools:
                m["tool_calls"] = [{"type": "function", "function": c} for c in calls]
            else:
                m.pop("tool_calls")
                m["content"] = (m.get("content") or "") + "".join(
                    f"\n<tool_call>{json.dumps(c)}</tool_call>" for c in calls)
        elif m.get("role") == "tool" and not native_tools:
            head, answer = "<tool_response>\n", m.get("content") or ""
            m = {"role": "user", "content": f"{head}{answer}\n</tool_response>",
                 ENV_SPANS: [(len(head), len(head) + len(answer))]}
        m["content"] = m.get("content") or ""
        if m["role"] in ("user", "tool") and ENV_SPANS not in m:  # a trajectory, a tool's output: env text
            m[ENV_SPANS] = [(0, len(m["content"]))]
        out.append(m)
    if tools and not native_tools:
        if out and out[0]["role"] == "system":
            out[0] = {**out[0], "content": out[0]["content"] + tools_as_text(tools)}
        else:
            out.insert(0, {"role": "system", "content": tools_as_text(tools).strip()})
    return out


def encode_messages(tokenizer: PreTrainedTokenizerBase, messages: list[dict], tools: list[dict] | None,
                    native_tools: bool,
                    template_kwargs: dict) -> list[int]:
    """A request's prompt ids through the chat template, ready for the model's reply; the text of its user
    and tool messages stays literal (``prover/episodes/literal_text.py``): a trajectory or a tool's output cannot
    write a turn of its own."""
    kwargs = dict(template_kwargs)
    if tools and native_tools:
        kwargs["tools"] = tools
    return encode_chat(tokenizer, template_messages(messages, tools, native_tools), True, **kwargs)


def require_xgrammar() -> None:
    """A one-line ConfigError when structured output is asked for and xgrammar is not installed."""
    if importlib.util.find_spec("xgrammar") is None:
        raise ConfigError("structured=true needs xgrammar: pip install -e '.[smollm2]' (or pip install xgrammar)")


class LocalChat(ChatModel):
    """One model in this process; requests are served one at a time (a lock), greedy by default."""

    def __init__(self, settings: LocalSettings) -> None:
        from prover.engines.hf import HFEngine  # lazy: torch and transformers load when a local model is built

        if not settings.model_path:
            raise ConfigError("model_path is not set: give the local Hugging Face checkpoint folder of the model")
        check_model_dir(settings.model_path)
        if settings.structured:
            require_xgrammar()
        self.settings = settings
        self.structured = settings.structured
        self.max_reply_tokens = settings.max_new_tokens
        self.name = f"local:{settings.model_path}"
        self.engine = HFEngine(settings.model_path, dtype=settings.dtype, device=settings.device, batch_size=1)
        self.tokenizer = self.engine.tokenizer
        self.native_tools = "tools" in (self.tokenizer.chat_template or "")
        self.max_context = getattr(self.engine.model.config, "max_position_embeddings", None)
        self._lock = threading.Lock()
        self._calls = 0
        self._compiler: Any = None
        self._grammars: OrderedDict[str, Any] = OrderedDict()

    def __repr__(self) -> str:
        return f"LocalChat(model_path={self.settings.model_path!r})"

    def encode(self, messages: list[dict], tools: list[dict] | None) -> list[int]:
        return encode_messages(self.tokenizer, messages, tools, self.native_tools,
                               self.settings.chat_template_kwargs)

    def grammar(self, schema: dict) -> Callable[[], list[LogitsProcessor]]:
        """A factory of fresh xgrammar logits processors for ``schema`` (a processor serves one
        ``generate`` call), its compiled grammar cached by the schema's text."""
        # xgrammar is an optional extra: only structured output needs it
        import xgrammar as xgr
        import xgrammar.contrib.hf  # loads xgr.contrib.hf, the transformers logits processor

        key = json.dumps(schema, sort_keys=True)
        if key not in self._grammars:
            if self._compiler is None:
                # the model's vocab may be padded past the tokenizer's; the grammar's stop tokens are the
                # engine's, so a finished JSON object ends the reply exactly where generation stops
                info = xgr.TokenizerInfo.from_huggingface(self.tokenizer,
                                                          vocab_size=self.engine.model.config.vocab_size,
                                                          stop_token_ids=self.engine.stop_ids)
                self._compiler = xgr.GrammarCompiler(info)
            # no free whitespace between tokens: a weak model could otherwise pad the object forever; the
            # schema as given, not the sorted cache key: its property order is the order written
            self._grammars[key] = self._compiler.compile_json_schema(json.dumps(schema), any_whitespace=False)
            if len(self._grammars) > GRAMMAR_CACHE:
                self._grammars.popitem(last=False)
        compiled = self._grammars[key]
        return lambda: [xgr.contrib.hf.LogitsProcessor(compiled)]

    def chat(self, messages: list[dict], tools: list[dict] | None = None, schema: dict | None = None) -> ChatReply:
        s = self.settings
        constrained = schema is not None and self.structured
        if constrained:
            tools = None  # the reply is the JSON object itself, not a tool call
        try:
            prompt = self.encode(messages, tools)
        except Exception as exc:  # a template that rejects these messages is this model's failure
            raise ChatError(f"{self.name}: the chat template could not render the request: {exc}") from exc
        if self.max_context and len(prompt) + s.max_new_tokens > self.max_context:
            raise ChatError(f"{self.name}: prompt of {len(prompt)} tokens plus max_new_tokens={s.max_new_tokens} "
                            f"exceeds the model's context of {self.max_context}")
        params = SamplingParams(max_new_tokens=s.max_new_tokens, temperature=s.temperature)
        with self._lock:
            self._calls += 1
            try:
                processors = self.grammar(schema) if constrained else None
                gen = self.engine.generate([prompt], params, seed=self._calls, logits_processor=processors)[0]
            except RuntimeError as exc:  # out of memory and the like (xgrammar's errors too): this request failed
                raise ChatError(f"{self.name}: generation failed: {str(exc).splitlines()[0][:200]}") from exc
        text = self.tokenizer.decode(gen.token_ids, skip_special_tokens=False)
        for mark in END_MARKS:
            text = text.replace(mark, "")
        if constrained:  # the grammar's text is the answer as is; "<tool_call>" inside a string is prose
            return ChatReply(text.strip(), [], prompt_tokens=len(prompt), completion_tokens=len(gen.token_ids))
        text, calls = parse_tool_calls(THINK.sub("", text), tools)
        return ChatReply(text, calls, prompt_tokens=len(prompt), completion_tokens=len(gen.token_ids))

    def close(self) -> None:
        self.engine = None  # type: ignore[assignment]
