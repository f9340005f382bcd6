"""The warm-start folder is named by what it starts from and how it trains, not by where the run lives: a
run's models/ copied to another run folder is reused there, and warmstart.lr counts by the value it trains
with."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

import prover.policy
import prover.policy.tiny
from conftest import TINY_RUN
from prover.config_load import load_config
from prover.envs import make_env
from prover.learning.model_folder import model_spec
from prover.policy import DIGESTS_FILE, folder_digest, prepare_policy, resolved_warmstart, warmstart_key
from prover.progress import Reporter
from prover.rundir.run import RunDir


def _model_folder(where: Path, weights: bytes = b"\x00\x01" * 64) -> Path:
    where.mkdir(parents=True)
    (where / "config.json").write_text('{"model_type": "qwen3"}')
    (where / "model.safetensors").write_bytes(weights)
    (where / ".gitattributes").write_text("*.safetensors lfs")  # hidden: from_pretrained never reads it
    return where


def test_the_digest_is_the_hash_of_each_files_content_by_name(tmp_path):
    folder = _model_folder(tmp_path / "m")
    lines = "".join(f"{name}\0{hashlib.sha256((folder / name).read_bytes()).hexdigest()}\n"
                    for name in ["config.json", "model.safetensors"])  # sorted by name, hidden files left out
    assert folder_digest(folder, tmp_path / "cache.json") == hashlib.sha256(lines.encode()).hexdigest()[:16]


def test_a_copy_elsewhere_has_the_same_digest_and_one_changed_byte_does_not(tmp_path):
    folder = _model_folder(tmp_path / "a" / "m")
    # copied as `cp -r` does: new mtimes
    copy = Path(shutil.copytree(folder, tmp_path / "elsewhere" / "m", copy_function=shutil.copy))
    assert folder_digest(copy, tmp_path / "c2.json") == folder_digest(folder, tmp_path / "c1.json")
    other = _model_folder(tmp_path / "b" / "m", weights=b"\x00\x02" + b"\x00\x01" * 63)  # same size
    assert folder_digest(other, tmp_path / "c3.json") != folder_digest(folder, tmp_path / "c1.json")


def test_the_cache_answers_while_every_file_keeps_its_size_and_mtime(tmp_path):
    folder, cache = _model_folder(tmp_path / "m"), tmp_path / "cache.json"
    real = folder_digest(folder, cache)
    known = json.loads(cache.read_text())
    known[str(folder.resolve())]["digest"] = "from-the-cache"
    cache.write_text(json.dumps(known))
    assert folder_digest(folder, cache) == "from-the-cache"  # not read again
    weights = folder / "model.safetensors"
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 1))  # touched: hash again
    assert folder_digest(folder, cache) == real
    cache.write_text("{not json")  # a damaged cache is only a cache miss
    assert folder_digest(folder, cache) == real


def test_warmstart_lr_counts_by_the_value_it_trains_with(tmp_path):
    def key(*extra: str) -> str:
        cfg = load_config(None, list(extra))
        model = model_spec(cfg.model, whole_folder=False)
        return warmstart_key(cfg, model, resolved_warmstart(cfg.warmstart, model), "same-base")

    # unset means 1e-3 for the tiny model and 1e-5 for a checkpoint (config.py's documented defaults)
    assert key() == key("warmstart.lr=0.001") != key("warmstart.lr=0.002")
    checkpoint = f"model.path={_model_folder(tmp_path / 'm')}"
    assert key(checkpoint) == key(checkpoint, "warmstart.lr=1e-5") != key(checkpoint, "warmstart.lr=0.001")
    assert key("seed=1") != key()  # the expert episodes and the SFT's shuffling follow the seed
    assert key("rollout.max_prompt_tokens=300") != key()  # the cloned prompts are bounded by it
    # a checkpoint's folder says nothing of the env whose expert episodes are cloned: the key must
    assert key(checkpoint, "env.name=pivot-sim") != key(checkpoint, "env.name=alfworld-sim")
    assert key(checkpoint, "env.name=pivot-sim", "env.kwargs.n_pivots=2") != key(
        checkpoint, "env.name=pivot-sim", "env.kwargs.n_pivots=3")


def _prepare(run_dir: Path) -> Path:
    small = ["warmstart.episodes=2", "model.tiny.corpus_episodes=4"]  # what is built does not matter here
    cfg = load_config(None, [*TINY_RUN, *small, f"run.dir={run_dir}"])
    envs = lambda: make_env(cfg.env.name, **cfg.env.kwargs)  # noqa: E731
    return prepare_policy(cfg, RunDir(cfg), envs, Reporter(quiet=True))


@pytest.mark.slow
def test_a_copied_models_folder_is_reused_in_a_new_run_folder(tmp_path, monkeypatch):
    first = _prepare(tmp_path / "run-a")
    assert first.name.startswith("warmstart-")
    # `cp -r runs/a/models runs/b/`: another absolute path, new mtimes
    shutil.copytree(tmp_path / "run-a" / "models", tmp_path / "elsewhere" / "run-b" / "models",
                    copy_function=shutil.copy)

    def never(*args, **kwargs):
        pytest.fail("rebuilt what the copied models/ folder holds")

    monkeypatch.setattr(prover.policy, "warm_start", never)
    monkeypatch.setattr(prover.policy, "build_tiny_policy", never)
    again = _prepare(tmp_path / "elsewhere" / "run-b")
    assert again == tmp_path / "elsewhere" / "run-b" / "models" / first.name
    assert (again.parent / DIGESTS_FILE).is_file()
