"""The dial env keeps the env contract, found by name as `prover train` finds it (the package must be
installed: `pip install -e .`)."""

from __future__ import annotations

from prover.config_load import load_config
from prover.envs import check_env, make_env
from prover.envs.checker import check_gymnasium

from prover_dial import DialEnv


def test_check_env_passes_on_the_env_found_by_name() -> None:
    env = make_env("dial")
    assert isinstance(env, DialEnv)
    # one type check, then per seed: reset, step types, determinism, snapshot-restore, state key
    assert check_env(env, seeds=tuple(range(5))) == 1 + 5 * 5
    assert check_gymnasium(env) == 1


def test_the_expert_wins_every_task_of_both_splits() -> None:
    env = DialEnv()
    for split in ("train", "test"):
        for seed in range(20):
            env.reset(seed=seed, options={"split": split})
            done = False
            while not done:
                _, reward, done, truncated, info = env.step(env.expert_action())
                assert not truncated
            assert info["won"] and reward == 1.0


def test_restore_goes_back_to_the_snapshot() -> None:
    env = DialEnv()
    env.reset(seed=3)
    env.step("turn right")
    snap = env.snapshot()
    env.step("turn right")
    env.restore(snap)
    assert env.state_key() == (env.target, 1)
    assert env.step("turn left")[0] == "The dial shows 0."


def test_the_recipe_sets_what_the_config_leaves_unset() -> None:
    assert load_config(None, ["env.name=dial"]).rollout.max_turns == 12
    assert load_config(None, ["env.name=dial", "rollout.max_turns=5"]).rollout.max_turns == 5
