"""SIGTERM stops a run as Ctrl-C does (one line, exit 143, the last checkpoint intact, a half-written one
cleaned at the next start); every spelling of an empty run folder is refused; a folder in use says so
before anything else. Real processes, real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from prover.cli import main
from prover.rundir.checkpoint_state import checkpoint_problem
from prover.rundir.run import RunDir

STOPPED = "prover: stopped by SIGTERM; the last checkpoint is intact (resume with --resume)"


def _train(folder: Path, *extra: str) -> subprocess.Popen:
    from conftest import TINY_RUN

    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-m", "prover.cli", "train", *TINY_RUN, f"run.dir={folder}", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _wait_for(proc: subprocess.Popen, text: str, limit_s: float = 240) -> None:
    end = time.monotonic() + limit_s
    for line in proc.stdout:
        if text in line:
            return
        if time.monotonic() > end:
            break
    proc.kill()
    pytest.fail(f"the run never printed {text!r}")


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["warm start:", "eval at step 0", "step 1/"],
                         ids=["warm-start", "first-rollout", "training"])
def test_sigterm_in_each_phase_is_one_line_143_and_the_run_resumes(tmp_path, phase):
    folder = tmp_path / "run"
    proc = _train(folder, "steps=400")
    _wait_for(proc, phase)
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("SIGTERM did not stop the run within 120 s")
    assert proc.returncode == 143 and err.strip().splitlines() == [STOPPED], err
    assert not (folder / ".lock").exists() or _lock_is_free(folder)
    ckpts = sorted((folder / "checkpoints").glob("step-*")) if (folder / "checkpoints").is_dir() else []
    assert all(checkpoint_problem(c, verify_hashes=True) == "" for c in ckpts)
    if ckpts:  # a run that reached a checkpoint resumes from it
        last = int(ckpts[-1].name.split("-")[1])
        done = subprocess.run([sys.executable, "-m", "prover.cli", "train", "--resume", "--run-dir", str(folder),
                               f"steps={last + 1}"], capture_output=True, text=True, timeout=300,
                              env=dict(os.environ, PYTHONWARNINGS="ignore"))
        assert done.returncode == 0, done.stderr
        assert not list((folder / "checkpoints").glob(".tmp-step-*"))


def _lock_is_free(folder: Path) -> bool:
    import fcntl

    fd = os.open(folder / ".lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


@pytest.mark.slow
def test_sigterm_while_a_checkpoint_is_written_keeps_the_last_one_and_the_next_start_cleans_up(
        tmp_path, monkeypatch, capsys):
    from conftest import TINY_RUN

    folder = tmp_path / "run"
    assert main(["train", *TINY_RUN, "steps=1", f"run.dir={folder}"]) == 0
    written = RunDir._write_checkpoint

    def write_then_terminated(self, tmp, step, learner, weights):
        learner.save_pretrained(tmp, weights)  # the weights are on disk, the state and manifest are not
        os.kill(os.getpid(), signal.SIGTERM)
        written(self, tmp, step, learner, weights)

    monkeypatch.setattr(RunDir, "_write_checkpoint", write_then_terminated)
    capsys.readouterr()
    assert main(["train", "--resume", "--run-dir", str(folder), "steps=2"]) == 143
    assert capsys.readouterr().err.strip().splitlines() == [STOPPED]
    assert (folder / "checkpoints" / ".tmp-step-2").is_dir() and not (folder / "checkpoints" / "step-2").exists()
    assert checkpoint_problem(folder / "checkpoints" / "step-1", verify_hashes=True) == ""
    monkeypatch.setattr(RunDir, "_write_checkpoint", written)
    assert main(["train", "--resume", "--run-dir", str(folder), "steps=2"]) == 0
    assert sorted(p.name for p in (folder / "checkpoints").iterdir()) == ["step-1", "step-2"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # main() put the handler back


EMPTY_RUN_FOLDERS = {
    "train --run-dir=": ["train", "--run-dir=", "steps=1"],
    "train --run-dir ''": ["train", "--run-dir", "", "steps=1"],
    "train --run-dir ' '": ["train", "--run-dir", " ", "steps=1"],
    "train run.dir=": ["train", "run.dir=", "steps=1"],
    "resume --run-dir=": ["train", "--resume", "--run-dir="],
    "resume run.dir=": ["train", "--resume", "run.dir="],
    "eval --run-dir=": ["eval", "--run-dir="],
    "sft --run-dir=": ["sft", "--run-dir="],
    "view ''": ["view", ""],
}


@pytest.mark.parametrize("case", list(EMPTY_RUN_FOLDERS))
def test_every_spelling_of_an_empty_run_folder_is_refused_and_the_current_folder_is_untouched(
        case, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "phase": "eval"}\n')
    assert main(EMPTY_RUN_FOLDERS[case]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "empty" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]  # no runs/default, no report


def test_resume_on_a_folder_in_use_names_the_holder_before_anything_else(tmp_path, capsys):
    folder = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                               "from prover.rundir.run import RunLock; RunLock(Path(sys.argv[1])).acquire(); "
                               "print('held', flush=True); time.sleep(60)", str(folder)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(["train", "--resume", "--run-dir", str(folder)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"is in use by process {holder.pid}" in err[0] and "no checkpoint" not in err[0]
        assert sorted(p.name for p in folder.iterdir()) == [".lock"]
    finally:
        holder.kill()
        holder.wait()


@pytest.fixture(scope="module")
def one_step_run(tmp_path_factory):
    from conftest import TINY_RUN

    folder = tmp_path_factory.mktemp("resume-config") / "run"
    assert main(["train", *TINY_RUN, "steps=1", f"run.dir={folder}"]) == 0
    return folder


CHANGED_RESUMES = {
    # id: (overrides on --resume, an edit of config.yaml or None, the field the one line must name)
    "credit": (["credit.name=grpo"], None, "credit.name: 'prover' -> 'grpo'"),
    "seed": (["seed=7"], None, "seed: 0 -> 7"),
    "env": (["env.name=pivot-sim"], None, "env.name: 'alfworld-sim' -> 'pivot-sim'"),
    "edited config.yaml": ([], ("group_size: 3", "group_size: 5"), "rollout.group_size: 3 -> 5"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CHANGED_RESUMES))
def test_a_resume_that_changes_the_experiment_is_refused_naming_the_fields(case, one_step_run, tmp_path, capsys):
    import shutil

    run = Path(shutil.copytree(one_step_run, tmp_path / "run"))
    overrides, edit, field = CHANGED_RESUMES[case]
    if edit:
        text = (run / "config.yaml").read_text()
        assert edit[0] in text
        (run / "config.yaml").write_text(text.replace(edit[0], edit[1]))
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    assert main(["train", "--resume", "--run-dir", str(run), "steps=2", *overrides]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--resume: the config differs from the run that wrote step-1" in err[0], err
    assert field in err[0] and "steps" not in err[0].split("(")[1].split(")")[0]  # steps may change
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before  # config.yaml kept


@pytest.mark.slow
def test_a_resume_may_change_the_documented_safe_fields(one_step_run, tmp_path, capsys):
    import shutil

    run = Path(shutil.copytree(one_step_run, tmp_path / "run"))
    assert main(["train", "--resume", "--run-dir", str(run), "steps=2", "eval.episodes=2", "run.save_groups=0",
                 "run.keep_checkpoints=3"]) == 0, capsys.readouterr().err
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-1", "step-2"]
