"""`prover train env.name=gem` runs a couple of steps with the tiny model under grpo, gigpo and prover (with
the contrast judge, which reads the env's state_key); Sudoku has no expert, so the recipe turns the warm start off."""

from __future__ import annotations

import json

import pytest

from prover.cli import main

TINY = [
    "model.tiny.vocab_size=400", "model.tiny.hidden_size=32", "model.tiny.num_layers=2", "model.tiny.num_heads=2",
    "model.tiny.intermediate_size=64", "model.tiny.corpus_episodes=10", "warmstart.episodes=4", "warmstart.epochs=1",
    "rollout.groups_per_step=2", "rollout.group_size=3", "rollout.max_turns=4", "rollout.sampling.max_new_tokens=12",
    "eval.episodes=2", "learner.mini_batch_rows=16", "learner.micro_batch_rows=16", "steps=2",
]


@pytest.mark.slow
@pytest.mark.parametrize("credit", ["grpo", "gigpo", "prover"])
def test_prover_train_runs_on_gem(credit, tmp_path, capsys) -> None:
    run = tmp_path / "run"
    args = ["train", *TINY, "env.name=gem", "env.kwargs.game=game:Sudoku-v0-easy", f"credit.name={credit}",
            f"run.dir={run}"]
    assert main(args) == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["phase"] == "train"] == [1, 2]
