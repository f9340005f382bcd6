"""What a stop (SIGTERM, Ctrl-C) needs to know and reach, kept in a module that imports nothing heavy, because
the CLI reads it while the process unwinds: the flag that tells calls waiting on a server to give up
(``prover.httpio.within``), and the run folders this process has written (so the line it prints says the
last checkpoint is intact only when there is a run folder to resume)."""

from __future__ import annotations

import threading
from pathlib import Path

STOPPING = threading.Event()  # set once the process is stopping
STARTED: list[Path] = []  # run folders this process has begun to write (RunDir.start)


def reset() -> None:
    """A new command in this process (tests call ``prover.cli.main`` many times): not stopping, no folder yet."""
    STOPPING.clear()
    STARTED.clear()


def stop_waiting() -> None:
    """The process is stopping: calls waiting in ``within`` give up now, so worker threads end and the
    interpreter can exit."""
    STOPPING.set()


def stopped_line(how: str) -> str:
    """The one line a stop prints; ``how``: 'stopped by SIGTERM' or 'interrupted'."""
    if not STARTED:
        return f"prover: {how} before any run folder was written; nothing to resume"
    return f"prover: {how}; the last checkpoint is intact (resume with --resume)"
