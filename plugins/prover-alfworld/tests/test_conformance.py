"""alfworld-sim against the real engine: the same generated games, step by step, must read the same.

Each episode resets ``alfworld-sim`` and the real-engine env with the same seed (so the same world and
goal phrasing), sends both the same commands, and compares the observation, the sorted admissible
list, the reward, ``won`` and the end of the episode at every step. The real engine is the reference:
a difference is a bug in ``prover/envs/alfworld_sim``. Expert episodes follow the sim's observing
expert to the win; random episodes mix admissible commands with inadmissible and malformed ones.
"""

from __future__ import annotations

import random

import pytest

from prover.envs.alfworld_sim import TASK_TYPES, AlfworldSimEnv
from prover_alfworld import AlfworldEnv

NOISE = ("jump", "take apple 9 from fridge 1", "go to moon 1", "examine", "  LOOK  ")


def play_both(task_type: str, seed: int, pick, max_steps: int = 50, split: str = "train") -> list[str]:
    """Play one episode on both engines; return the actions taken. Asserts agreement at every step."""
    sim, real = AlfworldSimEnv(task_types=(task_type,), max_steps=max_steps), \
        AlfworldEnv(task_types=(task_type,), max_steps=max_steps)
    obs_s, info_s = sim.reset(seed=seed, options={"split": split})
    obs_r, info_r = real.reset(seed=seed, options={"split": split})
    assert obs_s == obs_r, (task_type, seed, "reset")
    assert info_s["admissible_actions"] == info_r["admissible_actions"], (task_type, seed, "reset")
    assert info_s["task"] == info_r["task"] and info_s["task_id"] == info_r["task_id"]
    actions, done = [], False
    while not done:
        action = pick(sim, info_s["admissible_actions"])
        actions.append(action)
        out_s, out_r = sim.step(action), real.step(action)
        where = (task_type, seed, len(actions), action)
        assert out_s[0] == out_r[0], where  # feedback text
        assert out_s[1:4] == out_r[1:4], where  # reward, terminated, truncated
        info_s, info_r = out_s[4], out_r[4]
        for key in ("admissible_actions", "won", "is_action_valid"):
            assert info_s[key] == info_r[key], (*where, key)
        done = out_s[2] or out_s[3]
    return actions


@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_expert_episodes_agree_and_win(task_type: str) -> None:
    for seed, split in ((0, "train"), (1, "test")):
        actions = play_both(task_type, seed, lambda sim, _: sim.expert_action(), split=split)
        assert 0 < len(actions) < 50, (task_type, seed, actions)  # the expert won before the cap


@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_random_episodes_agree(task_type: str) -> None:
    rng = random.Random(task_type)
    opening = iter(["look", "inventory", "help", "jump"])  # the middle of the room has text of its own

    def pick(sim, admissible: list[str]) -> str:
        first = next(opening, None)
        if first:
            return first
        roll = rng.random()
        if roll < 0.1:
            return rng.choice(NOISE)
        if roll < 0.4:  # lean on the expert now and then, so that episodes reach the later stages
            return sim.expert_action() or "look"
        return rng.choice(admissible)

    play_both(task_type, seed=2, pick=pick, max_steps=30)
