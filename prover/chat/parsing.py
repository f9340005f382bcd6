"""Reading a chat model's reply text: the JSON object it answers with, and the tool calls a local model
writes as ``<tool_call>{json}</tool_call>`` blocks (its thinking, ``<think>...</think>``, set apart)."""

from __future__ import annotations

import json
import re

from prover.chat.base import ToolCall

TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", flags=re.DOTALL)
THINK = re.compile(r"<think>.*?(?:</think>|$)", flags=re.DOTALL)


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


def parse_tool_calls(text: str) -> tuple[str, list[ToolCall]]:
    """Split generated text into its prose and its ``<tool_call>{json}</tool_call>`` blocks.

    A block whose JSON does not parse still becomes a call (its raw text as the arguments), so the
    loop answers it with a tool error instead of silently ignoring what the model tried to do.
    """
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
    return TOOL_CALL.sub("", text).strip(), calls
