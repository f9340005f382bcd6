"""A run is never lost to a bad start: every check that can fail runs before the run folder changes, a fresh
start moves an old run aside, one process writes a run folder at a time, and --resume reads the run's own
config however the folder is named. Real files, real processes, real signals."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from prover.cli import main
from prover.rundir.run import RunLock


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
    # a bad setting of each plugin kind, checked when the config loads (prover/plugin_config.py)
    "env kwargs typo": (["env.kwargs.n_layoutz=3"], ("unknown config field 'env.kwargs.n_layoutz' for env "
                                                     "'alfworld-sim'")),
    "engine kwargs typo": (["engine.kwargs.batch_sise=4"], ("unknown config field 'engine.kwargs.batch_sise' for "
                                                           "engine 'hf'")),
    "credit setting": (["credit.name=grpo", "credit.norm=median"], "config field 'credit.norm' of credit 'grpo'"),
    "judge setting": (["judge.name=contrast", "judge.align=smell"], "config field 'judge.align' of judge 'contrast'"),
    "env argument": (["env.kwargs.max_steps=-1"], "max_steps=-1 must be at least 1"),
    "eval split": (["eval.split=validation"], "unknown split 'validation'"),
    "model folder is a file": (["model.path={file}"], "is a file"),
    "model folder without weights": (["model.path={empty}"], "no config.json"),
    "truncated weights": (["model.path={broken}"], "unreadable"),
    "not a TextEnv": (["env.name=collections:OrderedDict"], "not a prover.envs.TextEnv subclass"),
    "judge key unset": (["judge.name=litellm", "judge.model=openai/gpt-x", "judge.api_key_env=PROVER_TEST_UNSET_KEY"],
                        "'PROVER_TEST_UNSET_KEY'"),
    "provider key unset": (["judge.name=litellm", "judge.model=gpt-5.4-mini"], "OPENAI_API_KEY"),
    "judge server down": (["judge.name=litellm", "judge.model=openai/x", "judge.api_base=http://127.0.0.1:9/v1"],
                          "no server answers at http://127.0.0.1:9/v1"),
    "grpo at G=1": (["credit.name=grpo", "rollout.group_size=1"], "gives it no signal"),
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


@pytest.mark.slow
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


@pytest.mark.slow
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


# -- faulty envs and non-finite numbers ---------------------------------------------------------------------

from prover.envs.alfworld_sim.env import AlfworldSimEnv  # noqa: E402


class NaNRewardEnv(AlfworldSimEnv):
    """alfworld-sim whose third step of every episode pays a NaN reward."""

    def step(self, action):
        obs, reward, term, trunc, info = super().step(action)
        self._steps_seen = getattr(self, "_steps_seen", 0) + 1
        return obs, (float("nan") if self._steps_seen % 3 == 0 else reward), term, trunc, info

    def reset(self, *args, **kwargs):
        self._steps_seen = 0
        return super().reset(*args, **kwargs)


class RaisingEnv(AlfworldSimEnv):
    """alfworld-sim whose second step raises, and whose reset of task seed 13 answers info=None."""

    def step(self, action):
        self._steps_seen = getattr(self, "_steps_seen", 0) + 1
        if self._steps_seen == 2:
            raise RuntimeError("the simulator lost its socket\nsecond line")
        return super().step(action)

    def reset(self, *args, seed=None, **kwargs):
        self._steps_seen = 0
        obs, info = super().reset(*args, seed=seed, **kwargs)
        return (obs, None) if seed == 13 else (obs, info)


def _groups(folder: Path) -> list[dict]:
    return [json.loads(ln) for ln in (folder / "groups.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_an_env_that_raises_or_pays_nan_ends_its_episodes_as_failed_env_errors(tmp_path):
    from conftest import TINY_RUN
    from prover.config_load import load_config
    from prover.engines.hf import HFEngine
    from prover.envs import make_env
    from prover.rollout import Rollout
    from prover.types import SamplingParams

    folder = tmp_path / "run"
    argv = [*TINY_RUN, "steps=1", f"run.dir={folder}", f"env.name={__name__}:NaNRewardEnv", "credit.name=grpo",
            "rollout.max_env_error_share=1.0", "run.save_groups=2", "warmstart.enabled=false"]
    assert main(["train", *argv]) == 0
    [train] = [json.loads(ln) for ln in (folder / "metrics.jsonl").read_text().splitlines() if '"train"' in ln]
    episodes = 2 * 3  # groups_per_step x group_size of TINY_RUN
    assert 0 < train["rollout/env_errors"] <= episodes and all(v == v for v in train.values() if isinstance(v, float))
    errors = [t["env_error"] for g in _groups(folder) for t in g["trajectories"] if t["env_error"]]
    assert errors and all(e == "reward is nan" for e in errors)

    # a raising step and a reset without info, through the rollout itself
    cfg = load_config(None, [*TINY_RUN, f"run.dir={folder}"])
    engine = HFEngine(sorted((folder / "models").glob("base-*"))[0])
    rollout = Rollout(lambda: make_env(f"{__name__}:RaisingEnv"), engine, max_turns=cfg.rollout.max_turns,
                      sampling=SamplingParams(max_new_tokens=8, temperature=1.0))
    batch = rollout.run([12, 13], group_size=2, seed=1)
    by_task = {g.task_id: g.trajectories for g in batch.groups}
    assert all(t.env_error == "info is NoneType, not a dict" and not t.turns for t in by_task["train/13"])
    for t in by_task["train/12"]:  # the episodes that got to step 2 ended there, failed, with the first line kept
        assert len(t.turns) <= 2 and not t.won
        assert t.env_error == ("RuntimeError: the simulator lost its socket" if len(t.turns) == 2 else "")


def test_too_many_env_faults_in_a_step_stop_the_run_with_one_line(tmp_path, capsys, tiny_policy_dir):
    from conftest import TINY_RUN

    argv = [*TINY_RUN, "steps=2", f"run.dir={tmp_path / 'run'}", f"env.name={__name__}:RaisingEnv",
            f"model.path={tiny_policy_dir}", "credit.name=grpo", "rollout.max_env_error_share=0.1",
            "warmstart.enabled=false", "rollout.max_turns=3"]
    assert main(["train", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "failed in" in err[0] and "RuntimeError: the simulator lost its socket" in err[0]


class NaNCredit:
    """A credit method whose every advantage is NaN (a broken plugin)."""

    from prover.credit.grpo import GRPO as _GRPO

    class Method(_GRPO):
        def assign(self, batch, ctx):
            adv = super().assign(batch, ctx)
            for g in adv.values:
                for tr in g:
                    for a in tr:
                        a[:] = float("nan")
            return adv


@pytest.mark.slow
def test_non_finite_advantages_never_reach_the_weights_and_stop_the_run(tmp_path, capsys):
    import torch
    from safetensors.torch import load_file

    from conftest import TINY_RUN

    folder = tmp_path / "run"
    argv = [*TINY_RUN, "steps=5", f"run.dir={folder}", f"credit.name={__name__}:NaNCredit.Method",
            "learner.max_nonfinite_steps=2", "learner.skip_zero_advantage_rows=false"]
    assert main(["train", *argv]) == 2
    err = capsys.readouterr()
    assert "2 steps in a row met non-finite" in err.err and len(err.err.strip().splitlines()) == 1
    assert "step 1: non-finite numbers" in err.out
    train = [json.loads(ln) for ln in (folder / "metrics.jsonl").read_text().splitlines() if '"train"' in ln]
    assert [r["step"] for r in train] == [1] and train[0]["learner/nonfinite_rows"] == train[0]["learner/rows"] + \
        train[0]["learner/nonfinite_rows"] > 0  # every row dropped, none trained
    start = load_file(sorted((folder / "models").glob("warmstart-*"))[0] / "model.safetensors")
    saved = load_file(folder / "checkpoints" / "step-1" / "model.safetensors")
    assert all(torch.isfinite(v).all() for v in saved.values())
    assert all(torch.equal(start[k], saved[k]) for k in start)  # nothing was learned from NaN


# -- resume after a torn file or a damaged checkpoint ------------------------------------------------------

@pytest.mark.slow
def test_resume_survives_a_torn_groups_file_and_falls_back_from_a_damaged_checkpoint(tmp_path, capsys):
    from conftest import TINY_RUN

    folder = tmp_path / "run"
    assert main(["train", *TINY_RUN, "steps=2", "run.save_groups=1", f"run.dir={folder}"]) == 0
    assert sorted(p.name for p in (folder / "checkpoints").iterdir()) == ["step-1", "step-2"]
    manifest = json.loads((folder / "checkpoints" / "step-2" / "manifest.json").read_text())
    weights = folder / "checkpoints" / "step-2" / "model.safetensors"
    assert manifest["model.safetensors"]["bytes"] == weights.stat().st_size
    # a full disk mid-step: groups.jsonl ends in half a record, and step 2's weights were cut short
    with (folder / "groups.jsonl").open("a") as f:
        f.write('{"step": 3, "group": 0, "traj')
    weights.write_bytes(weights.read_bytes()[:1000])
    assert main(["train", "--resume", "--run-dir", str(folder), "steps=3"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "checkpoint step-2 is damaged (model.safetensors has 1000 bytes, its manifest says" in out
    assert "resuming from step-1 instead" in out
    steps = [(r["phase"], r["step"]) for r in map(json.loads, (folder / "metrics.jsonl").read_text().splitlines())]
    assert steps == [("eval", 0), ("train", 1), ("train", 2), ("train", 3), ("eval", 3)]
    groups = [json.loads(ln)["step"] for ln in (folder / "groups.jsonl").read_text().splitlines()]
    assert groups == [1, 2, 3]


@pytest.mark.slow
def test_no_intact_checkpoint_is_one_line_naming_each_damage(tmp_path, capsys):
    from conftest import TINY_RUN

    folder = tmp_path / "run"
    assert main(["train", *TINY_RUN, "steps=1", f"run.dir={folder}"]) == 0
    (folder / "checkpoints" / "step-1" / "optimizer.safetensors").unlink()
    assert main(["train", "--resume", "--run-dir", str(folder), "steps=2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no intact checkpoint" in err[0] and "optimizer.safetensors is missing" in err[0]


# -- OS errors are one line naming the path -------------------------------------------------------------------

@pytest.fixture
def mounted(tmp_path):
    """mount(options) -> a fresh tmpfs folder mounted with ``options`` (e.g. "ro", "size=2m"); unmounted after.
    Root ignores file modes, so a read-only or full file system is the real way to refuse root a write."""
    mounts = []

    def mount(options: str) -> Path:
        point = tmp_path / f"mnt{len(mounts)}"
        point.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
        mounts.append(point)
        return point

    yield mount
    for point in mounts:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("prover: error: ") and "Traceback" not in err[0], err
    return err[0]


@pytest.mark.slow
def test_run_folders_that_cannot_be_written_are_one_line(tmp_path, mounted, capsys):
    (tmp_path / "afile").write_text("x")
    assert main(["train", f"run.dir={tmp_path / 'afile'}", "steps=1"]) == 2
    assert "is a file, not a folder" in _one_line(capsys)
    assert main(["train", f"run.dir={tmp_path / 'afile' / 'run'}", "steps=1"]) == 2
    assert "is a file" in _one_line(capsys)
    ro = mounted("ro,size=1m")
    assert main(["train", f"run.dir={ro / 'run'}", "steps=1"]) == 2
    assert f"is under the read-only folder '{ro}'" in _one_line(capsys)
    assert main(["train", f"run.dir={ro}", "steps=1"]) == 2
    assert "is read-only" in _one_line(capsys)
    # the evaluation cache, checked alike before the run folder is made
    run = tmp_path / "not-made"
    assert main(["train", f"run.dir={run}", f"eval.cache_dir={ro / 'evals'}", "steps=1"]) == 2
    assert f"eval.cache_dir '{ro / 'evals'}' is under the read-only folder '{ro}'" in _one_line(capsys)
    assert main(["train", f"run.dir={run}", f"eval.cache_dir={tmp_path / 'afile'}", "steps=1"]) == 2
    assert "eval.cache_dir" in _one_line(capsys) and not run.exists()


def test_view_into_a_read_only_folder_and_a_non_utf8_config_are_one_line(finished_run, tmp_path, mounted, capsys):
    ro = mounted("ro,size=1m")
    assert main(["view", str(finished_run), "--out", str(ro / "report.html")]) == 2
    line = _one_line(capsys)
    assert "Read-only file system" in line and str(ro / "report.html") in line
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"steps: 2\nseed: \xff\xfe\n")
    assert main(["train", "--config", str(bad)]) == 2
    assert "is not UTF-8 text" in _one_line(capsys)


@pytest.mark.slow
def test_a_full_disk_during_a_checkpoint_is_one_line_and_the_last_checkpoint_stays(tmp_path, mounted, capsys):
    from conftest import TINY_RUN

    disk = mounted("size=24m")
    folder = disk / "run"
    assert main(["train", *TINY_RUN, "steps=1", f"run.dir={folder}"]) == 0
    capsys.readouterr()
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    (disk / "filler").write_bytes(b"\0" * max(free - 200_000, 0))  # room for metrics, not for a checkpoint
    assert main(["train", "--resume", "--run-dir", str(folder), "steps=2"]) == 2
    line = _one_line(capsys)
    assert "could not write the checkpoint of step 2" in line and "the last checkpoint is intact" in line
    (disk / "filler").unlink()
    from prover.rundir.checkpoint_state import checkpoint_problem

    assert checkpoint_problem(folder / "checkpoints" / "step-1", verify_hashes=True) == ""
    assert not (folder / "checkpoints" / "step-2").exists()


class BadTemplateEnv(AlfworldSimEnv):
    """alfworld-sim whose prompt template names a placeholder the renderer does not fill."""

    def __init__(self, **kwargs):
        import dataclasses

        super().__init__(**kwargs)
        self.agent_spec = dataclasses.replace(self.agent_spec, first_template="Task: {task} Goal: {goal}")


def test_a_model_without_a_chat_template_and_a_bad_prompt_template_fail_before_the_folder(
        finished_run, tiny_policy_dir, tmp_path, capsys):
    from conftest import TINY_RUN

    model = tmp_path / "no-template"
    shutil.copytree(tiny_policy_dir, model)
    for name in ("tokenizer_config.json", "chat_template.jinja", "chat_template.json"):
        path = model / name
        if path.suffix == ".json" and path.is_file() and name == "tokenizer_config.json":
            cfg = json.loads(path.read_text())
            cfg.pop("chat_template", None)
            path.write_text(json.dumps(cfg))
        elif path.is_file():
            path.unlink()
    before = _snapshot(finished_run)
    assert main(["train", *TINY_RUN, "steps=1", f"run.dir={finished_run}", f"model.path={model}"]) == 2
    assert "has no chat template" in _one_line(capsys)
    assert main(["train", *TINY_RUN, "steps=1", f"run.dir={finished_run}", f"env.name={__name__}:BadTemplateEnv"]) == 2
    assert "unknown placeholder 'goal'" in _one_line(capsys)
    assert _snapshot(finished_run) == before
