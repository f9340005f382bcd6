"""docs/perf.md's layout (benchmarks/perf/page.py): a side-by-side measurement is named by what its two trees
differ in when the result says so, and each section's provenance sits under its result."""

from benchmarks.perf.page import lever, section_cell, summary


def _cell(**extra):
    seeds = {"0": {"before": {"wall_s": 100.0, "cpu_s": 80.0, "step_s": 50.0, "eval": {"0": 0.5, "12": 0.5}},
                   "after": {"wall_s": 90.0, "cpu_s": 60.0, "step_s": 45.0, "eval": {"0": 0.5, "12": 0.5}}}}
    return {"before": "aaa1111", "after": "bbb2222", "threads": "1", "cell": ["steps=12"], "seeds": seeds,
            "measured": {"date": "2026-12-04 18:54 UTC", "seconds": 190, "load_avg_1m": 2.0, "cpus": 2}, **extra}


def test_a_measurement_is_named_by_its_lever_or_else_by_its_revisions():
    assert lever(_cell(lever="shared prefixes / none")) == "shared prefixes / none"
    assert lever(_cell()) == "bbb2222 / aaa1111"
    [row] = [ln for ln in summary({"cell": _cell(lever="shared prefixes / none")}) if "bench cell" in ln]
    # after / before: wall 90 / 100, CPU 60 / 80
    assert row.startswith("| a pivot-sim bench cell, shared prefixes / none (threads 1, 1 seeds side by side)")
    assert row.endswith("| 0.90x; 0.75x |") and "aaa1111" not in row


def test_a_sections_provenance_comes_after_its_table():
    lines = section_cell(_cell(lever="shared prefixes / none"))
    assert lines[0] == "## A bench cell: shared prefixes / none"
    table = max(i for i, ln in enumerate(lines) if ln.startswith("|"))
    [when] = [i for i, ln in enumerate(lines) if ln.startswith("> Measured 2026-12-04 18:54 UTC")]
    assert when > table


def test_a_second_cpus_decode_table_names_its_cpu_and_llama_builds_instruction_sets():
    from benchmarks.perf.page_decode import AVX2, decode_lines, llama_build

    res = {"best": {"float32 batch 1": {"prover": 20.0, "llama.cpp": 25.0}}, "weight_bytes": {"float32": 5e8},
           "threads": 1, "prompt_tokens": 128, "new_tokens": 64, "rounds": {"k": {"prover": [1, 2, 3]}},
           "load_average": [1.0], "cpu": "AMD EPYC", "gemv_isa": "AVX2", "llama_cpu_features": ["avx", "avx2", "fma"],
           "cpu_info": {"model": "AMD EPYC", "flags": {"avx2": True}, "torch_cpu_capability": "AVX2"}}
    assert llama_build(res) == "built for this CPU (`GGML_NATIVE`): AVX, AVX2, FMA"
    bandwidth = {"stream": {"gb_per_s": {"read": {"1": 9.0}}}, "weights": {"fp32": {"gb_per_s": {"1": 12.5}}}}
    lines = decode_lines(res, bandwidth, AVX2)
    assert lines[1] == "### Decode against llama.cpp, matched, on a CPU without AVX-512"
    # 5e8 bytes x 20 tokens/s = 10 GB/s, 80% of the faster one-thread read (F.linear's 12.5 over the sum's 9); 20 / 25
    assert "| float32, 1 | 20.0 | 25.0 | 0.80x | 10.0 (80% of a thread's read rate) | - |" in lines
    assert lines[-1].startswith("CPU: AMD EPYC") and "avx512f no" in lines[-1]
    assert any("widens bfloat16" in ln for ln in lines)
