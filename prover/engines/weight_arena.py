"""A decode step's weights in one buffer, in the order the step reads them, backed by huge pages where the
operating system grants them.

A one-row decode step on CPU reads every weight once, so it runs at the rate one core streams memory. With
4 KiB pages that stream crosses a page every 4 KiB and misses the TLB at each (an AMD Zen 4 core's second-level
TLB covers 12 MiB of 4 KiB pages; SmolLM2-135M's bfloat16 weights are 269 MB). Linux backs private anonymous
memory with 2 MiB pages when the process asks (``madvise(MADV_HUGEPAGE)``, honoured when
``/sys/kernel/mm/transparent_hugepage/enabled`` says ``madvise`` or ``always``). torch's allocator does not ask
(unless ``THP_MEM_ALLOC_ENABLE`` is set for the whole process), and most of a small model's matrices are under
2 MiB, the least one allocation needs for a huge page of its own; laid end to end in one region they all get
them. ``python -m benchmarks.perf.bandwidth`` reads a SmolLM2-shaped model's matrices both ways (docs/perf.md's
bandwidth tables; on an AMD Zen 4 core about 14% faster from the arena).

The weights are copied in once (``WeightArena.take``) and the model's parameters become views of the copies, so
a weight sync (``load_state_dict`` copies in place) writes into the region.
"""

from __future__ import annotations

import mmap
import sys
from collections.abc import Iterable
from pathlib import Path

import torch

ALIGN = 64  # bytes: each tensor starts on a cache line (and on any dtype's element size)
HUGE_PAGE = 2 << 20


def aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


def huge_page_buffer(nbytes: int) -> tuple[torch.Tensor, bool]:
    """A uint8 tensor of ``nbytes`` starting on a 2 MiB boundary, in private anonymous memory the kernel is asked
    to back with huge pages; and whether it was asked (Linux with ``MADV_HUGEPAGE``; elsewhere torch's memory)."""
    if sys.platform != "linux" or not hasattr(mmap, "MADV_HUGEPAGE") or nbytes == 0:
        return torch.empty(nbytes, dtype=torch.uint8), False
    # MAP_PRIVATE: Python's anonymous mmap is shared memory by default, which huge-page advice does not cover
    region = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    region.madvise(mmap.MADV_HUGEPAGE)
    whole = torch.frombuffer(region, dtype=torch.uint8)  # the tensor holds the region for as long as it lives
    start = (-whole.data_ptr()) % HUGE_PAGE
    return whole[start:start + nbytes], True


def huge_page_kib(tensor: torch.Tensor) -> int | None:
    """KiB of huge pages backing the mapping that holds ``tensor``'s first byte (``/proc/self/smaps``'s
    AnonHugePages); None where that file does not exist."""
    try:
        lines = Path("/proc/self/smaps").read_text().splitlines()
    except OSError:
        return None
    address, inside = tensor.data_ptr(), False
    for line in lines:
        head = line.split()[0] if line else ""
        if "-" in head and all(c in "0123456789abcdef-" for c in head):
            low, high = (int(part, 16) for part in head.split("-"))
            inside = low <= address < high
        elif inside and head == "AnonHugePages:":
            return int(line.split()[1])
    return None


class WeightArena:
    """Tensors copied one after another (each on a cache line) into one ``huge_page_buffer``."""

    def __init__(self, tensors: Iterable[torch.Tensor]) -> None:
        self.buffer, self.huge = huge_page_buffer(sum(aligned(t.nbytes) for t in tensors))
        self.used = 0

    def take(self, tensor: torch.Tensor) -> torch.Tensor:
        """A copy of ``tensor`` in the next free bytes of the buffer."""
        start, n = self.used, tensor.nbytes
        if start + n > self.buffer.numel():
            raise ValueError(f"the arena has {self.buffer.numel() - start} bytes left, not {n}")
        view = self.buffer[start:start + n].view(tensor.dtype).view(tensor.shape)
        view.copy_(tensor)
        self.used = aligned(start + n)
        return view
