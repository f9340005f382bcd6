"""Training runs the env contract checks that nothing in training would catch, before step 1: instances
stepped in lockstep (a global RNG, shared state) and, for a method that branches, snapshots restored; once
per process per env class and settings, within a time budget."""

from __future__ import annotations

import time

import pytest
from global_rng_envs import DiceEnv

from conftest import TINY_RUN
from prover.cli import main
from prover.config_load import load_config
from prover.envs import make_env
from prover.envs.train_checks import check_for_training, check_key
from prover.errors import ContractError
from prover.rundir.preflight import preflight


class ForgetfulDiceEnv(DiceEnv):
    """Keeps its own RNGs (as ``uses_global_rng`` makes prover do), but its native snapshot forgets the score."""

    uses_global_rng = True
    native_snapshot = True

    def snapshot(self) -> tuple:
        return self.steps, self.replay_record()

    def restore(self, snapshot: tuple) -> None:
        self.steps, record = snapshot
        self.set_replay_record(record)


class SlowEnv(DiceEnv):
    uses_global_rng = True

    def _step(self, action: str) -> tuple:
        time.sleep(0.02)
        return super()._step(action)


def test_training_refuses_an_env_on_the_global_rng_before_touching_the_run_folder(tmp_path, capsys):
    run = tmp_path / "run"
    rc = main(["train", *TINY_RUN, "steps=1", "credit.name=grpo", "env.name=global_rng_envs:DiceEnv",
               f"run.dir={run}"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert "env 'global_rng_envs:DiceEnv' fails a contract check before training: check_env [global-rng]" in err
    assert "env.isolate_global_rng: true" in err and "prover check-env global_rng_envs:DiceEnv" in err
    assert not run.exists()


def test_the_same_env_isolated_passes_the_checks(tmp_path):
    cfg = load_config(None, ["credit.name=grpo", "env.name=global_rng_envs:DiceEnv", "env.isolate_global_rng=true",
                             f"run.dir={tmp_path / 'run'}"])
    preflight(cfg)


def test_a_snapshot_that_restores_another_state_is_refused_only_for_a_method_that_branches(tmp_path):
    name = "env.name=test_train_env_checks:ForgetfulDiceEnv"
    preflight(load_config(None, ["credit.name=grpo", name, f"run.dir={tmp_path / 'run'}"]))
    with pytest.raises(ContractError, match=r"check_env \[snapshot-restore\]: attribute 'score' is"):
        preflight(load_config(None, ["credit.name=tree-grpo", name, f"run.dir={tmp_path / 'run'}"]))


def test_a_pass_is_kept_per_class_and_settings():
    made = []

    def make(**kwargs):
        made.append(kwargs)
        return make_env("test_train_env_checks:ForgetfulDiceEnv", **kwargs)

    key = check_key(ForgetfulDiceEnv, {"max_steps": 5}, False, False)
    assert check_for_training("forgetful", lambda: make(max_steps=5), key, False, 8)
    assert not check_for_training("forgetful", lambda: make(max_steps=5), key, False, 8)
    assert len(made) == 2  # the two instances of the first call; the second made none
    other = check_key(ForgetfulDiceEnv, {"max_steps": 6}, False, False)
    assert other != key and check_for_training("forgetful", lambda: make(max_steps=6), other, False, 8)
    assert check_key(ForgetfulDiceEnv, {"max_steps": 5}, False, True) != key  # branching checks more


def test_a_slow_env_ends_the_checks_at_the_budget():
    start = time.monotonic()
    key = check_key(SlowEnv, {}, False, True)
    slow = lambda: make_env("test_train_env_checks:SlowEnv")  # noqa: E731
    assert not check_for_training("slow", slow, key, True, 30, budget_s=0.1)
    assert time.monotonic() - start < 1.0
    assert check_for_training("slow", slow, key, True, 8, budget_s=30)  # not kept as passed before
