"""prover.engines.decode_kernels: the small-batch products against the definition, y = x W^T + b in float64,
on shapes with remainders (columns not a multiple of the 32 a step takes, rows not a multiple of the 8 or 4 a
pass takes), strided inputs and biases; where they apply and where torch keeps the product; why a build fails.
The rest of the kernels (norm, rotation, attention) are checked against transformers' forward in
tests/test_fused_step.py.

Skipped where the kernels cannot be built (no C compiler, or neither AVX-512 nor AVX2 with FMA): the engine then
keeps torch's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from prover.engines import decode_kernels as kernels

pytestmark = pytest.mark.skipif(kernels.load()[0] is None, reason=f"no kernels here: {kernels.load()[1]}")

# shapes (rows of x, k, n): remainders of every kind, and SmolLM2's decode shapes
SHAPES = [(1, 576, 1536), (2, 577, 1539), (3, 33, 7), (4, 1536, 576), (5, 31, 9), (16, 96, 40), (1, 1, 1)]


def reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    y = x.double() @ w.double().t()
    return y + b.double() if b is not None else y


@pytest.fixture(params=["native", "x86-64-v3"])
def build(request, monkeypatch, tmp_path):
    """The kernels as this CPU builds them, and as an AVX2 CPU does (x86-64-v3, whatever this one has beyond
    it): every operation of the module goes through the build under test."""
    if request.param != "native":
        if not {"avx2", "fma"} <= set(kernels.cpu_flags().split()):
            pytest.skip("this CPU runs no AVX2 code")
        assert _built_for(request.param, tmp_path / "k.so", monkeypatch) is None
        lib = kernels.open_library(tmp_path / "k.so")
        monkeypatch.setattr(kernels, "load", lambda: (lib, None))
        kernels.max_rows.cache_clear()
    yield request.param
    kernels.max_rows.cache_clear()


@pytest.mark.parametrize("rows,k,n", SHAPES)
@pytest.mark.parametrize("bias", [False, True])
def test_float32_matches_the_definition(rows, k, n, bias):
    g = torch.Generator().manual_seed(rows * 1000 + k + n)
    x, w = torch.randn(rows, k, generator=g), torch.randn(n, k, generator=g)
    b = torch.randn(n, generator=g) if bias else None
    y = kernels.linear(x, w, b)
    assert y is not None and y.dtype == torch.float32 and y.shape == (rows, n)
    # float32 sums of k products of unit normals: error well under 1e-5 of sqrt(k)
    torch.testing.assert_close(y.double(), reference(x, w, b), atol=1e-5 * k ** 0.5, rtol=1e-6)


@pytest.mark.parametrize("rows,k,n", [s for s in SHAPES if s[0] <= kernels.max_rows(torch.bfloat16)])
@pytest.mark.parametrize("bias", [False, True])
def test_bfloat16_is_the_exact_sum_rounded_once(rows, k, n, bias):
    """bfloat16 inputs: every product is exact in float32 and the sum is rounded once to bfloat16, so each
    output is within one bfloat16 rounding (2^-8 relative) of the exact sum, plus float32 accumulation."""
    g = torch.Generator().manual_seed(rows * 1000 + k + n)
    x, w = torch.randn(rows, k, generator=g).bfloat16(), torch.randn(n, k, generator=g).bfloat16()
    b = torch.randn(n, generator=g).bfloat16() if bias else None
    y = kernels.linear(x, w, b)
    assert y is not None and y.dtype == torch.bfloat16
    exact = reference(x, w, b)
    assert ((y.double() - exact).abs() <= exact.abs() * 2.0 ** -8 + 1e-5 * k ** 0.5).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_rows_product_does_not_depend_on_how_many_rows_share_the_call(build, dtype):
    """Each row's output is bit for bit the same whatever rows come with it (1 to max_rows, any position): the
    decode loop drops rows that have stopped, and the running rows' numbers must not move when it does. The
    n's leave every remainder of the passes' weight rows."""
    top = kernels.max_rows(dtype)
    g = torch.Generator().manual_seed(11)
    for n, k in ((40, 96), (13, 100), (7, 37), (3, 8)):
        x, w = torch.randn(top, k, generator=g).to(dtype), torch.randn(n, k, generator=g).to(dtype)
        full = kernels.gemv(x, w)
        for m in range(1, top + 1):
            for first in (0, top - m):
                assert torch.equal(kernels.gemv(x[first:first + m].contiguous(), w), full[first:first + m]), (n, k, m)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_some_rows_of_the_cache_rotate_store_and_attend_as_in_a_call_of_all(build, dtype):
    """rope_store and attend given some rows and the cache row of each (``cache_rows``) write and read those
    cache rows, and give each row bit for bit what a call with every row gives it (SmolLM2's heads: 9 query
    heads on 3 kv heads of 64)."""
    rows, heads, kv_heads, d, capacity, column = 6, 9, 3, 64, 12, 7
    g = torch.Generator().manual_seed(5)
    qkv = torch.randn(rows, (heads + 2 * kv_heads) * d, generator=g).to(dtype)
    cos, sin = torch.randn(rows, d, generator=g).to(dtype), torch.randn(rows, d, generator=g).to(dtype)
    keys = torch.randn(rows, kv_heads, capacity, d, generator=g).to(dtype)
    values = torch.randn(rows, kv_heads, capacity, d, generator=g).to(dtype)
    mask = torch.ones(rows, column + 1, dtype=torch.int64)
    mask[:, :2] = 0
    scratch = kernels.attend_scratch(column + 1)

    def step(some: list[int] | None):
        k, v = keys.clone(), values.clone()
        pick = torch.tensor(some if some is not None else range(rows))
        q = qkv[pick].contiguous()
        kernels.rope_store(q, heads, kv_heads, None, None, 1e-5, cos[pick].contiguous(), sin[pick].contiguous(), k,
                           v, column, pick if some is not None else None)
        out = q.new_empty((len(pick), heads * d))
        kernels.attend(q, heads, k, v, column + 1, mask[pick].contiguous(), d ** -0.5, out, scratch,
                       pick if some is not None else None)
        return q, out, k, v

    q_all, out_all, k_all, v_all = step(None)
    for some in ([4], [3, 1], [5, 0, 2]):
        q, out, k, v = step(some)
        assert torch.equal(q, q_all[some]) and torch.equal(out, out_all[some])
        assert torch.equal(k[some], k_all[some]) and torch.equal(v[some], v_all[some])
        others = [r for r in range(rows) if r not in some]
        assert torch.equal(k[others], keys[others]) and torch.equal(v[others], values[others])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_is_masked_softmax_attention_over_the_cache(build, dtype):
    """attend against its definition in float64: each query head h of a row against its kv head h // (heads /
    kv_heads), scores q.k * scale where the mask allows, softmax, the weighted sum of the values. Odd sizes (a
    head of 40, 23 columns, 5 query heads a kv head) reach every remainder of the loops; the masked columns
    include a run of five."""
    rows, heads, kv_heads, d, capacity, columns = 2, 10, 2, 40, 30, 23
    g = torch.Generator().manual_seed(7)
    qkv = torch.randn(rows, (heads + 2 * kv_heads) * d, generator=g).to(dtype)
    keys = torch.randn(rows, kv_heads, capacity, d, generator=g).to(dtype)
    values = torch.randn(rows, kv_heads, capacity, d, generator=g).to(dtype)
    mask = torch.ones(rows, columns, dtype=torch.int64)
    mask[0, 3:8] = 0
    mask[1, 0] = mask[1, 13] = 0
    out = qkv.new_empty((rows, heads * d))
    kernels.attend(qkv, heads, keys, values, columns, mask, d ** -0.5, out, kernels.attend_scratch(columns))
    q = qkv[:, :heads * d].double().view(rows, heads, d)
    k = keys[:, :, :columns].double().repeat_interleave(heads // kv_heads, dim=1)
    v = values[:, :, :columns].double().repeat_interleave(heads // kv_heads, dim=1)
    scores = (q[:, :, None, :] * k).sum(-1) * d ** -0.5
    scores = scores.masked_fill(mask[:, None, :] == 0, float("-inf"))
    expected = (scores.softmax(-1)[..., None] * v).sum(-2).reshape(rows, heads * d)
    tol = 2.0 ** -8 if dtype == torch.bfloat16 else 1e-6  # one rounding of the result; float32 sums
    assert ((out.double() - expected).abs() <= expected.abs() * tol + 1e-5).all()


def test_a_strided_input_and_leading_dimensions():
    """(batch, 1, k) rows cut from a longer (batch, t, k) tensor, as a decode step's last position is."""
    g = torch.Generator().manual_seed(0)
    long = torch.randn(3, 5, 64, generator=g)
    x = long[:, -1:, :]
    w = torch.randn(24, 64, generator=g)
    y = kernels.linear(x, w, None)
    assert y is not None and y.shape == (3, 1, 24)
    torch.testing.assert_close(y.double(), reference(x.reshape(3, 64), w, None).view(3, 1, 24), atol=1e-4, rtol=0)


