"""benchmarks/perf/bandwidth.py counts bytes as STREAM does and checks that its kernels did their work: the
expected values come from STREAM's definitions (a=1, b=2, c=0, q=3; copy c=a, scale b=qc, add c=a+b,
triad a=b+qc), worked out here by hand."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks.perf import bandwidth


def test_one_pass_of_streams_kernels_by_hand():
    # c = 1; b = 3 * 1 = 3; c = 1 + 3 = 4; a = 3 + 3 * 4 = 15; then c = 15, b = 45, c = 60, a = 45 + 180 = 225
    assert bandwidth.expected_values(1) == (15.0, 3.0, 4.0)
    assert bandwidth.expected_values(2) == (225.0, 45.0, 60.0)


def test_stream_counts_words_the_stream_way_and_its_arrays_hold_the_recurrences_values():
    got = bandwidth.stream(1000, [1, 1, 1], rounds=2)  # three thread counts: three passes of the recurrence
    assert got["bytes"] == {"copy": 16000, "scale": 16000, "add": 24000, "triad": 24000, "read": 8000}
    assert got["valid"] is True
    assert set(got["gb_per_s"]["triad"]) == {"1"} and got["gb_per_s"]["triad"]["1"] > 0


def test_a_kernel_that_skips_work_fails_the_check(monkeypatch):
    real = bandwidth.stream_kernels

    def lazy_add(a, b, c):
        kernels = real(a, b, c)
        kernels["add"] = lambda: c.copy_(a)  # c = a, not a + b
        return kernels

    monkeypatch.setattr(bandwidth, "stream_kernels", lazy_add)
    assert bandwidth.stream(1000, [1], rounds=1)["valid"] is False


def test_weight_streaming_counts_the_weight_matrix_bytes():
    got = bandwidth.weights(1 << 20, [1], rounds=1)
    assert got["fp32"]["shape"] == [64, 4096] and got["fp32"]["weight_bytes"] == 64 * 4096 * 4
    assert got["bf16"]["shape"] == [128, 4096] and got["bf16"]["weight_bytes"] == 128 * 4096 * 2


def test_smoke_run_writes_the_cpu_and_the_thread_counts(tmp_path, capsys):
    threads = torch.get_num_threads()
    other = 1 if threads > 1 else 2  # a count other than the caller's, so that a missed restore shows
    out = tmp_path / "bw.json"
    assert bandwidth.main(["--smoke", "--threads", str(other), "--out", str(out)]) == 0
    assert torch.get_num_threads() == threads  # the caller's thread count comes back
    saved = json.loads(out.read_text())
    assert saved["smoke"] is True and saved["settings"] == {"array_mib": 1, "threads": [other], "rounds": 1}
    assert set(saved["cpu"]["flags"]) >= {"avx512f", "avx512_bf16", "amx_bf16"} and saved["cpu"]["model"]
    assert len(saved["load"]["start"]) == 3 and saved["measured"]["load_avg_1m"] >= 0
    assert "stream triad" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    ["--threads", "0"], ["--threads", "1,x"], ["--array-mib", "0"], ["--rounds", "-1"],
    ["--array-mib", str(1 << 30)],  # three arrays of 1 PiB: refused before any is allocated
    ["--smoke", "--out", "{tmp}"],  # a folder
    ["--smoke", "--out", "{tmp}/a-file/bw.json"],  # under a file
])
def test_bad_arguments_end_in_one_line_before_anything_is_written(argv, tmp_path):
    (tmp_path / "a-file").write_text("")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    out = tmp_path / "bw.json"
    with pytest.raises(SystemExit) as e:
        bandwidth.main(argv if "--out" in argv else [*argv, "--out", str(out)])
    assert str(e.value).startswith("bandwidth: ") and "\n" not in str(e.value), e.value
    assert not out.exists() and (tmp_path / "a-file").is_file()
