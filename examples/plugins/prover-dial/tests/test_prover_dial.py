"""The dial env keeps the env contract, found by name as `prover train` finds it (the package must be
installed: `pip install -e .`). Every test reads only the contract (actions from `admissible_actions` or the
expert, the class's own `train_recipe`), so they still hold once your env replaces the example's."""

from __future__ import annotations

import pytest

from prover.config_load import load_config
from prover.envs import check_env, make_env
from prover.envs.checker import check_gymnasium

from prover_dial import DialEnv


def an_action(env: DialEnv, info: dict) -> str:
    """A legal action from here: the first admissible one, else the expert's."""
    action = (info.get("admissible_actions") or [None])[0] or env.expert_action()
    if action is None:
        pytest.skip("the env lists no admissible actions and has no expert")
    return action


def test_check_env_passes_on_the_env_found_by_name() -> None:
    env = make_env("dial")
    assert isinstance(env, DialEnv)
    assert check_env(env, seeds=tuple(range(5))) > 0  # a broken rule raises, naming it
    assert check_gymnasium(env) == 1


def test_the_expert_wins_every_task_of_both_splits() -> None:
    env = DialEnv()
    for split in ("train", "test"):
        for seed in range(20):
            env.reset(seed=seed, options={"split": split})
            if env.expert_action() is None:
                pytest.skip("the env has no expert (the warm start needs one)")
            done = truncated = False
            while not (done or truncated):
                _, _, done, truncated, info = env.step(env.expert_action())
            assert info["won"] and not truncated, f"the expert lost task {seed} of {split}"


def test_restore_goes_back_to_the_snapshot() -> None:
    env = DialEnv()
    for seed in range(10):  # a task whose first action leaves the episode running
        _, info = env.reset(seed=seed)
        _, _, done, truncated, info = env.step(an_action(env, info))
        if not (done or truncated):
            break
    else:
        pytest.skip("every episode ended at its first action")
    snap, key, action = env.snapshot(), env.state_key(), an_action(env, info)
    first = env.step(action)
    env.restore(snap)
    assert env.state_key() == key
    assert env.step(action)[:4] == first[:4]


def test_the_recipe_sets_what_the_config_leaves_unset() -> None:
    for key, value in DialEnv.train_recipe.items():
        section, field = key.rsplit(".", 1)
        loaded = load_config(None, ["env.name=dial"])
        for part in section.split("."):
            loaded = getattr(loaded, part)
        assert getattr(loaded, field) == value, key
