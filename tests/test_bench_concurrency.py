"""Two ``prover bench`` processes on one folder, as docs/prover-bench.md runs them (disjoint seeds, warmstart_seed
keeping them on one shared warm start): both exit 0, the shared warm start is built once and reused by
the other process, every cell trains once; and a cell another process holds is skipped with one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from prover.cli import main

# holds an exclusive flock on argv[1], as a bench that trains that cell does, until it is killed
HOLD = """import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, b"%d\\n" % os.getpid())
print("held", flush=True)
time.sleep(600)
"""


@pytest.fixture
def bench_yaml(tiny_run_overrides, tmp_path) -> Path:
    """test_bench's tiny matrix (conftest's seconds-long run settings), one method, one warm start per env."""
    common = {k: yaml.safe_load(v) for k, v in (o.split("=", 1) for o in tiny_run_overrides) if k != "run.dir"}
    tree = {"dir": str(tmp_path / "bench"), "envs": ["alfworld-sim"], "seeds": [0, 1], "steps": 1,
            "methods": ["grpo"], "share_warmstart": "env", "common": common}
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def _bench(cfg: Path, *overrides: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "prover.cli", "bench", "--config", str(cfg), *overrides],
                            env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _history(cell: Path) -> list[tuple[str, int]]:
    return [(r["phase"], r["step"]) for r in map(json.loads, (cell / "metrics.jsonl").read_text().splitlines())]


@pytest.mark.slow
def test_two_benches_on_disjoint_seeds_share_the_warm_start_and_train_each_cell_once(bench_yaml, tmp_path):
    procs = [_bench(bench_yaml, "seeds=[0]"), _bench(bench_yaml, "seeds=[1]", "warmstart_seed=0")]
    try:
        outs = [p.communicate(timeout=900) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, f"exit {p.returncode}\n{out}\n{err}"
    both = outs[0][0] + outs[1][0]
    assert both.count(": done in ") == 2
    assert all(both.count(f"grpo · seed {s}: done in") == 1 for s in (0, 1)), both
    bench = tmp_path / "bench"
    models = bench / "shared" / "alfworld-sim" / "seed-0" / "models"
    assert [len(list(models.glob(f"{kind}-*"))) for kind in ("base", "warmstart")] == [1, 1]
    assert not list(models.glob(".tmp-*")) and not (bench / "shared" / "alfworld-sim" / "seed-1").exists()
    for s in (0, 1):
        cell = bench / "cells" / "alfworld-sim" / "grpo" / f"seed-{s}"
        assert _history(cell) == [("eval", 0), ("train", 1), ("eval", 1)]
        assert "/shared/alfworld-sim/seed-0/models/warmstart-" in yaml.safe_load((cell / "config.yaml").read_text())[
            "model"]["path"]
    timings = json.loads((bench / "timings.json").read_text())
    assert set(timings["cells"]["alfworld-sim"]["grpo"]) == {"0", "1"}  # neither process dropped the other's
    assert list(timings["warmstarts"]) == ["alfworld-sim"]


@pytest.mark.slow
def test_a_cell_another_process_holds_is_skipped_in_one_line(bench_yaml, tmp_path, capsys):
    cell = tmp_path / "bench" / "cells" / "alfworld-sim" / "grpo" / "seed-0"
    cell.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(cell / ".bench.lock")], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(["bench", "--config", str(bench_yaml), "seeds=[0]"]) == 0
    finally:
        holder.kill()
        holder.wait(timeout=30)
    out = capsys.readouterr().out
    line = (f"[1/1] alfworld-sim · grpo · seed 0: in use by process {holder.pid} (another prover bench, which "
            "trains it); skipped")
    assert out.count(line) == 1 and ": training " not in out
    assert not (cell / "metrics.jsonl").exists() and not (tmp_path / "bench" / "shared").exists()
