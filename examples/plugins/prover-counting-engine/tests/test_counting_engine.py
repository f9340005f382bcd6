"""counting-hf, found by name, samples like the hf engine and counts what it did. Needs the package
installed (`pip install -e .`)."""

from __future__ import annotations

import pytest

from prover.config_load import load_config
from prover.envs import make_env
from prover.errors import ConfigError
from prover.policy.tiny import build_tiny_policy
from prover.registry import ENGINES
from prover.types import SamplingParams

from prover_counting_engine import CountingEngine


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    """A small untrained policy folder, built offline from alfworld-sim's text."""
    return build_tiny_policy(lambda: make_env("alfworld-sim"), tmp_path_factory.mktemp("tiny"),
                             vocab_size=300, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=32,
                             corpus_episodes=5)


def test_found_by_name_and_counts_its_work(policy) -> None:
    engine = ENGINES.get("counting-hf")(str(policy), dtype="float32", batch_size=2)
    assert isinstance(engine, CountingEngine)
    prompts = [[5, 6, 7], [8, 9]]
    gens = engine.generate(prompts, SamplingParams(max_new_tokens=4), seed=0)
    assert len(gens) == 2 and all(1 <= len(g.token_ids) <= 4 for g in gens)
    counts = engine.take_counts()
    assert counts == {"cost/engine_requests": 2.0, "cost/engine_prompt_tokens": 5.0,
                      "cost/engine_generated_tokens": float(sum(len(g.token_ids) for g in gens))}
    assert engine.take_counts()["cost/engine_requests"] == 0.0  # each call starts again from zero
    lp = engine.logprobs(prompts, [g.token_ids for g in gens])
    assert [len(x) for x in lp] == [len(g.token_ids) for g in gens]


def test_a_typo_in_engine_kwargs_fails_when_the_config_loads() -> None:
    with pytest.raises(ConfigError, match="engine.kwargs.batch_sise"):
        load_config(None, ["engine.name=counting-hf", "engine.kwargs.batch_sise=4"])
