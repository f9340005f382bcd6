"""A run is never lost to a bad start: every check that can fail runs before the run folder changes, a fresh
start moves an old run aside, one process writes a run folder at a time, and --resume reads the run's own
config however the folder is named. Real files, real processes, real signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from prover.cli import main
from prover.run import RunLock


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A tiny run that trained one step: the run a careless start must not destroy."""
    from conftest import TINY_RUN

    folder = tmp_path_factory.mktemp("safety") / "run"
    assert main(["train", *TINY_RUN, "steps=1", f"run.dir={folder}"]) == 0
    return folder


def _not_a_text_env_class():
    return dict


BAD_STARTS = {
    # id: (overrides, text of the one error line)
    "env kwargs typo": (["env.kwargs.n_layoutz=3"], "rejected its arguments"),
    "env argument": (["env.kwargs.max_steps=-1"], "max_steps=-1 must be at least 1"),
    "eval split": (["eval.split=validation"], "unknown split 'validation'"),
    "model folder is a file": (["model.path={file}"], "is a file"),
    "model folder without weights": (["model.path={empty}"], "no config.json"),
    "truncated weights": (["model.path={broken}"], "unreadable"),
    "not a TextEnv": (["env.name=collections:OrderedDict"], "not a prover.envs.TextEnv subclass"),
    "judge key unset": (["judge.name=litellm", "judge.model=openai/gpt-x", "judge.api_key_env=PROVER_TEST_UNSET_KEY"],
                        "'PROVER_TEST_UNSET_KEY'"),
    "provider key unset": (["judge.name=litellm", "judge.model=gpt-5.4-mini"], "OPENAI_API_KEY"),
}


@pytest.mark.parametrize("case", list(BAD_STARTS))
def test_a_start_that_fails_a_check_leaves_the_old_run_untouched(case, finished_run, tmp_path, capsys, monkeypatch):
    from conftest import TINY_RUN

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    (tmp_path / "weights.bin").write_text("not a folder")
    (tmp_path / "empty").mkdir()
    broken = tmp_path / "broken"  # a model folder whose weights were cut off mid-write
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    (broken / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":")
    paths = {"file": tmp_path / "weights.bin", "empty": tmp_path / "empty", "broken": broken}
    overrides, message = BAD_STARTS[case]
    overrides = [o.format(**paths) for o in overrides]
    os.environ.pop("PROVER_TEST_UNSET_KEY", None)
    before = _snapshot(finished_run)
    assert main(["train", *TINY_RUN, "steps=1", f"run.dir={finished_run}", *overrides]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("prover: error: ") and message in err[0], err
    assert _snapshot(finished_run) == before


def test_eval_of_a_folder_without_checkpoints_says_what_to_do(tmp_path, capsys):
    assert main(["eval", "--run-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "prover eval: no checkpoint" in err and "--resume" not in err and "--model" in err


def test_an_empty_run_dir_is_refused_before_the_current_folder_is_touched(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{"step": 0}\n')
    (tmp_path / "checkpoints").mkdir()
    assert main(["train", "run.dir=", "steps=1"]) == 2
    assert "run.dir is empty" in capsys.readouterr().err
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 0}\n' and (tmp_path / "checkpoints").is_dir()


def test_a_fresh_start_moves_the_old_run_aside(tmp_path, capsys):
    from conftest import TINY_RUN

    folder = tmp_path / "run"
    assert main(["train", *TINY_RUN, "steps=1", f"run.dir={folder}"]) == 0
    old = (folder / "metrics.jsonl").read_text()
    assert main(["train", *TINY_RUN, "steps=1", "seed=1", f"run.dir={folder}"]) == 0
    [aside] = tmp_path.glob("run.old-*")
    assert f"were moved to {aside}" in capsys.readouterr().out
    assert (aside / "metrics.jsonl").read_text() == old and (aside / "checkpoints" / "step-1").is_dir()
    assert yaml.safe_load((aside / "config.yaml").read_text())["seed"] == 0
    assert yaml.safe_load((folder / "config.yaml").read_text())["seed"] == 1
    assert [json.loads(ln)["step"] for ln in (folder / "metrics.jsonl").read_text().splitlines()] == [0, 1, 1]


def _train_process(folder: Path, steps: int) -> subprocess.Popen:
    from conftest import TINY_RUN

    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-m", "prover.cli", "train", *TINY_RUN, f"steps={steps}",
                             f"run.dir={folder}"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)


def _wait_for_lock(folder: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        lock = folder / ".lock"
        if lock.is_file() and lock.read_text().strip() == str(proc.pid):
            return
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.2)
    raise AssertionError("the first trainer never took the lock")


def test_one_writer_per_run_folder_and_a_killed_writers_lock_is_taken_over(tmp_path, capsys):
    from conftest import TINY_RUN

    folder = tmp_path / "run"
    first = _train_process(folder, steps=50)
    try:
        _wait_for_lock(folder, first)
        assert main(["train", *TINY_RUN, "steps=1", f"run.dir={folder}"]) == 2
        err = capsys.readouterr().err
        assert f"is in use by process {first.pid}" in err and len(err.strip().splitlines()) == 1
        first.send_signal(signal.SIGKILL)  # a killed writer leaves its PID behind, but the kernel drops its lock
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
    assert (folder / ".lock").read_text().strip() == str(first.pid)
    assert main(["train", *TINY_RUN, "steps=1", f"run.dir={folder}"]) == 0
    assert (folder / ".lock").read_text().strip() == str(os.getpid())
    lock = RunLock(folder)  # and the finished run let go of it
    lock.acquire()
    lock.release()


def test_resume_reads_the_runs_own_config_in_every_spelling(finished_run, tmp_path, capsys):
    import shutil

    for i, spelling in enumerate([["--run-dir", "{d}"], ["run.dir={d}"]]):
        run = tmp_path / f"copy-{i}"
        shutil.copytree(finished_run, run)
        argv = [a.format(d=run) for a in spelling]
        assert main(["train", "--resume", *argv, "steps=2"]) == 0, capsys.readouterr().err
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        # the run's tiny settings, not the defaults (hidden size 96, 8 x 8 groups)
        assert (cfg["model"]["tiny"]["hidden_size"], cfg["rollout"]["group_size"], cfg["steps"]) == (32, 3, 2)
        steps = [json.loads(ln)["step"] for ln in (run / "metrics.jsonl").read_text().splitlines()]
        assert steps == [0, 1, 1, 2, 2]
