"""Asynchronous rollouts survive ``kill -9``: `prover train` with rollout.max_off_policy_steps=1 is killed
(SIGKILL to its process group) after step 3 is logged, whose checkpoint is never written (one every 2 steps),
then resumed with ``--resume`` from step 2's checkpoint.

What must hold: metrics.jsonl holds every train step 1..N exactly once; no row was sampled by a version from
the future or more than k behind; the rows after the resume follow the rule of prover/episodes/async_rollout.py from
the checkpoint's step t0 (the batch the killed worker sampled ahead was never saved, so it is sampled again
by version t0); and the worker of the killed trainer leaves by itself (its pipe's EOF), orphaned by no one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # it runs `prover train` twice, each with a rollout worker process

K, STEPS = 1, 5


def _rule(step: int, k: int, start: int) -> int:
    """The version that samples step ``step``'s rows in a run (re)started at step ``start``."""
    return max(start, step - 1 - k)


def _history(run_dir: Path, torn_ok: bool = False) -> list[dict]:
    """metrics.jsonl's rows; with ``torn_ok`` a line cut short (being written, or by the kill) is left out."""
    path = run_dir / "metrics.jsonl"
    rows = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if not torn_ok:
                raise
    return rows


def _workers(pid: int) -> list[int]:
    """The rollout workers whose parent is ``pid`` (Linux /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == pid and b"worker_main" in cmdline:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"  # a zombie has exited; its parent (init, after the kill) reaps it


def _checkpointed(run_dir: Path) -> list[int]:
    """Steps with a whole checkpoint (state.json is written last)."""
    return sorted(int(p.parent.name.split("-")[1]) for p in (run_dir / "checkpoints").glob("step-*/state.json"))


def test_async_run_killed_with_sigkill_resumes_with_each_step_once(tiny_run_overrides, tmp_path):
    run_dir = tmp_path / "run"
    log = (tmp_path / "killed.log").open("w")
    args = [sys.executable, "-m", "prover.cli", "train", *tiny_run_overrides, f"steps={STEPS}",
            f"rollout.max_off_policy_steps={K}", "run.checkpoint_every=2", "run.keep_checkpoints=5"]
    # its own process group, so the kill takes the trainer and anything in its group at once
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    workers: list[int] = []
    try:
        deadline = time.time() + 400
        # step 3 logged, not checkpointed: the resume must drop its row and run it again; step 4 is sampled ahead
        while not any(r["phase"] == "train" and r["step"] == 3 for r in _history(run_dir, torn_ok=True)):
            workers = workers or _workers(proc.pid)
            if proc.poll() is not None or time.time() > deadline:
                pytest.fail(f"the run ended or stalled before it was killed:\n{(tmp_path / 'killed.log').read_text()}")
            time.sleep(0.05)
        workers = workers or _workers(proc.pid)
        os.killpg(proc.pid, signal.SIGKILL)  # the worker runs in its own session: it must notice and leave
        proc.wait()
        assert workers, "the async run started no rollout worker"
        deadline = time.time() + 120
        while any(map(_alive, workers)) and time.time() < deadline:
            time.sleep(0.2)
        assert not any(map(_alive, workers)), "the rollout worker outlived its killed trainer"
    finally:
        for pid in workers:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
    before = _history(run_dir, torn_ok=True)
    t0 = _checkpointed(run_dir)[-1]  # the checkpoint --resume starts from (each on disk is whole)
    assert t0 == 2, f"killed too late (checkpoint of step {t0}): raise the kill's polling rate"

    resumed = subprocess.run([sys.executable, "-m", "prover.cli", "train", "--resume", "--run-dir", str(run_dir)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=400)
    assert resumed.returncode == 0, resumed.stdout

    hist = _history(run_dir)
    train = [r for r in hist if r["phase"] == "train"]
    assert [r["step"] for r in train] == list(range(1, STEPS + 1)), "a step lost or repeated"
    assert [(r["phase"], r["step"]) for r in hist if r["phase"] == "eval"] == [("eval", 0), ("eval", STEPS)]
    assert train[:t0] == [r for r in before if r["phase"] == "train"][:t0]  # the steps before the kill, untouched
    for r in train:
        version, lag = r["rollout/policy_version"], r["rollout/policy_lag"]
        assert version <= r["step"] - 1, f"step {r['step']} sampled by version {version}, from the future"
        assert 0 <= lag <= K and lag == r["step"] - 1 - version, r
    # after the resume: the rule from t0, so step t0+1's batch was sampled again by version t0, not kept
    assert [r["rollout/policy_version"] for r in train[t0:]] == [_rule(s, K, t0) for s in range(t0 + 1, STEPS + 1)]