def test_torch_keeps_what_the_kernels_do_not_take():
    w = torch.randn(8, 16)
    assert kernels.linear(torch.randn(kernels.max_rows(torch.float32) + 1, 16), w, None) is None  # too many rows
    assert kernels.linear(torch.randn(2, 16, dtype=torch.float64), w.double(), None) is None  # no float64 kernel
    assert kernels.linear(torch.randn(2, 16).bfloat16(), w, None) is None  # mixed dtypes
    assert kernels.linear(torch.randn(2, 16), w.t().contiguous().t(), None) is None  # a transposed weight


@pytest.mark.parametrize("isa, flags, bf16_rows", [
    (2, "avx512f avx512_bf16 amx_bf16 amx_tile", 4),  # a Xeon: oneDNN's AMX tiles win from 8 rows
    (2, "avx512f avx512_bf16", 16),  # a Zen 4: no tiles, the kernel wins at 8 and 16 rows
    (1, "avx512f", 4), (0, "avx2 fma", 16)])
def test_bfloat16_rows_the_kernel_takes_follow_amx(monkeypatch, isa, flags, bf16_rows):
    class Build:
        def prover_gemv_isa(self) -> int:
            return isa
    monkeypatch.setattr(kernels, "load", lambda: (Build(), None))
    monkeypatch.setattr(kernels, "cpu_flags", lambda: flags)
    kernels.max_rows.cache_clear()
    try:
        assert (kernels.max_rows(torch.bfloat16), kernels.max_rows(torch.float32)) == (bf16_rows, 16)
    finally:
        kernels.max_rows.cache_clear()


