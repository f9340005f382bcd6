"""TextMaze keeps the env contract, its expert always wins, and its splits never share a maze."""

from __future__ import annotations

import random

import pytest

from prover.envs import ReplaySnapshot, TextEnv, check_env, make_env
from prover.errors import ConfigError

from prover_textmaze import TextMazeEnv
from prover_textmaze.layout import MAX_PLAN, layout_for

SPLITS = ("train", "test")


def play_expert(env: TextMazeEnv) -> tuple[bool, int]:
    """Follow ``expert_action`` to the end of the episode; return (won, steps taken)."""
    steps, done, info = 0, False, {"won": False}
    while not done:
        _, _, term, trunc, info = env.step(env.expert_action())
        steps, done = steps + 1, term or trunc
    return info["won"], steps


@pytest.mark.parametrize("name", ["textmaze", "textmaze-v0"])
def test_check_env_passes_on_the_entry_point_env(name: str) -> None:
    env = make_env(name)
    assert isinstance(env, TextMazeEnv)
    check_env(env, seeds=tuple(range(10)))


def test_uses_the_default_replay_snapshot() -> None:
    assert TextMazeEnv.snapshot is TextEnv.snapshot and TextMazeEnv.restore is TextEnv.restore
    env = TextMazeEnv()
    env.reset(seed=3, options={"split": "test"})
    env.step("look")
    assert isinstance(env.snapshot(), ReplaySnapshot)


@pytest.mark.parametrize("split", SPLITS)
def test_expert_wins_from_reset_within_the_plan_cap(split: str) -> None:
    env = TextMazeEnv()
    for seed in range(200):
        env.reset(seed=seed, options={"split": split})
        won, steps = play_expert(env)
        assert won and steps <= MAX_PLAN, (split, seed, steps)


@pytest.mark.parametrize("split", SPLITS)
def test_expert_wins_from_random_intermediate_states(split: str) -> None:
    env, rng = TextMazeEnv(max_steps=100), random.Random(split)
    for seed in range(100):
        _, info = env.reset(seed=seed, options={"split": split})
        for _ in range(rng.randrange(20)):
            action = rng.choice(info["admissible_actions"] + ["go nowhere"])
            _, _, term, _, info = env.step(action)
            if term:
                break
        if not term:
            assert play_expert(env)[0], (split, seed)


def test_expert_takes_the_key_before_the_locked_door() -> None:
    env = TextMazeEnv()
    env.reset(seed=0)
    actions = []
    while not env.done:
        actions.append(env.expert_action())
        env.step(actions[-1])
    assert actions.count("take key") == 1 and actions.index("take key") < len(actions) - 1


def test_splits_are_disjoint_and_deterministic() -> None:
    def structure(split: str, seed: int) -> tuple:
        lay = layout_for(split, seed)
        return (lay.rows, lay.cols, lay.exits, lay.start, lay.key, lay.goal)

    train = {structure("train", s) for s in range(300)}
    test = {structure("test", s) for s in range(300)}
    assert len(train) > 250 and len(test) > 250
    assert not train & test
    assert {layout_for("test", s).split for s in range(300)} == {"test"}
    a, b = TextMazeEnv(), TextMazeEnv()
    assert a.reset(seed=7, options={"split": "test"}) == b.reset(seed=7, options={"split": "test"})
    assert a.reset(seed=7)[0] != b.reset(seed=7, options={"split": "test"})[0]


def test_invalid_actions_are_no_ops_that_use_a_step() -> None:
    env = TextMazeEnv(max_steps=3)
    obs, info = env.reset(seed=1)
    key = env.state_key()
    obs, reward, term, trunc, info = env.step("dance wildly")
    assert obs.startswith("You can't do that.") and not info["is_action_valid"]
    assert env.state_key() == key and reward == 0.0 and not term and not trunc
    assert info["admissible_actions"] == sorted(info["admissible_actions"])
    env.step("look")
    _, _, term, trunc, info = env.step("go up")
    assert trunc and not term and not info["won"] and env.state_key() == key


def route(lay, source: int, target: int) -> list[str]:
    """The directions of the one path between two rooms (the maze is a tree)."""
    back = {source: None}
    queue = [source]
    for room in queue:
        for d, nxt in lay.exits[room]:
            if nxt not in back:
                back[nxt] = (room, d)
                queue.append(nxt)
    path = []
    while back[target] is not None:
        target, d = back[target]
        path.append(d)
    return path[::-1]


def test_locked_door_needs_the_key() -> None:
    env = TextMazeEnv()
    env.reset(seed=2)
    *to_door, into_goal = route(env.layout, env.layout.start, env.layout.goal)
    for d in to_door:
        assert env.step(f"go {d}")[4]["is_action_valid"]
    key = env.state_key()
    obs, _, term, _, info = env.step(f"go {into_goal}")
    assert obs.startswith("The door is locked") and not term and not info["is_action_valid"]
    assert f"go {into_goal}" not in info["admissible_actions"] and env.state_key() == key


def test_bad_split_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="split must be one of"):
        TextMazeEnv().reset(seed=0, options={"split": "val"})
