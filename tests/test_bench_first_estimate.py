"""`prover bench` with many seeds and no timings yet prints an estimate of the whole matrix after the first
step of the first cell, not only after that cell ends. A real process, stopped by SIGTERM once
the line has come."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import yaml


@pytest.mark.slow
def test_a_thousand_seed_bench_estimates_its_time_before_the_first_cell_ends(tmp_path, tiny_run_overrides):
    common = {k: yaml.safe_load(v) for k, v in (o.split("=", 1) for o in tiny_run_overrides) if k != "run.dir"}
    cfg = tmp_path / "bench.yaml"
    cfg.write_text(yaml.safe_dump({"dir": str(tmp_path / "bench"), "envs": ["alfworld-sim"],
                                   "seeds": list(range(1000)), "steps": 3, "methods": ["grpo"],
                                   "share_warmstart": "env", "common": common}))
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "prover.cli", "bench", "--config", str(cfg)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    seen: list[str] = []
    try:
        end = time.monotonic() + 600
        for line in proc.stdout:
            seen.append(line.rstrip())
            if " for 1000 cells (" in line or " done in " in line or time.monotonic() > end:
                break
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    first = next((s for s in seen if " for 1000 cells (" in s), None)
    assert first is not None, "\n".join(seen)
    assert not any(" done in " in s for s in seen)  # it came before the first cell ended
    # 1000 cells of 3 steps, less the one step just timed, each priced like that one
    assert first.startswith("bench: about ") and "for 1000 cells (2999 steps at " in first
    assert "refined after each cell" in first
