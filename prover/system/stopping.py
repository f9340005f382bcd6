"""What an ending command (SIGTERM, Ctrl-C, an OS error such as a full disk) needs to know and reach, in a
module that imports nothing heavy, because the CLI reads it while the process unwinds: the flag that tells calls
waiting on a server to give up (``prover.system.httpio.within``), and the run folders this process has written (so
that the line it prints says the last checkpoint is intact only when there is a run folder to resume)."""

from __future__ import annotations

import errno
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


def os_error_line(exc: OSError) -> str:
    """The one line an OS error ends a command with: the OS's reason and the path. A full disk's write often
    names no file (a write to an open file): then the run folder being written is named, and once a run
    folder exists, how to go on."""
    where = f": {exc.filename!r}" if exc.filename else (f" (writing in {str(STARTED[-1])!r})" if STARTED else "")
    line = f"prover: error: {exc.strerror or exc}{where}"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT) and STARTED:
        line += "; free some space, then continue with --resume (the last checkpoint is intact)"
    return line
