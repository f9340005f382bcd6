"""env.gold(): the privileged reference a critic may see and the agent never does."""

from __future__ import annotations

import pytest

from prover.envs import make_env


def test_searchqa_gold_names_every_alias():
    env = make_env("searchqa-sim")
    env.reset(seed=3)
    gold = env.gold()
    for alias in env.question.answers:
        assert alias in gold


def test_webshop_gold_names_the_target():
    env = make_env("webshop-sim")
    env.reset(seed=3)
    assert env.goal.asin in env.gold() and env.goal.name in env.gold()


def test_alfworld_gold_is_a_winning_plan():
    env = make_env("alfworld-sim")
    env.reset(seed=3)
    plan = env.gold().split(": ", 1)[1].split("; ")
    for action in plan:  # the plan, played, wins
        *_, info = env.step(action)
    assert info["won"]


@pytest.mark.parametrize("name", ["alfworld-sim", "webshop-sim", "searchqa-sim"])
def test_gold_never_reaches_the_first_observation(name):
    env = make_env(name)
    obs, _ = env.reset(seed=5)
    assert env.gold() and env.gold() not in obs


def test_rollout_copies_gold_onto_trajectories(tiny_policy_dir):
    from prover.engines.hf import HFEngine
    from prover.rollout import Rollout
    from prover.types import SamplingParams

    engine = HFEngine(str(tiny_policy_dir))
    rollout = Rollout(lambda: make_env("searchqa-sim"), engine, max_turns=2, sampling=SamplingParams(4))
    batch = rollout.run([7], 2, split="train", seed=0)
    env = make_env("searchqa-sim")
    env.reset(seed=7, options={"split": "train"})
    assert [t.gold for t in batch.groups[0].trajectories] == [env.gold()] * 2