def test_installed_layers_use_it_without_grad_only():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(40, 24), torch.nn.Linear(24, 8, bias=False))
    x = torch.randn(2, 40)
    expected = model(x)
    calls = []
    real = kernels.linear

    def counted(*args):
        calls.append(args[0].shape)
        return real(*args)

    assert kernels.install(model) == 2
    kernels.linear, saved = counted, kernels.linear
    try:
        with torch.no_grad():
            got = model(x)
        assert len(calls) == 2
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
        calls.clear()
        model(x).sum().backward()  # with grad: torch's product, which has a backward
        assert calls == [] and model[0].weight.grad is not None
    finally:
        kernels.linear = saved


def test_the_build_is_named_by_source_and_cpu(monkeypatch):
    path = kernels.library_path()
    monkeypatch.setattr(kernels, "cpu_flags", lambda: "another cpu")
    assert kernels.library_path() != path and kernels.library_path().parent == path.parent


def test_no_compiler_is_a_reason_not_an_error(monkeypatch, tmp_path):
    monkeypatch.setenv("CC", "no-such-compiler-here")
    assert kernels.build(tmp_path / "g.so") == "no C compiler (no-such-compiler-here)"
    assert not (tmp_path / "g.so").exists()


def test_an_unwritable_cache_is_a_reason_not_an_error(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    assert kernels.build(blocked / "kernels" / "k.so").startswith("cannot write")


def _built_for(march: str, out: Path, monkeypatch) -> str | None:
    """Build for another instruction set than this CPU's (-march appended after -march=native wins)."""
    real = kernels.subprocess.run
    monkeypatch.setattr(kernels.subprocess, "run", lambda cmd, **kw: real([*cmd, f"-march={march}"], **kw))
    return kernels.build(out)


def test_a_cpu_without_avx2_gets_the_compilers_reason(monkeypatch, tmp_path):
    """Compiled for a CPU without AVX2 (x86-64-v2), the source stops with its #error line, and the build says so."""
    why = _built_for("x86-64-v2", tmp_path / "k.so", monkeypatch)
    assert why is not None and "AVX2" in why and not (tmp_path / "k.so").exists()


@pytest.mark.skipif(not {"avx2", "fma"} <= set(kernels.cpu_flags().split()), reason="this CPU runs no AVX2 code")
def test_the_avx2_build_matches_the_definition(monkeypatch, tmp_path):
    """The AVX2 loops (8-float vectors, scalar tails), built for x86-64-v3 whatever this CPU has beyond it: the
    products of the shapes above against float64, as the tests above check the native build."""
    assert _built_for("x86-64-v3", tmp_path / "k.so", monkeypatch) is None
    lib = kernels.open_library(tmp_path / "k.so")
    assert lib.prover_gemv_isa() == 0
    for rows, k, n in SHAPES:
        g = torch.Generator().manual_seed(rows * 1000 + k + n)
        x, w, b = torch.randn(rows, k, generator=g), torch.randn(n, k, generator=g), torch.randn(n, generator=g)
        for dtype, fn in ((torch.float32, lib.prover_gemv_f32), (torch.bfloat16, lib.prover_gemv_bf16)):
            xs, ws, bs = x.to(dtype), w.to(dtype), b.to(dtype)
            y = torch.empty(rows, n, dtype=dtype)
            fn(ws.data_ptr(), xs.data_ptr(), y.data_ptr(), bs.data_ptr(), n, k, rows, k, n)
            exact = reference(xs, ws, bs)
            tol = exact.abs() * (2.0 ** -8 if dtype == torch.bfloat16 else 1e-6) + 1e-5 * k ** 0.5
            assert ((y.double() - exact).abs() <= tol).all(), (rows, k, n, dtype)
