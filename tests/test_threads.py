"""The ``threads`` setting: torch's CPU threads for a run. Unset, one for a small model unless the environment
names them (OMP_NUM_THREADS); set, as set. Applied where a warm start, a training run and `prover eval` start;
free to change on --resume and outside a bench cell's settings hash."""

from __future__ import annotations

import json

import pytest
import torch

import prover.system.threads as threads
from prover.config import TrainConfig
from prover.config_load import load_config
from prover.system.threads import SMALL_WIDTH, apply_threads, default_threads


@pytest.fixture
def torch_threads(monkeypatch):
    """No thread variables in the environment; torch's threads put back as they were afterwards."""
    for name in threads.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_unset_a_small_model_gets_one_thread_and_a_large_one_torchs_own():
    assert default_threads(None, 128, environ={}) == 1
    assert default_threads(None, SMALL_WIDTH, environ={}) == 1
    assert default_threads(None, SMALL_WIDTH + 1, environ={}) is None
    assert default_threads(None, None, environ={}) is None  # a checkpoint that does not say its width


def test_the_environment_names_the_threads_unless_the_config_does():
    assert default_threads(None, 128, environ={"OMP_NUM_THREADS": "2"}) is None
    assert default_threads(None, 128, environ={"MKL_NUM_THREADS": "4"}) is None
    assert default_threads(None, 128, environ={"OMP_NUM_THREADS": " "}) == 1  # set to nothing: unset
    assert default_threads(3, 128, environ={"OMP_NUM_THREADS": "2"}) == 3
    assert default_threads(2, 4096, environ={}) == 2


def test_apply_threads_sets_torch(torch_threads, tmp_path, monkeypatch):
    torch.set_num_threads(2)
    assert apply_threads(None, 128) == 1 == torch.get_num_threads()
    assert apply_threads(2, 128) == 2 == torch.get_num_threads()
    assert apply_threads(None, 896) == 2  # torch's as they were
    assert apply_threads(None, None) == 2  # a checkpoint that does not say its width: torch's too
    torch.set_num_threads(2)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert apply_threads(None, 128) == 2


def test_the_model_spec_reads_the_width_a_thread_default_needs(tmp_path):
    from prover.config import ModelConfig, TinyModelConfig
    from prover.learning.model_folder import TINY_POSITIONS, model_spec

    assert model_spec(ModelConfig(tiny=TinyModelConfig(hidden_size=96))).hidden_size == 96
    assert model_spec(ModelConfig()).positions == TINY_POSITIONS
    wide = tmp_path / "wide"
    wide.mkdir()
    (wide / "config.json").write_text(json.dumps({"hidden_size": 896, "max_position_embeddings": 8192}))
    spec = model_spec(ModelConfig(path=str(wide)), whole_folder=False)
    assert (spec.folder, spec.hidden_size, spec.positions, spec.tiny) == (wide, 896, 8192, False)
    (wide / "config.json").write_text(json.dumps({"text_config": {"hidden_size": 96}}))  # a multimodal one
    assert model_spec(ModelConfig(path=str(wide)), whole_folder=False).hidden_size == 96


class Applied(Exception):
    pass


@pytest.fixture
def record_threads(monkeypatch):
    """apply_threads replaced by a recorder that stops the command right there."""
    calls = []

    def record(*args):
        calls.append(args)
        raise Applied

    import prover.policy
    import prover.trainer

    monkeypatch.setattr(prover.policy, "apply_threads", record)  # the names they imported
    monkeypatch.setattr(prover.trainer, "apply_threads", record)
    monkeypatch.setattr(threads, "apply_threads", record)  # `prover eval` imports it when it runs
    return calls


def test_train_applies_the_threads_before_it_builds_anything(record_threads, tmp_path, monkeypatch):
    import prover.policy
    from prover.trainer import Trainer

    def no_policy(*args):  # the trainer's own call must come before the policy is built or loaded
        raise AssertionError("prepare_policy ran before the trainer applied the threads")

    monkeypatch.setattr(prover.policy, "prepare_policy", no_policy)
    monkeypatch.setattr(prover.policy, "starting_policy", no_policy)
    cfg = load_config(None, ["threads=2", f"run.dir={tmp_path / 'run'}"])
    with pytest.raises(Applied):
        Trainer(cfg)
    assert record_threads == [(2, 128)]


def test_train_applies_the_threads_once(tmp_path, monkeypatch):
    """The trainer sets the threads itself (a resumed run loads its checkpoint without building a policy);
    building the starting policy must not set them a second time."""
    import prover.policy
    import prover.trainer
    from prover.trainer import Trainer

    calls = []

    class Built(Exception):
        pass

    def no_base(*args):
        raise Built

    monkeypatch.setattr(prover.trainer, "apply_threads", lambda *args: calls.append(args) or 1)
    monkeypatch.setattr(prover.policy, "apply_threads", lambda *args: calls.append(args) or 1)
    monkeypatch.setattr(prover.policy, "base_policy", no_base)
    with pytest.raises(Built):
        Trainer(load_config(None, ["threads=2", f"run.dir={tmp_path / 'run'}"]))
    assert calls == [(2, 128)]


def test_the_warm_start_applies_the_threads(record_threads, tmp_path):
    import prover.policy as policy
    from prover.progress import Reporter
    from prover.rundir.run import RunDir

    cfg = load_config(None, [f"run.dir={tmp_path / 'run'}", "model.tiny.hidden_size=96"])
    with pytest.raises(Applied):
        policy.prepare_policy(cfg, RunDir(cfg), lambda: None, Reporter(quiet=True))
    assert record_threads == [(None, 96)]


def test_eval_applies_the_threads_for_the_model_it_scores(record_threads, tmp_path):
    from prover.cli import main

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"hidden_size": 64}')
    with pytest.raises(Applied):
        main(["eval", "--model", str(folder), "threads=1"])
    assert record_threads == [(1, 64)]


def test_threads_may_change_on_resume_and_do_not_change_a_bench_cells_hash(tmp_path):
    from prover.bench.matrix import settings_hash
    from prover.rundir.run import RUN_CONFIG, resume_differences

    old = TrainConfig().model_dump(mode="json")
    old.pop("threads")  # a checkpoint written before the setting existed
    (tmp_path / RUN_CONFIG).write_text(json.dumps(old))
    assert resume_differences(TrainConfig(threads=2), tmp_path) == []
    assert settings_hash(TrainConfig(threads=2)) == settings_hash(TrainConfig())
