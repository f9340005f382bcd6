"""The ``hf`` engine's small-batch kernels against torch's products, row count by row count: where the engine
should hand a decode step's products to ``prover.engines.decode_kernels`` and where to torch (``MAX_ROWS``).

    python -m benchmarks.perf.kernel_rows [--rows 1,2,4,8,16] [--rounds 3] [--out PATH] [--smoke]

The weights are SmolLM2-135M-Instruct's decode products, layer by layer (query, key, value and output
projections, gate, up and down: 7 matrices a layer, 30 layers, random numbers of the real shapes), so a pass
reads 0.42 GB in float32 and 0.21 GB in bfloat16, far more than a last-level cache holds, as a decode step
does. One pass runs every product for R rows of input; each side's time is the best of --rounds passes, CPU
seconds of this process (the machine is shared), one thread. The kernel's rate is GB of weights read a second,
and the ratio is torch's time over the kernel's.

Writes benchmarks/results/perf/kernel-rows.json (``--out`` elsewhere) with the CPU, its instruction-set flags,
the build's instruction set (``prover_gemv_isa``: 2 AVX512-BF16, 1 AVX-512, 0 AVX2) and the load average.
``--smoke`` runs one layer, one round, rows 1 and 2 (checks the code, not the machine).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from benchmarks.perf.bandwidth import cpu
from benchmarks.perf.results import RESULTS, best_seconds, stamp

OUT = RESULTS / "kernel-rows.json"
# (in, out) features of SmolLM2-135M's products in one layer: q, k, v, o, gate, up, down
LAYER = [(576, 576), (576, 192), (576, 192), (576, 576), (576, 1536), (576, 1536), (1536, 576)]
LAYERS = 30


def sweep(dtype: torch.dtype, rows: list[int], layers: int, rounds: int) -> dict:
    """For each row count: GB/s of weights read by the kernel and by torch, and torch's time over the kernel's."""
    from prover.engines import decode_kernels as kernels  # built on first use: a second of the C compiler

    g = torch.Generator().manual_seed(0)
    weights = [torch.randn(n, k, generator=g).to(dtype) for _ in range(layers) for k, n in LAYER]
    gb = sum(w.numel() * w.element_size() for w in weights) / 1e9
    out: dict[str, dict] = {}
    for r in rows:
        inputs = {k: torch.randn(r, k, generator=g).to(dtype) for k in {k for k, _ in LAYER}}
        pairs = [(inputs[w.shape[1]], w) for w in weights]
        ours = best_seconds(lambda pairs=pairs: [kernels.gemv(x, w) for x, w in pairs], rounds, time.process_time)
        theirs = best_seconds(lambda pairs=pairs: [torch.nn.functional.linear(x, w) for x, w in pairs], rounds,
                              time.process_time)
        out[str(r)] = {"kernel_gb_per_s": gb / ours, "torch_gb_per_s": gb / theirs,
                       "torch_over_kernel": theirs / ours}
    return {"weight_gb": gb, "rows": out}


def measure(rows: list[int], layers: int, rounds: int) -> dict:
    from prover.engines import decode_kernels as kernels

    lib, why = kernels.load()
    if lib is None:
        raise SystemExit(f"kernel_rows: no kernels on this machine ({why})")
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    load_start, t0 = os.getloadavg()[0], time.perf_counter()
    try:
        result = {"cpu": cpu(), "torch": torch.__version__, "gemv_isa": kernels.ISA_NAMES[lib.prover_gemv_isa()],
                  "settings": {"rows": rows, "layers": layers, "rounds": rounds},
                  "dtypes": {name: sweep(dtype, rows, layers, rounds)
                             for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16))}}
    finally:
        torch.set_num_threads(previous)
    result["load"] = {"start": load_start, "end": os.getloadavg()[0]}
    result["measured"] = stamp(time.perf_counter() - t0)
    return result


def summary(result: dict) -> list[str]:
    lines = [f"{result['cpu']['model']} ({result['gemv_isa']} build), load {result['load']['start']:.2f} -> "
             f"{result['load']['end']:.2f}"]
    for name, res in result["dtypes"].items():
        for r, v in res["rows"].items():
            lines.append(f"  {name:<9} rows {r:>2}: kernel {v['kernel_gb_per_s']:5.1f} GB/s, torch "
                         f"{v['torch_gb_per_s']:5.1f} GB/s, kernel {v['torch_over_kernel']:.2f}x torch's speed")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="1,2,4,8,16", help="comma-separated rows of input (default 1,2,4,8,16)")
    ap.add_argument("--rounds", type=int, default=3, help="timed passes per side and row count (best kept)")
    ap.add_argument("--out", type=Path, default=OUT, help=f"where the JSON goes (default {OUT})")
    ap.add_argument("--smoke", action="store_true", help="one layer, one round, rows 1 and 2")
    args = ap.parse_args(argv)
    try:
        rows = [int(x) for x in args.rows.split(",") if x.strip()]
    except ValueError:
        rows = []
    if not rows or min(rows) < 1 or args.rounds < 1:
        raise SystemExit(f"kernel_rows: --rows wants counts of at least 1, like 1,2,4, and --rounds at least 1 "
                         f"(got {args.rows!r}, {args.rounds})")
    result = measure([1, 2] if args.smoke else rows, 1 if args.smoke else LAYERS, 1 if args.smoke else args.rounds)
    result["smoke"] = args.smoke
    print("\n".join(summary(result)), flush=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
