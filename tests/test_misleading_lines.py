"""Lines that must not mislead: symlinked run folders act on their target and a broken link is
one line with nothing moved; a plugin that exits or hangs while imported is one honest line; a step stopped by
env faults leaves the groups.jsonl its line points to; a full disk names the folder and how to go on."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import TINY_RUN
from prover.cli import main
from prover.config_load import load_config
from prover.errors import RunFolderError
from prover.rundir.run import RunDir


def _old_run(folder: Path) -> None:
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "metrics.jsonl").write_text('{"step": 1}\n')


def test_a_fresh_start_through_a_symlink_moves_the_old_run_beside_the_target(tmp_path):
    target, link = tmp_path / "disk" / "real", tmp_path / "links" / "run"
    _old_run(target)
    link.parent.mkdir()
    link.symlink_to(target)
    moved = RunDir(load_config(None, [f"run.dir={link}"])).start(fresh=True)
    assert moved is not None and moved.parent == target.parent and moved.name.startswith("real.old-")
    assert (moved / "metrics.jsonl").is_file() and link.is_symlink() and (target / "config.yaml").is_file()
    assert sorted(p.name for p in link.parent.iterdir()) == ["run"]


@pytest.mark.parametrize("kind", ["dangling", "loop"])
def test_a_broken_symlink_run_folder_is_one_line_and_nothing_is_made_or_moved(kind, tmp_path, capsys):
    link = tmp_path / "run"
    if kind == "dangling":
        link.symlink_to(tmp_path / "gone")
    else:
        link.symlink_to(tmp_path / "run2")
        (tmp_path / "run2").symlink_to(link)
    before = sorted(p.name for p in tmp_path.iterdir())
    rc = main(["train", *TINY_RUN, f"run.dir={link}"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    want = "which does not exist" if kind == "dangling" else "is a symlink loop"
    assert err.startswith(f"prover: error: run folder {str(link)!r} is ") and want in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    with pytest.raises(RunFolderError):
        RunDir(load_config(None, [f"run.dir={link}"]))


def _plugin(tmp_path: Path, body: str) -> dict[str, str]:
    (tmp_path / "odd_plugin.py").write_text(body)
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
                OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")


def test_a_plugin_that_exits_while_imported_is_one_line_naming_it(tmp_path):
    env = _plugin(tmp_path, "import sys\nsys.exit(7)\n")
    done = subprocess.run([sys.executable, "-m", "prover.cli", "train", "env.name=odd_plugin:Env",
                           f"run.dir={tmp_path / 'run'}"], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "'odd_plugin:Env'" in done.stderr and "called sys.exit(7)" in done.stderr
    assert not (tmp_path / "run").exists()


def test_sigterm_while_a_plugin_hangs_at_import_says_no_run_folder_was_written(tmp_path):
    marker = tmp_path / "importing"
    env = _plugin(tmp_path, f"import pathlib, time\npathlib.Path({str(marker)!r}).touch()\ntime.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-m", "prover.cli", "train", "env.name=odd_plugin:Env",
                             f"run.dir={tmp_path / 'run'}"], stderr=subprocess.PIPE, text=True, env=env)
    try:
        end = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < end:
            time.sleep(0.1)
        assert marker.exists(), "the plugin was never imported"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 143
    assert err.strip().splitlines() == ["prover: stopped by SIGTERM before any run folder was written; "
                                        "nothing to resume"], err
    assert not (tmp_path / "run").exists()


def test_a_full_disk_names_the_run_folder_and_how_to_go_on(tmp_path, capsys, monkeypatch):
    from prover.rollout import Rollout

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")  # a write to an open file names no path
    monkeypatch.setattr(Rollout, "run", full)
    run = tmp_path / "run"
    rc = main(["train", *TINY_RUN, f"run.dir={run}", "warmstart.enabled=false", "steps=1"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    assert err == (f"prover: error: No space left on device (writing in {str(run)!r}); free some space, then "
                   "continue with --resume (the last checkpoint is intact)\n")


@pytest.mark.slow
def test_a_step_stopped_by_env_faults_leaves_the_groups_its_line_points_to(tmp_path, capsys):
    run = tmp_path / "run"  # about every other task holds a lone surrogate: past the default 25% share
    rc = main(["train", *TINY_RUN, f"run.dir={run}", "env.name=odd_text_envs:SurrogateTaskEnv", "steps=2"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "see groups.jsonl" in err, err
    groups = [json.loads(line) for line in (run / "groups.jsonl").read_text().splitlines()]
    assert groups and groups[-1]["step"] == 1
    assert any("not valid Unicode" in t["env_error"] for t in groups[-1]["trajectories"])
