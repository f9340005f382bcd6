"""Reading a chat model's reply text: the JSON object it answers with, and the tool calls a model writes as
text when its chat template, not the server, formats them (its thinking, ``<think>...</think>``, set apart).

A tool call written as text takes one of three forms: ``<tool_call>{json}</tool_call>`` blocks (Qwen's and
Hermes' templates), a JSON object ``{"name": ..., "arguments": {...}}``, fenced or bare, and a python-style
call ``name(arg=value, ...)`` as the agentic prompt spells the answer. The python form is read with
``ast.parse`` and ``ast.literal_eval`` of each argument: nothing a model writes is ever evaluated.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prover.chat.base import ToolCall

TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", flags=re.DOTALL)
THINK = re.compile(r"<think>.*?(?:</think>|$)", flags=re.DOTALL)
EMPTY_FENCE = re.compile(r"```[\w-]*\s*```")  # what is left of a fenced call once the call is cut out
MAX_CALL_CHARS = 8000  # the longest python-style call read (a long rationale fits); bounds the parsing work
MAX_CALL_ENDS = 256  # the most closing parentheses tried as a call's end: each try parses the text up to it
ECHO_CHARS = 80  # what a refusal repeats of a bad argument


@dataclass
class PyCall:
    """A python-style call found in text: its name, its arguments by name, where it lies in the text, and
    why it was refused (empty when it was not: then every argument is a JSON-compatible literal)."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    span: tuple[int, int] = (0, 0)
    error: str = ""


def find_json_object(text: str, key: str = "traj_id") -> dict | None:
    """The first JSON object in ``text`` that has ``key`` (code fences and prose around it allowed)."""
    decoder = json.JSONDecoder()
    for m in re.finditer(r"\{", text):
        try:
            obj, _ = decoder.raw_decode(text, m.start())
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and key in obj:
            return obj
    return None


def find_call(text: str, names: Iterable[str], params: Mapping[str, Sequence[str]] | None = None) -> PyCall | None:
    """The first python-style call ``name(...)`` in ``text`` of one of ``names`` that can be read, else the
    first refused one (its ``error`` says why), else None.

    ``params`` gives a name's parameters in order, to name its positional arguments; a call with more
    positional arguments than that is refused, as is any argument that is not a literal (a name, a call,
    an attribute): the call is parsed, never run."""
    calls = find_calls(text, names, params)
    return next((c for c in calls if not c.error), calls[0] if calls else None)


def find_calls(text: str, names: Iterable[str], params: Mapping[str, Sequence[str]] | None = None) -> list[PyCall]:
    """Every python-style call of one of ``names`` in ``text``, in order, refused ones included."""
    names = sorted(set(names), key=len, reverse=True)  # the longest first: no name is cut to a shorter one
    if not names:
        return []
    start = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, names)) + r")\s*\(")
    calls: list[PyCall] = []
    for m in start.finditer(text):
        if calls and m.start() < calls[-1].span[1]:
            continue  # a name inside the arguments of the call just read
        call = _read_call(text, m.start(), m.end() - 1, m.group(1), (params or {}).get(m.group(1), ()))
        if call is not None:
            calls.append(call)
    return calls


def _read_call(text: str, start: int, paren: int, name: str, params: Sequence[str]) -> PyCall | None:
    """The call that starts at ``start``: the shortest text from there to a ``)`` that parses as one
    expression (parentheses inside strings are then skipped); None when no such end is found."""
    ends = (i for i in range(paren, min(len(text), start + MAX_CALL_CHARS)) if text[i] == ")")
    for _, close in zip(range(MAX_CALL_ENDS), ends, strict=False):
        try:
            node = ast.parse(text[start:close + 1], mode="eval").body
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return _call_arguments(name, node, params, (start, close + 1))
        return None  # e.g. name(...)[0]: an expression, not a call
    return None


