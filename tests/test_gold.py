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


def first_view(obs: str, info: dict) -> str:
    """What the agent's first prompt is built from: the observation, the task text and the admissible
    actions (``Rollout`` renders exactly these)."""
    return "\n".join([obs, str(info.get("task", "")), *(info.get("admissible_actions") or [])])


def leaked(items, view: str) -> list[str]:
    """The items of ``items`` that ``view`` contains, compared without case."""
    return [item for item in items if item.lower() in view.lower()]


def searchqa_leaks(env, seed: int, split: str) -> list[str]:
    """The gold aliases the first view shows. A comparison question names both candidates, so there the
    question text itself is not searched, only everything else the agent sees."""
    obs, info = env.reset(seed=seed, options={"split": split})
    question = env.question
    view = first_view(obs, info)
    if question.kind == "comparison":
        view = view.replace(question.text, "")
    return leaked(question.answers, view)


def webshop_leaks(env, seed: int, split: str) -> list[str]:
    """The target's product code (asin) and title, if the first view shows either."""
    obs, info = env.reset(seed=seed, options={"split": split})
    return leaked([env.goal.asin, env.goal.name], first_view(obs, info))


SEEDS = [(s, split) for split in ("train", "test") for s in range(12)]


@pytest.mark.parametrize("name", ["alfworld-sim", "webshop-sim", "searchqa-sim"])
def test_gold_never_reaches_the_first_observation(name):
    env = make_env(name)
    obs, info = env.reset(seed=5)
    assert env.gold() and env.gold() not in first_view(obs, info)


def test_no_searchqa_alias_reaches_the_first_observation():
    env = make_env("searchqa-sim")
    kinds = set()
    for seed, split in SEEDS:
        assert not searchqa_leaks(env, seed, split), (seed, split, env.question)
        kinds.add(env.question.kind)
        assert all(alias in env.gold() for alias in env.question.answers)  # each alias is a gold item
    assert kinds == {"single", "bridge", "comparison"}  # every kind of question was checked


def test_no_webshop_product_code_reaches_the_first_observation():
    env = make_env("webshop-sim")
    for seed, split in SEEDS:
        assert not webshop_leaks(env, seed, split), (seed, split, env.goal.asin)
        assert env.goal.asin in env.gold() and env.goal.name in env.gold()


def test_a_leak_of_one_bare_alias_or_code_is_caught(monkeypatch):
    """The checks above see a single alias or code, not only the whole prefixed gold string."""
    from prover.envs.searchqa_sim.env import SearchqaSimEnv
    from prover.envs.webshop_sim.env import WebshopSimEnv

    for cls, pick, leaks in [(SearchqaSimEnv, lambda env: env.question.answers[-1], searchqa_leaks),
                             (WebshopSimEnv, lambda env: env.goal.asin, webshop_leaks)]:
        honest = cls._reset

        def leaky(self, seed, options, honest=honest, pick=pick):
            obs, info = honest(self, seed, options)
            return f"{obs} ({pick(self)})", info

        with monkeypatch.context() as m:
            m.setattr(cls, "_reset", leaky)
            env = cls()
            assert all(leaks(env, seed, split) for seed, split in SEEDS)


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
