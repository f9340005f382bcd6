"""``ReplyCache``: chat replies by request key, in memory and optionally as files across runs."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import asdict
from pathlib import Path

from prover.chat.base import ChatReply, ToolCall


class ReplyCache:
    """Replies by request key: in memory, and as one JSON file per key under ``directory`` if given. A
    stored reply keeps its tokens and dollars, so that a hit can say what it cost when it was paid."""

    def __init__(self, directory: str | Path | None = None) -> None:
        self.directory = Path(directory) if directory else None
        self._memory: dict[str, ChatReply] = {}
        self._lock = threading.Lock()
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)

    @staticmethod
    def key(payload: dict) -> str:
        """sha256 of the request's canonical JSON (objects that are not JSON, e.g. exceptions, by repr)."""
        text = json.dumps(payload, sort_keys=True, default=repr, ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()

    def get(self, key: str) -> ChatReply | None:
        with self._lock:
            if key in self._memory:
                return self._memory[key]
        if self.directory is None or not (self.directory / f"{key}.json").is_file():
            return None
        try:
            raw = json.loads((self.directory / f"{key}.json").read_text())
            reply = ChatReply(**{**raw, "tool_calls": [ToolCall(**c) for c in raw.get("tool_calls", [])]})
        except (OSError, ValueError, TypeError):  # a torn or foreign file is a miss, not a crash
            return None
        with self._lock:
            self._memory[key] = reply
        return reply

    def put(self, key: str, reply: ChatReply) -> None:
        with self._lock:
            self._memory[key] = reply
        if self.directory is not None:
            tmp = self.directory / f".{key}.{threading.get_ident()}.tmp"
            tmp.write_text(json.dumps(asdict(reply)))
            os.replace(tmp, self.directory / f"{key}.json")  # atomic: readers never see half a file