def _call_arguments(name: str, node: ast.Call, params: Sequence[str], span: tuple[int, int]) -> PyCall:
    if len(node.args) > len(params):
        return PyCall(name, span=span, error=f"{name}(...) has {len(node.args)} positional argument(s); "
                      f"name each one, as in {name}(start_turn=2)")
    pairs = [*zip(params, node.args, strict=False), *((kw.arg, kw.value) for kw in node.keywords)]
    arguments: dict[str, Any] = {}
    for key, value in pairs:
        if key is None:
            return PyCall(name, span=span, error=f"{name}(...) unpacks **arguments; write each as name=value")
        if key in arguments:
            return PyCall(name, span=span, error=f"{name}(...) gives {key!r} twice")
        try:
            arguments[key] = ast.literal_eval(value)
            json.dumps(arguments[key])  # a set, bytes or complex number has no JSON form
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            shown = ast.unparse(value)
            shown = shown if len(shown) <= ECHO_CHARS else shown[:ECHO_CHARS] + "..."
            return PyCall(name, span=span, error=f"argument {key!r} of {name}(...) is not a literal ({shown}); "
                          "write numbers and quoted strings only")
    return PyCall(name, arguments, span)


def parse_tool_calls(text: str, tools: list[dict] | None = None) -> tuple[str, list[ToolCall]]:
    """Split reply text into its prose and the tool calls written in it.

    ``<tool_call>`` blocks are always read. With ``tools`` (the OpenAI tool schemas the request offered)
    and no such block, JSON objects ``{"name": <an offered tool>, "arguments": {...}}`` are read (fenced
    or bare), and with none of those either, python-style calls of an offered tool (``find_calls``; a
    refused one stays in the prose, where the answer reader says why). A ``<tool_call>`` block whose JSON
    does not parse still becomes a call (its raw text as the arguments), so the loop answers it with a
    tool error instead of silently ignoring what the model tried to do.
    """
    calls = _tagged_calls(text)
    if calls or not tools:
        return TOOL_CALL.sub("", text).strip(), calls
    params = {f["name"]: list(f.get("parameters", {}).get("properties", {}))
              for f in (t.get("function", t) for t in tools) if isinstance(f.get("name"), str)}
    spans, calls = _json_calls(text, set(params))
    if not calls:
        found = [c for c in find_calls(text, params, params) if not c.error]
        spans = [c.span for c in found]
        calls = [ToolCall(f"call_{k}", c.name, json.dumps(c.arguments)) for k, c in enumerate(found)]
    prose, pos = [], 0
    for a, b in spans:
        prose.append(text[pos:a])
        pos = b
    return EMPTY_FENCE.sub("", "".join(prose) + text[pos:]).strip(), calls


def _tagged_calls(text: str) -> list[ToolCall]:
    calls = []
    for k, m in enumerate(TOOL_CALL.finditer(text)):
        body = m.group(1).strip()
        try:
            obj = json.loads(body)
        except json.JSONDecodeError:
            name = re.search(r'"name"\s*:\s*"([^"]*)"', body)
            calls.append(ToolCall(f"call_{k}", name.group(1) if name else "", body))
            continue
        if not isinstance(obj, dict):
            calls.append(ToolCall(f"call_{k}", "", body))
            continue
        args = obj.get("arguments", obj.get("parameters", {}))
        calls.append(ToolCall(f"call_{k}", str(obj.get("name", "")),
                              args if isinstance(args, str) else json.dumps(args)))
    return calls


def _json_calls(text: str, names: set[str]) -> tuple[list[tuple[int, int]], list[ToolCall]]:
    """The JSON objects in ``text`` that name one of ``names`` and carry arguments, with their spans."""
    decoder = json.JSONDecoder()
    spans: list[tuple[int, int]] = []
    calls: list[ToolCall] = []
    for m in re.finditer(r"\{", text):
        if spans and m.start() < spans[-1][1]:
            continue  # inside the call just read
        try:
            obj, end = decoder.raw_decode(text, m.start())
        except json.JSONDecodeError:
            continue
        if not (isinstance(obj, dict) and isinstance(obj.get("name"), str) and obj["name"] in names):
            continue
        args = obj.get("arguments", obj.get("parameters"))
        if args is None:
            continue
        spans.append((m.start(), end))
        calls.append(ToolCall(f"call_{len(calls)}", obj["name"], args if isinstance(args, str) else json.dumps(args)))
    return spans, calls
