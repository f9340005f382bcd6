"""Files written whole or not at all, and JSON-lines files read back record by record: the two file habits
every room shares (the run folder, the trackers' ids, the bench's cells and tables, the evaluation cache,
the policy digests). A ground-floor room: it imports nothing of prover's, so any room may use it."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed over it: a reader, or a process killed
    mid-write, sees the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # two processes (benches, ranks) may write one file
    tmp.write_text(text)
    os.replace(tmp, path)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a JSON-lines file of a run folder; [] if there is none. A line torn by a kill
    mid-write is skipped (a resumed run rewrites that step)."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


CACHE_ENV = "PROVER_CACHE"  # root of prover's caches: converted models in models/, built kernels in kernels/


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "prover")


def sha256_of(path: Path) -> str:
    """A file's SHA-256, read in 1 MiB blocks (model weights and checkpoints are too large to read at once)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
