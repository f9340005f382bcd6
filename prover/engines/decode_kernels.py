"""The ``hf`` engine's CPU kernels for decode steps (``decode_kernels.c``, compiled on first use).

At one to a few rows, a linear layer's product is bound by reading its weight from memory, and the GEMMs
torch calls at that shape read weights at about half the bandwidth (bfloat16 at less). ``linear`` streams
each weight once per call, prefetching the next rows, and accumulates in float32. ``add_rmsnorm``,
``rope_store`` and ``attend`` are the rest of a one-token step of a Llama-family layer
(``prover.engines.fused_step``), each one C call where torch dispatches several operations from Python;
``layers_step`` makes all of them, for every layer, in one call.

The C file is compiled here, for this CPU (``cc -O3 -march=native -ffp-contract=off``), into the ``kernels``
folder of prover's cache (``$PROVER_CACHE``, ``~/.cache/prover`` by default) under a name that holds the
source's digest, the flags and the CPU's flags, so a changed source or another CPU builds its own. No C
compiler, a CPU without AVX-512 or AVX2 with FMA, or an unwritable cache folder: no build, ``load`` says why,
and every operation stays torch's.

``install(model)`` routes the engine's own copy of the policy through ``linear``: each ``nn.Linear`` takes
the kernel when its input has at most ``max_rows(dtype)`` rows, on CPU, under no_grad, and torch otherwise
(prefill, the learner, GPUs). Weights are read at call time, so ``load_state_dict`` (a weight sync) needs
nothing more. Results equal torch's up to the order of float32 sums (bfloat16 outputs are rounded once, to
nearest even, as torch rounds them); ``tests/test_decode_kernels.py`` bounds the difference against float64.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import types
from pathlib import Path

import torch

from prover.system.environment import cpuinfo_fields
from prover.system.files import cache_root

SOURCE = Path(__file__).with_name("decode_kernels.c")
INCLUDED = Path(__file__).with_name("decode_step.c")  # compiled as part of SOURCE, which includes it
COMPILE_TIMEOUT_S = 120

# Rows of input up to which the kernel beats torch, by the build's instruction set (``prover_gemv_isa``), measured on
# SmolLM2-135M's decode shapes at 1 thread (benchmarks/perf/kernel_rows.py). AVX512-BF16 (a Xeon with AMX):
# bfloat16 1.6-1.8x torch at 1-4 rows, slower from 8 (oneDNN's AMX tiles win there); float32 1.0-2x at 1-16 rows.
# AVX2 (an AMD EPYC without AVX-512): torch has no bfloat16 instructions to use there, so the kernel wins at every
# row count (1.3-3.7x at 1-16 rows); float32 1.1-1.7x at 1-8 rows, even at 16. AVX512-BF16 without AMX (an AMD
# Zen 4): oneDNN has no tiles either, and the kernel's bfloat16 beats torch at 8 and 16 rows too (1.4x):
# ``NO_AMX_BF16_ROWS``.
ISA_NAMES = {2: "AVX512-BF16", 1: "AVX-512", 0: "AVX2"}  # prover_gemv_isa()'s answers
MAX_ROWS = {2: {torch.bfloat16: 4, torch.float32: 16}, 1: {torch.bfloat16: 4, torch.float32: 16},
            0: {torch.bfloat16: 16, torch.float32: 16}}
NO_AMX_BF16_ROWS = 16


def cpu_flags() -> str:
    """The CPU's feature flags (Linux), part of the build's name: -march=native code runs on this CPU only."""
    try:
        return dict(cpuinfo_fields(Path("/proc/cpuinfo").read_text(errors="replace"))).get("flags", "")
    except OSError:
        return ""


# -ffp-contract=off: a C expression such as a * b + c * d rounds as written, in vectorized and scalar code alike,
# so a row's result does not depend on which the compiler picked for its address or the call's row count (the
# products' fused multiply-adds are intrinsics, which the flag leaves as they are)
COMPILE_FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-shared", "-fPIC")


def library_path() -> Path:
    digest = hashlib.sha256(SOURCE.read_bytes() + INCLUDED.read_bytes() + cpu_flags().encode()
                            + " ".join(COMPILE_FLAGS).encode()).hexdigest()[:16]
    return cache_root() / "kernels" / f"decode-kernels-{digest}.so"


def build(out: Path) -> str | None:
    """Compile ``decode_kernels.c`` into ``out`` (written whole, then renamed, so concurrent builders never see half a
    file); why not, when it cannot."""
    name = os.environ.get("CC", "cc")
    compiler = shutil.which(name)
    if compiler is None:
        return f"no C compiler ({name})"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
        os.close(fd)
    except OSError as err:
        return f"cannot write {out.parent} ({err.strerror})"
    try:
        done = subprocess.run([compiler, *COMPILE_FLAGS, "-o", tmp, str(SOURCE), "-lm"],
                              capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines() or ["the compiler failed"]
            return next((line for line in lines if "error" in line), lines[-1]).strip()
        os.replace(tmp, out)
        return None
    except (OSError, subprocess.TimeoutExpired) as err:
        return str(err)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@functools.cache
def load() -> tuple[ctypes.CDLL | None, str | None]:
    """The built kernels (building them the first time), or None and why they cannot be built here."""
    path = library_path()
    why = None if path.exists() else build(path)
    if why is not None:
        return None, why
    try:
        return open_library(path), None
    except OSError as err:
        return None, str(err)


def open_library(path: Path) -> ctypes.CDLL:
    """A built library with its functions' signatures declared (ctypes would otherwise pass every number as a C
    int)."""
    lib = ctypes.CDLL(str(path))
    ptr, i64, f32, flag = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_int
    signatures = {"prover_gemv_bf16": [ptr] * 4 + [i64] * 5, "prover_gemv_f32": [ptr] * 4 + [i64] * 5,
                  "prover_add_rmsnorm": [ptr] * 4 + [i64, i64, f32, flag],
                  "prover_rope_store": [ptr, i64, i64, i64, i64, ptr, ptr, f32, ptr, ptr, ptr, ptr, i64, i64, ptr,
                                        flag],
                  "prover_attend": [ptr, i64, i64, i64, i64, ptr, ptr, i64, i64, ptr, i64, ptr, f32, ptr, ptr, flag],
                  "prover_attend_scratch": [i64],
                  "prover_layers_step": [ptr] * 10 + [i64] * 7 + [f32, ptr, ptr, i64, i64, ptr, i64, ptr, f32, ptr,
                                                                  flag],
                  "prover_gemv_isa": []}
    for name, args in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, ctypes.c_int64 if name == "prover_attend_scratch" else ctypes.c_int
    return lib


@functools.cache
def max_rows(dtype: torch.dtype) -> int:
    """The most rows of input the kernel takes in ``dtype`` on this CPU's build (``MAX_ROWS``, ``NO_AMX_BF16_ROWS``);
    0 without a build."""
    lib = load()[0]
    if lib is None:
        return 0
    isa = lib.prover_gemv_isa()
    if dtype == torch.bfloat16 and isa == 2 and "amx_bf16" not in cpu_flags().split():
        return NO_AMX_BF16_ROWS
    return MAX_ROWS[isa].get(dtype, 0)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor | None:
    """``F.linear(x, weight, bias)`` by the kernel, or None when it does not apply (too many rows, a dtype
    it lacks, not on CPU, no build)."""
    k = x.shape[-1]
    rows = x.numel() // k if k else 0
    if (not covers(x, rows) or x.device.type != "cpu" or weight.dtype != x.dtype
            or (bias is not None and bias.dtype != x.dtype) or not weight.is_contiguous()):
        return None
    return gemv(x, weight, bias)


def gemv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """The kernel's product whatever the row count (``linear`` checks where it applies; the benchmarks call this
    to measure past ``MAX_ROWS``): CPU tensors of one dtype, float32 or bfloat16, a contiguous weight, a build."""
    lib = load()[0]
    assert lib is not None
    k = x.shape[-1]
    rows = x.numel() // k
    flat = x.reshape(rows, k)
    if flat.stride(-1) != 1:
        flat = flat.contiguous()
    n = weight.shape[0]
    y = torch.empty((rows, n), dtype=x.dtype)
    fn = lib.prover_gemv_bf16 if x.dtype == torch.bfloat16 else lib.prover_gemv_f32
    fn(weight.data_ptr(), flat.data_ptr(), y.data_ptr(), bias.data_ptr() if bias is not None else None,
       n, k, rows, flat.stride(0), n)
    return y.view(*x.shape[:-1], n)


def _forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    out = linear(x, self.weight, self.bias) if not torch.is_grad_enabled() else None
    return out if out is not None else torch.nn.functional.linear(x, self.weight, self.bias)


def install(model: torch.nn.Module) -> int:
    """Route ``model``'s ``nn.Linear`` layers through ``linear`` (under no_grad / inference mode only: the
    kernel has no backward); how many. ``model`` must be the engine's own copy, not the learner's."""
    count = 0
    for module in model.modules():
        if type(module) is torch.nn.Linear:
            module.forward = types.MethodType(_forward, module)  # type: ignore[method-assign]
            count += 1
    return count


def covers(x: torch.Tensor, rows: int) -> bool:
    """Whether this build's products take ``rows`` rows in ``x``'s dtype (a build, the dtype, few enough rows)."""
    return 0 < rows <= max_rows(x.dtype)


def layers_step(h: torch.Tensor, weights: torch.Tensor, cache_layers: list[torch.nn.Module],
                final_norm: torch.Tensor, heads: int, kv_heads: int, d: int, inter: int, eps: float,
                cos: torch.Tensor, sin: torch.Tensor, column: int, mask: torch.Tensor,
                cache_rows: torch.Tensor | None = None) -> torch.Tensor:
    """Every layer of a one-token step and the final norm in one call (``prover_layers_step``): ``h`` (rows,
    hidden) the embedded tokens, updated in place; ``weights`` the layers' pointers (``FusedStep.pointers``);
    ``cache_rows`` (int64, one a row) the cache row each row reads and writes, when not row for row; returns
    the final norm's output (rows, hidden)."""
    lib = load()[0]
    assert lib is not None
    rows, hidden = h.shape
    new = functools.partial(torch.empty, dtype=h.dtype)
    x, qkv, attended = new((rows, hidden)), new((rows, (heads + 2 * kv_heads) * d)), new((rows, heads * d))
    delta, gate_up, act = new((rows, hidden)), new((rows, 2 * inter)), new((rows, inter))
    caches = torch.tensor([b.data_ptr() for layer in cache_layers for b in (layer.key_buffer, layer.value_buffer)],
                          dtype=torch.int64)
    scratch = attend_scratch(column + 1)
    done = lib.prover_layers_step(h.data_ptr(), x.data_ptr(), qkv.data_ptr(), attended.data_ptr(), delta.data_ptr(),
                                  gate_up.data_ptr(), act.data_ptr(), weights.data_ptr(), caches.data_ptr(),
                                  final_norm.data_ptr(), len(cache_layers), rows, hidden, heads, kv_heads, d, inter,
                                  eps, cos.data_ptr(), sin.data_ptr(), cache_layers[0].key_buffer.shape[2], column,
                                  mask.data_ptr(), mask.stride(0), _ptr(cache_rows), d ** -0.5,
                                  scratch.data_ptr(), h.dtype == torch.bfloat16)
    if done != 0:
        raise ValueError(f"prover_layers_step refused head_dim {d} (at most 256)")
    return x


