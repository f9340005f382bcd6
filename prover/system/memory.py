"""How much of the host's memory is free to take: the figure an engine sizes its prefix cache by when its
setting says ``auto``. A ground-floor room: it imports nothing of prover's.

Linux says it in ``/proc/meminfo`` (``MemAvailable``: free pages plus the page cache that can be dropped,
the kernel's own estimate of what a new allocation can have without swapping); elsewhere the free pages
from ``sysconf``, which leave the page cache out and so understate it; None where neither answers.
"""

from __future__ import annotations

import os
from pathlib import Path

MEMINFO = Path("/proc/meminfo")


def available_bytes(meminfo: Path = MEMINFO) -> int | None:
    """Bytes of host memory a new allocation can have now, or None where the system does not say."""
    try:
        for line in meminfo.read_text().splitlines():
            name, _, value = line.partition(":")
            if name == "MemAvailable":
                number, _, unit = value.strip().partition(" ")
                return int(number) * (1024 if unit.strip().lower() == "kb" else 1)
    except (OSError, ValueError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
