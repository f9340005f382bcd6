"""This machine's memory bandwidth, the ceiling of batch-1 decoding: STREAM's four kernels and a matrix-vector
product over weights much larger than the last-level cache, at 1 thread and at every core.

    python -m benchmarks.perf.bandwidth [--rounds 10] [--array-mib N] [--threads 1,2] [--out PATH] [--smoke]

Writes benchmarks/results/perf/bandwidth.json (``--out`` elsewhere). Everything runs in torch, in this process,
with ``torch.set_num_threads`` choosing the thread count (torch's element-wise kernels and ``linear`` split
their work over that many threads), because torch is what the engine decodes with:

- stream:  STREAM's copy (c = a), scale (b = q c), add (c = a + b) and triad (a = b + q c) over three float64
           arrays of --array-mib MiB each (default: 4 times the last-level cache, STREAM's rule, so no array
           stays cached). Bytes are counted the STREAM way: 2 words an element for copy and scale, 3 for add
           and triad (the write-allocate read of the destination is not counted, so where the CPU reads a line
           before writing it, the traffic is larger than counted). Then read, not a STREAM kernel: the sum of
           one array, 1 word an element and no writes, the pattern of weights streamed through a product.
           Best of --rounds rounds (the machine is shared: the best round is the least disturbed); the
           arrays' final values are checked against STREAM's recurrence, so a kernel that skipped work fails.
- weights: ``torch.nn.functional.linear`` of one row (batch 1, as decoding one sequence) through a weight
           matrix of the same size in bytes, fp32 and bf16: GB/s of weight bytes read (the input and output
           vectors are a few KB and not counted); and the same product by the ``hf`` engine's small-batch
           kernel (``prover.engines.decode_kernels``, one thread), where it is built.
- model:   the engine's kernel over a decode step's matrices, one after another, in SmolLM2-135M-Instruct's
           shapes (30 layers of stacked query-key-value, output, stacked gate-up and down, then the LM head;
           random values, fp32 and bf16): each matrix in memory of its own from torch's allocator, and all of
           them in one ``prover.engines.weight_arena`` buffer in that order, on huge pages where Linux grants
           them. Rounds alternate between the two.

Each figure is reported for every count in --threads (default 1, 2 and all cores). The CPU's model, the
instruction-set flags that decide the speed of these kernels (avx2, avx512f, avx512_bf16, amx_bf16), torch's
CPU capability and the load average before and after are saved beside the numbers. --smoke runs every kernel
once on arrays of 1 MiB (figures meaningless, cache-resident) so that CI exercises the code in seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.perf.results import RESULTS, best_seconds, stamp
from prover.system.environment import cpuinfo_fields

OUT = RESULTS / "bandwidth.json"  # named in results.OTHER_PERF
SPEED_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16", "amx_int8")
WORD = 8  # float64, STREAM's word
SCALAR = 3.0  # STREAM's q
# STREAM's words moved per element: read a, write c for copy; read b and c, write a for triad; and read alone
WORDS = {"copy": 2, "scale": 2, "add": 3, "triad": 3, "read": 1}
MATVEC_COLUMNS = 4096  # the weight matrix's input width: a mid-sized model's hidden size
MIB = 1 << 20


def cpu() -> dict:
    """The CPU as /proc/cpuinfo names it, the flags of SPEED_FLAGS it has, its last-level cache and core count."""
    try:
        info = dict(cpuinfo_fields(Path("/proc/cpuinfo").read_text(errors="replace")))
    except OSError:  # not Linux: the model is platform's guess and no flags are known
        info = {}
    flags = set(info.get("flags", "").split())
    # family/model/stepping name the part where a virtual machine's model name is generic ("Xeon Processor")
    return {"model": info.get("model name", platform.processor() or "?"), "machine": platform.machine(),
            "family_model_stepping": "/".join(info.get(k, "?") for k in ("cpu family", "model", "stepping")),
            "flags": {f: f in flags for f in SPEED_FLAGS}, "last_level_cache_bytes": last_level_cache(),
            "cpus": os.cpu_count(), "torch_cpu_capability": torch.backends.cpu.get_cpu_capability()}


def last_level_cache() -> int:
    """The largest cache of CPU 0 in bytes, from sysfs (0 where it cannot be read)."""
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        sizes.append(int(text.rstrip("KMG")) * scale)
    return max(sizes, default=0)


def default_array_mib() -> int:
    """STREAM's rule: each array at least 4 times the last-level cache (256 MiB where the cache is unknown)."""
    llc = last_level_cache()
    return max(256, -(-4 * llc // MIB))


def available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (None where it cannot be read)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_room(array_mib: int, out: Path) -> None:
    """A one-line exit, before anything is allocated or measured, where the three arrays would not fit in
    the memory available or the result could not be written."""
    need, free = 3 * array_mib * MIB, available_bytes()
    if free is not None and need > 0.8 * free:
        raise SystemExit(f"bandwidth: three arrays of {array_mib} MiB need {need / 2**30:.1f} GiB, more than 80% of "
                         f"the {free / 2**30:.1f} GiB available; pass a smaller --array-mib")
    if out.is_dir():
        raise SystemExit(f"bandwidth: --out {out} is a folder; name a file")
    blocking = next((p for p in out.parents if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise SystemExit(f"bandwidth: --out {out} is under {blocking}, a file")
    try:  # a file made and removed again: proof that the result can be written after minutes of measuring
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out.parent):
            pass
    except OSError as e:
        raise SystemExit(f"bandwidth: cannot write --out {out} ({e.strerror})") from None


def stream_kernels(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> dict:
    """STREAM's four kernels on the arrays, in STREAM's order, each writing in place; then ``read``, the sum of
    a, which reads and writes nothing back (a weight matrix is only read)."""
    return {"copy": lambda: c.copy_(a),
            "scale": lambda: torch.mul(c, SCALAR, out=b),
            "add": lambda: torch.add(a, b, out=c),
            "triad": lambda: torch.add(b, c, alpha=SCALAR, out=a),
            "read": lambda: a.sum()}


def expected_values(calls: int) -> tuple[float, float, float]:
    """a, b and c after ``calls`` runs of copy, scale, add, triad in turn from STREAM's a=1, b=2, c=0."""
    a, b, c = 1.0, 2.0, 0.0
    for _ in range(calls):
        c = a
        b = SCALAR * c
        c = a + b
        a = b + SCALAR * c
    return a, b, c


def stream(elements: int, threads: list[int], rounds: int) -> dict:
    """GB/s of each STREAM kernel at each thread count (best of ``rounds``), and whether the arrays end with the
    values STREAM's recurrence gives."""
    a = torch.full((elements,), 1.0, dtype=torch.float64)
    b = torch.full((elements,), 2.0, dtype=torch.float64)
    c = torch.zeros(elements, dtype=torch.float64)
    kernels = stream_kernels(a, b, c)
    gbs: dict[str, dict[str, float]] = {name: {} for name in kernels}
    for n in threads:
        torch.set_num_threads(n)
        # each kernel's rounds before the next kernel's: a kernel never writes its own inputs, so its repeats
        # leave the arrays as one call does, and each thread count is one step of STREAM's recurrence
        for name, kernel in kernels.items():
            gbs[name][str(n)] = WORDS[name] * WORD * elements / best_seconds(kernel, rounds) / 1e9
    want = expected_values(len(threads))
    every = max(1, elements // 4096)  # a sample of the elements: checking all would be another pass per array
    got = [(float(x[::every].min()), float(x[::every].max())) for x in (a, b, c)]
    # exact while the values stay below 2**53 (15**13); beyond, a fused multiply-add may round differently
    valid = all(abs(lo - w) <= 1e-12 * w and abs(hi - w) <= 1e-12 * w for (lo, hi), w in zip(got, want))
    return {"elements": elements, "array_bytes": elements * WORD, "word_bytes": WORD,
            "bytes": {name: WORDS[name] * WORD * elements for name in kernels}, "gb_per_s": gbs, "valid": valid}


def weights(nbytes: int, threads: list[int], rounds: int) -> dict:
    """GB/s of weight bytes that a batch-1 ``linear`` reads, fp32 and bf16, each over ``nbytes`` of weights."""
    out = {}
    for dtype, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        size = torch.finfo(dtype).bits // 8
        rows = max(1, nbytes // (MATVEC_COLUMNS * size))
        w = torch.empty(rows, MATVEC_COLUMNS, dtype=dtype).uniform_(-0.02, 0.02)
        x = torch.randn(1, MATVEC_COLUMNS).to(dtype)
        speeds = {}
        for n in threads:
            torch.set_num_threads(n)
            with torch.inference_mode():
                speeds[str(n)] = w.numel() * size / best_seconds(lambda w=w, x=x: F.linear(x, w), rounds) / 1e9
        out[name] = {"shape": [rows, MATVEC_COLUMNS], "weight_bytes": w.numel() * size, "gb_per_s": speeds,
                     "engine_kernel_gb_per_s": kernel_speed(w, x, rounds)}
        del w
    return out


def kernel_speed(w: torch.Tensor, x: torch.Tensor, rounds: int) -> float | None:
    """GB/s of the same product by the ``hf`` engine's small-batch kernel (``prover.engines.decode_kernels``, one thread
    whatever torch's count), or None where it is not built."""
    from prover.engines import decode_kernels as kernels  # built on first use: a second of the C compiler

    if kernels.load()[0] is None:
        return None
    return w.numel() * w.element_size() / best_seconds(lambda: kernels.linear(x, w, None), rounds) / 1e9


def sweep(product, ws: list[torch.Tensor], inputs: dict[int, torch.Tensor]) -> None:
    for w in ws:
        product(inputs[w.shape[1]], w)


# SmolLM2-135M-Instruct's config: hidden 576, 9 query and 3 key-value heads of 64, MLP 1536, 30 layers, 49152 tokens
SMOLLM2_LAYER = ((960, 576), (576, 576), (3072, 576), (576, 1536))
SMOLLM2_HEAD, SMOLLM2_LAYERS = (49152, 576), 30


def model_matrices(rounds: int, smoke: bool = False) -> dict | None:
    """GB/s of the engine's kernel reading a step's matrices in sequence (``SMOLLM2_*``), from torch's memory and
    from a weight arena, best of ``rounds`` alternating rounds; None where the kernels are not built."""
    from prover.engines import decode_kernels as kernels
    from prover.engines.weight_arena import WeightArena, huge_page_kib

    if kernels.load()[0] is None:
        return None
    layers, head = (2, (512, 576)) if smoke else (SMOLLM2_LAYERS, SMOLLM2_HEAD)
    shapes = [*SMOLLM2_LAYER * layers, head]
    out = {}
    for dtype, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        own = [torch.empty(shape).uniform_(-0.02, 0.02).to(dtype) for shape in shapes]
        arena = WeightArena(own)
        placed = [arena.take(w) for w in own]
        inputs = {k: torch.randn(1, k).to(dtype) for k in {shape[1] for shape in shapes}}
        nbytes = sum(w.numel() * w.element_size() for w in own)

        best = {"torch": float("inf"), "arena": float("inf")}
        for _ in range(rounds):
            for side, ws in (("torch", own), ("arena", placed)):
                best[side] = min(best[side], best_seconds(lambda ws=ws, xs=inputs: sweep(kernels.gemv, ws, xs), 1))
        out[name] = {"weight_bytes": nbytes, "gb_per_s": {side: nbytes / t / 1e9 for side, t in best.items()},
                     "arena_huge_page_kib": huge_page_kib(arena.buffer) if arena.huge else 0}
        del own, placed, arena
    return out


def thread_counts(text: str | None) -> list[int]:
    """--threads as a list: the given counts, else 1, 2 and every core (those this machine has)."""
    cpus = os.cpu_count() or 1
    if text is None:
        return sorted({n for n in (1, 2, cpus) if n <= cpus})
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise SystemExit(f"bandwidth: --threads wants counts of at least 1, like 1,2 (got {text!r})")
    return counts


def measure(array_mib: int, threads: list[int], rounds: int, smoke: bool = False) -> dict:
    """The whole result: CPU, settings, STREAM and weight-streaming figures, and the load around them."""
    previous = torch.get_num_threads()
    load = {"start": list(os.getloadavg())}
    t0 = time.perf_counter()
    try:
        elements = array_mib * MIB // WORD
        result = {"cpu": cpu(), "torch": torch.__version__, "library": "torch",
                  "settings": {"array_mib": array_mib, "threads": threads, "rounds": rounds},
                  "stream": stream(elements, threads, rounds), "weights": weights(array_mib * MIB, threads, rounds),
                  "model": model_matrices(rounds, smoke)}
    finally:
        torch.set_num_threads(previous)
    load["end"] = list(os.getloadavg())
    result["load"] = load
    result["measured"] = stamp(time.perf_counter() - t0)
    return result


def summary(result: dict) -> list[str]:
    """One line per kernel: GB/s at each thread count."""
    lines = [f"{result['cpu']['model']} ({result['cpu']['torch_cpu_capability']}), arrays "
             f"{result['settings']['array_mib']} MiB, best of {result['settings']['rounds']}, load "
             f"{result['load']['start'][0]:.2f} -> {result['load']['end'][0]:.2f}"]
    rows = [(f"stream {k}", v) for k, v in result["stream"]["gb_per_s"].items()]
    rows += [(f"linear batch 1 {k}", v["gb_per_s"]) for k, v in result["weights"].items()]
    rows += [(f"engine kernel {k}", {"1": v["engine_kernel_gb_per_s"]}) for k, v in result["weights"].items()
             if v.get("engine_kernel_gb_per_s")]
    rows += [(f"model {k}, {side}", {"1": gb}) for k, v in (result.get("model") or {}).items()
             for side, gb in v["gb_per_s"].items()]
    for label, speeds in rows:
        lines.append(f"  {label:<22}" + "  ".join(f"{n} thread(s) {gb:6.1f} GB/s" for n, gb in speeds.items()))
    if not result["stream"]["valid"]:
        lines.append("  STREAM check FAILED: the arrays do not hold the recurrence's values")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10, help="timed rounds per kernel and thread count (best kept)")
    ap.add_argument("--array-mib", type=int, help="MiB per STREAM array and per weight matrix "
                    "(default: 4 times the last-level cache, at least 256)")
    ap.add_argument("--threads", help="comma-separated torch thread counts (default: 1, 2 and all cores)")
    ap.add_argument("--out", type=Path, default=OUT, help=f"where the JSON goes (default {OUT})")
    ap.add_argument("--smoke", action="store_true", help="1 MiB arrays, 1 round: checks the code, not the machine")
    args = ap.parse_args(argv)
    threads = thread_counts(args.threads)
    if (args.array_mib is not None and args.array_mib < 1) or args.rounds < 1:
        raise SystemExit(f"bandwidth: --array-mib and --rounds must be at least 1 "
                         f"(got {args.array_mib}, {args.rounds})")
    array_mib = 1 if args.smoke else (args.array_mib or default_array_mib())
    rounds = 1 if args.smoke else args.rounds
    check_room(array_mib, args.out)
    result = measure(array_mib, threads, rounds, args.smoke)
    result["smoke"] = args.smoke
    print("\n".join(summary(result)), flush=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")
    return 0 if result["stream"]["valid"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
