"""benchmarks/checks/device_check.sh, the GPU machine's check, run here with --cpu at toy sizes: every stage trains
and the JSON holds the numbers the GPU run reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # three `prover train` processes, one under accelerate launch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "checks" / "device_check.sh"
STAGE_KEYS = {"ok", "wall_s", "peak_gpu_mib", "command", "steps", "rollout_tokens", "rollout_tokens_per_s",
              "rollout_tokens_per_s_warm", "learner_tokens_per_s_warm", "learner_rows_per_step",
              "learner_s_per_step_warm", "sync_s_per_step_warm", "step_s_warm", "grad_norm_last"}


def _run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    return subprocess.run(["bash", str(SCRIPT), "--python", sys.executable, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_cpu_run_writes_every_stage(tmp_path):
    out = tmp_path / "check.json"
    proc = _run("--cpu", "--out", str(out), "--work", str(tmp_path / "work"), "--steps", "1", "--budget-s", "400")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    report = json.loads(out.read_text())
    assert set(report) == {"schema", "mode", "versions", "settings", "stages", "model", "wall_s", "ok"}
    assert report["ok"] and report["mode"] == "cpu"
    assert list(report["stages"]) == ["tiny", "qwen35_2b", "fsdp_1gpu"]
    for name, stage in report["stages"].items():
        assert STAGE_KEYS <= set(stage), f"{name} lacks {STAGE_KEYS - set(stage)}"
        assert stage["ok"] and stage["steps"] == 1 and stage["rollout_tokens_per_s"] > 0, name
    assert report["stages"]["fsdp_1gpu"]["distributed_type"] == "FSDP"  # not DDP in FSDP's clothes
    assert report["model"]["params"] > 0 and "linear_num_value_heads" in report["model"]["shape"]  # Qwen3.5's


def test_bad_arguments_are_one_line():
    for args, message in ((["--steps", "0"], "--steps '0' is not a whole number above 0"),
                          (["--budget-s"], "--budget-s needs a value"), (["--nope"], "unknown argument '--nope'")):
        proc = _run(*args, timeout=60)
        assert proc.returncode == 2 and proc.stderr.strip().startswith(f"device_check: {message}"), proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