def attend_scratch(columns: int) -> torch.Tensor:
    """The float32 scratch ``attend`` needs over ``columns`` cache columns."""
    lib = load()[0]
    assert lib is not None
    return torch.empty(lib.prover_attend_scratch(columns), dtype=torch.float32)


def _ptr(t: torch.Tensor | None) -> int | None:
    return t.data_ptr() if t is not None else None


def add_rmsnorm(h: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor, out: torch.Tensor,
                eps: float) -> None:
    """``h += delta`` (when given), then ``out = weight * RMSNorm(h)``; contiguous (rows, k) tensors."""
    lib = load()[0]
    assert lib is not None
    lib.prover_add_rmsnorm(h.data_ptr(), _ptr(delta), weight.data_ptr(), out.data_ptr(), h.shape[0], h.shape[1],
                           eps, h.dtype == torch.bfloat16)


def rope_store(qkv: torch.Tensor, heads: int, kv_heads: int, q_norm: torch.Tensor | None,
               k_norm: torch.Tensor | None, eps: float, cos: torch.Tensor, sin: torch.Tensor,
               keys: torch.Tensor, values: torch.Tensor, column: int, cache_rows: torch.Tensor | None = None) -> None:
    """Rotate (after Qwen3's per-head norms) the queries and keys of ``qkv`` (rows, (heads + 2 kv_heads) d) in
    place, and write keys and values as column ``column`` of the reserved buffers (cache rows, kv_heads,
    capacity, d): row r's into cache row ``cache_rows[r]`` (int64), or r without ``cache_rows``."""
    lib = load()[0]
    assert lib is not None
    d = keys.shape[-1]
    lib.prover_rope_store(qkv.data_ptr(), qkv.shape[0], heads, kv_heads, d, _ptr(q_norm), _ptr(k_norm), eps,
                          cos.data_ptr(), sin.data_ptr(), keys.data_ptr(), values.data_ptr(), keys.shape[2],
                          column, _ptr(cache_rows), qkv.dtype == torch.bfloat16)


def attend(qkv: torch.Tensor, heads: int, keys: torch.Tensor, values: torch.Tensor, columns: int,
           mask: torch.Tensor, scale: float, out: torch.Tensor, scratch: torch.Tensor,
           cache_rows: torch.Tensor | None = None) -> None:
    """Each row's queries in ``qkv`` against the first ``columns`` cache columns that ``mask`` (rows x columns,
    int64, rows may be strided) allows, in cache row ``cache_rows[r]`` (r without ``cache_rows``); ``out``
    (rows, heads d). ``scratch``: ``attend_scratch(columns)``."""
    lib = load()[0]
    assert lib is not None
    kv_heads, capacity, d = keys.shape[1], keys.shape[2], keys.shape[3]
    lib.prover_attend(qkv.data_ptr(), qkv.shape[0], heads, kv_heads, d, keys.data_ptr(), values.data_ptr(),
                      capacity, columns, mask.data_ptr(), mask.stride(0), _ptr(cache_rows), scale, out.data_ptr(),
                      scratch.data_ptr(), qkv.dtype == torch.bfloat16)
