"""alfworld-sim against the real engine: the same generated games, step by step, must read the same.

Each episode resets ``alfworld-sim`` and the real-engine env with the same seed (so the same world and
goal phrasing), sends both the same commands, and compares the observation, the sorted admissible
list, the reward, ``won`` and the end of the episode at every step. The real engine is the reference:
a difference is a bug in ``prover/envs/alfworld_sim``. Expert episodes follow the sim's observing
expert to the win; random episodes mix admissible commands with inadmissible and malformed ones.

Games are generated under both rule sets: ALFWorld's (the default, whose tables come from the
``alfworld`` package and its shipped games) and v1's (``alfworld-sim-v1``); the real env's ``rules``
argument draws its worlds under the same set. ALFWorld-rule games are picked where receptacles share a location, so that
every one of them exercises the part of the rules v1 lacks.
"""

from __future__ import annotations

import random

import pytest

from prover.envs.alfworld_sim import TASK_TYPES, AlfworldSimEnv
from prover.envs.alfworld_sim.engine import is_open
from prover.envs.alfworld_sim.env import SCENES
from prover.envs.alfworld_sim.world import generate

from prover_alfworld import AlfworldEnv

NOISE = ("jump", "take apple 9 from fridge 1", "go to moon 1", "examine", "  LOOK  ")


def real_env(task_type: str, max_steps: int, scene: str, rules: str) -> AlfworldEnv:
    # Both engines match a command as ALFWorld does by default (ends stripped, then exact), so the noise
    # "  LOOK  " is "Nothing happens." on both.
    return AlfworldEnv(task_types=(task_type,), max_steps=max_steps, scene=scene, rules=rules)


def play_both(task_type: str, seed: int, pick, max_steps: int = 50, split: str = "train",
              rules: str = "alfworld", scene: str = "small") -> list[str]:
    """Play one episode on both engines; return the actions taken. Asserts agreement at every step."""
    sim = AlfworldSimEnv(task_types=(task_type,), max_steps=max_steps, scene=scene, rules=rules)
    real = real_env(task_type, max_steps, scene, rules)
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
        where = (rules, task_type, seed, len(actions), action)
        assert out_s[0] == out_r[0], where  # feedback text
        assert out_s[1:4] == out_r[1:4], where  # reward, terminated, truncated
        info_s, info_r = out_s[4], out_r[4]
        for key in ("admissible_actions", "won", "is_action_valid"):
            assert info_s[key] == info_r[key], (*where, key)
        done = out_s[2] or out_s[3]
    return actions


def shared_seed(task_type: str, split: str = "train") -> int:
    """The first seed whose small ALFWorld-rule room has receptacles sharing a location."""
    recs, distractors = SCENES["small"]
    for seed in range(2000):
        world = generate(split, seed, 0, (task_type,), recs, distractors)  # the phrasing does not matter
        if len(world.at) < len(world.receptacles):
            return seed
    raise AssertionError(f"no {task_type} room with a shared location in 2000 seeds")


def random_pick(task_type: str):
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

    return pick


def expert(sim, _) -> str:
    return sim.expert_action()


@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_alfworld_rule_games_agree_and_the_expert_wins(task_type: str) -> None:
    seed = shared_seed(task_type)
    for s, split in ((seed, "train"), (1, "test")):
        actions = play_both(task_type, s, expert, split=split)
        assert 0 < len(actions) < 50, (task_type, s, actions)  # the expert won before the cap
    play_both(task_type, seed, random_pick(task_type), max_steps=30)


@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_v1_games_agree_and_the_expert_wins(task_type: str) -> None:
    actions = play_both(task_type, 0, expert, rules="v1")
    assert 0 < len(actions) < 50, (task_type, actions)
    play_both(task_type, 2, random_pick(task_type), max_steps=30, rules="v1")


def test_a_full_size_kitchen_agrees() -> None:
    """An ALFWorld-sized kitchen (26 receptacles, some sharing a place, butter knives on a countertop,
    an apple in the closed microwave, lettuce in the closed fridge): fetch a knife, carry it to the
    closed receptacles that hold food (slicing needs no open door), slice what the game offers, and
    wander."""
    rng, wander = random.Random(0), random_pick("full")

    def toward(sim, admissible: list[str], places: set) -> str | None:
        moves = [f"go to {r}" for r in sorted(places - {None}) if f"go to {r}" in admissible]
        return rng.choice(moves) if moves and rng.random() < 0.6 else None

    def pick(sim, admissible: list[str]) -> str:
        world, state = sim.world, sim.state
        slices = [a for a in admissible if a.startswith("slice ")]
        if slices and rng.random() < 0.5:
            return rng.choice(slices)
        knives = {o for o in world.objects if world.kind[o] in ("knife", "butterknife")}
        if state.holding is None:
            takes = [a for a in admissible if a.split(" from ")[0][5:] in knives]
            if takes and rng.random() < 0.8:
                return rng.choice(takes)
            move = toward(sim, admissible, {state.where[k] for k in knives})
        elif state.holding in knives:
            food = {state.where[o] for o in world.objects if "s" in world.rules.props[world.kind[o]]}
            move = toward(sim, admissible, {r for r in food - {None} if not is_open(world, state, r)})
        else:
            move = None
        return move or wander(sim, admissible)

    actions = play_both("pick_cool_then_place_in_recep", 2, pick, max_steps=40, scene="full")
    assert any(a.startswith("slice ") for a in actions)
