"""torch's CPU threads for a run: the config's ``threads``, or a default by the policy's width.

torch is imported inside ``apply_threads``: the rest reads numbers, and a room that only decides (a test, the
config check) does not load torch by importing this.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# Set by the user, these already fixed torch's threads when it loaded: a run leaves them as they are.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
# Up to this hidden size a model's matrices are too small to split between threads (the tiny policy: 128;
# a 0.5B Qwen: 896): docs/perf.md, "The limit", measures matrix products of both sizes at 1 and 2 threads.
SMALL_WIDTH = 256


def default_threads(threads: int | None, width: int | None, environ: Mapping[str, str] | None = None) -> int | None:
    """The torch CPU threads a run asks for (the config's ``threads``), or None to leave torch's as they are.

    As set; else None when the environment names them (``THREAD_VARIABLES``); else 1 for a model of hidden
    size ``width`` up to ``SMALL_WIDTH``, whose threads would spend their time waiting on each other (and on
    a shared CPU, each for a core); else None: torch's default, one per core, suits large matrices.
    """
    if threads is not None:
        return threads
    environ = os.environ if environ is None else environ
    if any(environ.get(name, "").strip() for name in THREAD_VARIABLES):
        return None
    return 1 if width is not None and width <= SMALL_WIDTH else None


def apply_threads(threads: int | None, width: int | None) -> int:
    """Set torch's CPU threads as ``default_threads`` says for a policy of hidden size ``width``, at the start
    of a warm start, a training run or an evaluation; returns the threads torch uses now."""
    import torch  # lazy: torch loads when a run starts, not when its settings are read

    wanted = default_threads(threads, width)
    if wanted is not None and torch.get_num_threads() != wanted:
        torch.set_num_threads(wanted)
    return torch.get_num_threads()
