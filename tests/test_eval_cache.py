"""eval.cache_dir: the starting policy's evaluation is read, not sampled again, by a run from the same policy
and settings; training after the read is the same as after a sampled evaluation; anything that decides the
evaluation (the weights, the seed, the env, the sampling) keys a new one; a torn entry is sampled again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import prover.trainer
from conftest import TINY_RUN
from prover.config_load import load_config
from prover.rundir.eval_cache import EvalCache, eval_key
from prover.trainer import Trainer

pytestmark = pytest.mark.slow  # each test trains tiny runs

TIME = ("time/", "engine/seconds")  # wall clocks differ between runs, nothing else may
ENV_COUNTS = "env/"  # an evaluation read from the cache makes no env instances (prover/envs/pool.py)


def _train(tmp: Path, name: str, *extra: str) -> list[dict]:
    run = tmp / name
    Trainer(load_config(None, [*TINY_RUN, "steps=2", f"run.dir={run}", f"eval.cache_dir={tmp / 'evals'}",
                                "warmstart.enabled=false", *extra])).train()
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _no_clocks(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith((*TIME, ENV_COUNTS)) and k != "eval/cached"} for r in rows]


def _count_evaluations(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = prover.trainer.evaluate_policy

    def counted(cfg, rollout, step=0, *args, **kwargs):
        calls.append(step)
        return real(cfg, rollout, step, *args, **kwargs)

    monkeypatch.setattr(prover.trainer, "evaluate_policy", counted)
    return calls


def test_a_second_run_reads_the_step0_evaluation_and_trains_exactly_as_the_first(tmp_path, monkeypatch):
    calls = _count_evaluations(monkeypatch)
    first = _train(tmp_path, "a")
    assert calls == [0, 2]
    assert len(list((tmp_path / "evals").glob("eval-*.json"))) == 1
    calls.clear()
    second = _train(tmp_path, "b")
    assert calls == [2], "the step-0 evaluation was sampled again"
    assert second[0]["eval/cached"] == 1.0 and "eval/cached" not in first[0]
    # the read leaves training where a sampled evaluation leaves it: the same draws, step for step
    assert _no_clocks(second) == _no_clocks(first)
    # another credit method from the same policy reads it too: nothing of it runs before step 0
    calls.clear()
    _train(tmp_path, "c", "credit.name=grpo")
    assert calls == [2]


@pytest.mark.parametrize("change", ["seed=1", "rollout.sampling.max_new_tokens=10", "eval.temperature=0.5",
                                    "env.kwargs.scene=full"])
def test_a_setting_that_decides_the_evaluation_keys_a_new_one(tmp_path, monkeypatch, change):
    _train(tmp_path, "a", "steps=0")
    calls = _count_evaluations(monkeypatch)
    _train(tmp_path, "b", "steps=0", change)
    assert calls == [0]
    assert len(list((tmp_path / "evals").glob("eval-*.json"))) == 2


def test_settings_that_do_not_reach_the_evaluation_share_its_key(tmp_path):
    base = [*TINY_RUN, f"eval.cache_dir={tmp_path}"]
    policy = tmp_path / "policy"
    policy.mkdir()
    (policy / "config.json").write_text("{}")
    keys = {eval_key(load_config(None, [*base, *extra]), policy, tmp_path / "digests.json")
            for extra in ([], ["credit.name=gigpo"], ["learner.lr=0.5"], ["steps=30", "eval.every=5"],
                          ["rollout.group_size=7", "rollout.groups_per_step=9"], [f"run.dir={tmp_path}/x"])}
    assert len(keys) == 1
    # the same weights under settings that reach the evaluation: each its own key
    for extra in (["seed=3"], ["env.kwargs.scene=full"], ["eval.episodes=5"], ["eval.split=train"],
                  ["rollout.max_turns=5"], ["engine.kwargs.batch_size=2"], ["model.dtype=bfloat16"]):
        assert eval_key(load_config(None, [*base, *extra]), policy, tmp_path / "digests.json") not in keys, extra
    (policy / "config.json").write_text("{ }")  # another policy: another key
    assert eval_key(load_config(None, base), policy, tmp_path / "digests.json") not in keys


def test_new_weights_and_torn_entries_are_sampled_again(tmp_path, monkeypatch):
    _train(tmp_path, "a", "steps=0")
    [entry] = (tmp_path / "evals").glob("eval-*.json")
    entry.write_text('{"eval/success": 0.5')  # a kill mid-write of another writer's file
    calls = _count_evaluations(monkeypatch)
    _train(tmp_path, "b", "steps=0")
    assert calls == [0]
    assert isinstance(json.loads(entry.read_text())["eval/success"], float)  # overwritten whole
    # a run that starts from another policy (its own warm start) does not read the untrained one's
    calls.clear()
    _train(tmp_path, "c", "steps=0", "warmstart.enabled=true")
    assert calls == [0]


def test_only_a_fresh_single_process_start_is_kept(tmp_path):
    cfg = load_config(None, [*TINY_RUN, f"eval.cache_dir={tmp_path}"])
    assert EvalCache.of(cfg, tmp_path, world=2) is None
    assert EvalCache.of(cfg, None, world=1) is None  # a resumed run: its policy is a checkpoint's
    assert EvalCache.of(load_config(None, TINY_RUN), tmp_path, world=1) is None


def test_a_cache_that_cannot_be_written_costs_a_note_not_the_run(tmp_path, monkeypatch, capsys):
    import prover.rundir.eval_cache

    def full(path, text):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(prover.rundir.eval_cache, "write_atomic", full)
    rows = _train(tmp_path, "a", "steps=0")
    assert rows[0]["phase"] == "eval" and "eval/cached" not in rows[0]
    assert "eval.cache_dir: the evaluation was not kept" in capsys.readouterr().out
    assert not list((tmp_path / "evals").glob("eval-*.json"))

