"""alfworld-sim: the env contract, ALFWorld's exact text and rules, the expert, splits and prompts."""

from __future__ import annotations

import random
import re
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prover.envs import check_env, make_env
from prover.envs.alfworld_sim import TASK_TYPES, AlfworldSimEnv
from prover.envs.alfworld_sim.engine import NOTHING, State, choices, feedback, transition, welcome, won
from prover.envs.alfworld_sim.expert import plan
from prover.envs.alfworld_sim.rules import RULES
from prover.envs.alfworld_sim.world import GOALS, World, room_split
from prover.errors import ConfigError, NameNotFound

KITCHEN = ("cabinet 1", "cabinet 2", "countertop 1", "diningtable 1", "fridge 1", "microwave 1",
           "sinkbasin 1")
INERT = ("examine", "look", "inventory", "help")


def make_world(task_type: str, start: dict[str, str], receptacles=KITCHEN, obj="apple",
               recep: str | None = "diningtable", toggle: str | None = None,
               goal: str = "a hand-built goal", rules=RULES["alfworld"], sites=None) -> World:
    return World(task_id=f"test/{task_type}/seed-0", task_type=task_type, goal=goal, obj_type=obj,
                 recep_type=recep, toggle_type=toggle, scene="kitchen", receptacles=receptacles, start=start,
                 rules=rules, sites=sites or {})


class Game:
    """A hand-built world played through the engine, one command text at a time."""

    def __init__(self, world: World, grammar: str = "move") -> None:
        self.world, self.grammar, self.state = world, grammar, State.initial(world)

    def admissible(self) -> list[str]:
        return sorted(choices(self.world, self.state, self.grammar))

    def __call__(self, text: str) -> str:
        cmd = choices(self.world, self.state, self.grammar)[text]  # KeyError: not admissible
        transition(self.state, cmd)
        return feedback(self.world, self.state, cmd, self.grammar)

    @property
    def won(self) -> bool:
        return won(self.world, self.state)


def kitchen_game(grammar: str = "move", task_type: str = "pick_cool_then_place_in_recep") -> Game:
    start = {"apple 1": "countertop 1", "knife 1": "countertop 1", "mug 2": "countertop 1",
             "cup 3": "fridge 1", "egg 2": "fridge 1", "potato 2": "fridge 1", "apple 2": "cabinet 1"}
    goal = "put a cool apple in diningtable"
    return Game(make_world(task_type, start, goal=goal), grammar)


# -- the contract ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs", [{}, {"grammar": "put", "prompt": "verl-agent"}, {"scene": "full"},
                                    {"rules": "v1"}])
def test_check_env(kwargs):
    check_env(make_env("alfworld-sim", **kwargs))


def test_registered_names_and_bad_arguments():
    assert isinstance(make_env("alfworld-sim-v1"), AlfworldSimEnv)
    with pytest.raises(NameNotFound, match="alfworld-sim-v1"):  # v0's dynamics are retired
        make_env("alfworld-sim-v0")
    for bad in ({"task_types": ["pick_and_place"]}, {"grammar": "drop"}, {"prompt": "x"}, {"scene": "huge"},
                {"n_receptacles": (5, 2)}, {"max_steps": 0}):
        with pytest.raises(ConfigError):
            AlfworldSimEnv(**bad)
    with pytest.raises(ConfigError):
        AlfworldSimEnv().reset(seed=0, options={"split": "valid"})


def test_info_reward_and_termination():
    env = AlfworldSimEnv()
    obs, info = env.reset(seed=3, options={"split": "test"})
    assert info["won"] is False and info["is_action_valid"] is True
    assert info["task_type"] in info["task_id"] and info["task_id"].startswith("test/")
    assert obs.endswith("Your task is to: " + info["task"])
    rewards = []
    while not info["won"]:
        obs, reward, terminated, truncated, info = env.step(env.expert_action())
        rewards.append(reward)
        assert terminated == info["won"] and not truncated
    assert rewards == [0.0] * (len(rewards) - 1) + [1.0]
    assert env.expert_action() is None


def test_truncation_at_max_steps():
    env = AlfworldSimEnv(max_steps=3)
    env.reset(seed=0)
    outs = [env.step("look") for _ in range(3)]
    assert [o[3] for o in outs] == [False, False, True] and not any(o[2] for o in outs)


def test_invalid_commands_change_nothing():
    env = AlfworldSimEnv()
    _, info = env.reset(seed=7)
    world = env.world
    obj = world.objects[0]
    for action in ("do a barrel roll", "", f"close {world.receptacles[0]}",
                   f"take {obj} from {world.start[obj]}", f"examine {obj}", "go to sofa 9"):
        key, admissible = env.state_key(), info["admissible_actions"]
        obs, reward, terminated, _truncated, info = env.step(action)
        assert (obs, reward, terminated, info["is_action_valid"]) == (NOTHING, 0.0, False, False)
        assert env.state_key() == key and info["admissible_actions"] == admissible
    # the ends are stripped, as TextWorld's PddlEnv.step does; case and inner spaces are not free
    # (tests/test_alfworld_rules.py, test_commands_match_exactly_unless_normalisation_is_asked_for)
    obs, *_, info = env.step("  " + info["admissible_actions"][0] + " ")
    assert info["is_action_valid"] and obs != NOTHING


# -- ALFWorld's text ------------------------------------------------------------------------------
def test_exact_feedback_strings():
    game = kitchen_game()
    room = ("You are in the middle of a room. Looking quickly around you, you see a cabinet 2, a cabinet 1, "
            "a countertop 1, a diningtable 1, a fridge 1, a microwave 1, and a sinkbasin 1.")
    assert welcome(game.world, game.state) == (
        f"-= Welcome to TextWorld, ALFRED! =-\n\n{room}\n\nYour task is to: put a cool apple in diningtable.")
    # Later looks list the receptacles at the agent's location: none in the middle of the room.
    assert game("look") == "You are in the middle of a room. Looking quickly around you, you see nothing."
    assert game("inventory") == "You are not carrying anything."
    assert game("go to countertop 1") == (
        "You arrive at countertop 1. On the countertop 1, you see a apple 1, a knife 1, and a mug 2.")
    assert game("look") == "You are facing the countertop 1. Next to it, you see nothing."
    assert "examine knife 1" not in game.admissible()  # the real engine examines only what is held
    assert game("examine countertop 1") == "On the countertop 1, you see a apple 1, a knife 1, and a mug 2."
    assert game("take apple 1 from countertop 1") == "You pick up the apple 1 from the countertop 1."
    assert game("inventory") == "You are carrying: a apple 1."
    assert game("go to fridge 1") == "You arrive at fridge 1. The fridge 1 is closed."
    assert game("cool apple 1 with fridge 1") == "You cool the apple 1 using the fridge 1."
    assert game("examine apple 1") == "This is a cold apple 1."
    assert game("open fridge 1") == (
        "You open the fridge 1. The fridge 1 is open. In it, you see a cup 3, a egg 2, and a potato 2.")
    assert game("close fridge 1") == "You close the fridge 1."
    assert game("go to diningtable 1") == (
        "You arrive at diningtable 1. On the diningtable 1, you see nothing.")
    assert not game.won
    assert game("move apple 1 to diningtable 1") == "You move the apple 1 to the diningtable 1."
    assert game.won
    assert game("go to cabinet 2") == "You arrive at cabinet 2. The cabinet 2 is closed."
    assert game("open cabinet 2") == "You open the cabinet 2. The cabinet 2 is open. In it, you see nothing."
    assert game("help").startswith("Available commands:\n  look:")


def test_put_grammar():
    game = kitchen_game("put")
    game("go to countertop 1")
    game("take apple 1 from countertop 1")
    game("go to diningtable 1")
    assert "put apple 1 in/on diningtable 1" in game.admissible()
    assert not any(a.startswith("move ") for a in game.admissible())
    assert game("put apple 1 in/on diningtable 1") == "You put the apple 1 in/on the diningtable 1."
    assert "put (object) in/on (receptacle):" in game("help")


def test_admissible_list_matches_the_real_game():
    # The list ALFWorld's own engine printed for this situation (environments.md §1.3).
    game = Game(make_world("pick_cool_then_place_in_recep", {"apple 1": "countertop 1"},
                           receptacles=("countertop 1", "diningtable 1", "fridge 1")))
    game("go to countertop 1")
    game("take apple 1 from countertop 1")
    game("go to fridge 1")
    assert game.admissible() == ["cool apple 1 with fridge 1", "examine apple 1", "examine fridge 1",
                                 "go to countertop 1", "go to diningtable 1", "help", "inventory", "look",
                                 "open fridge 1"]


def test_processing_needs_the_right_appliance_and_updates_flags():
    game = kitchen_game()
    game("go to countertop 1")
    game("take apple 1 from countertop 1")
    game("go to fridge 1")
    assert not any(a.startswith(("heat", "clean")) for a in game.admissible())
    game("go to microwave 1")  # closed, and heating still works
    assert [a for a in game.admissible() if a.startswith(("heat", "cool", "clean"))] == [
        "heat apple 1 with microwave 1"]
    assert game("heat apple 1 with microwave 1") == "You heat the apple 1 using the microwave 1."
    game("go to sinkbasin 1")
    assert game("clean apple 1 with sinkbasin 1") == "You clean the apple 1 using the sinkbasin 1."
    assert game("examine apple 1") == "This is a hot and clean apple 1."
    game("go to fridge 1")
    game("cool apple 1 with fridge 1")
    assert game("examine apple 1") == "This is a cool and clean apple 1."  # cooling cleared hot
    game("go to countertop 1")
    game("move apple 1 to countertop 1")
    game("take knife 1 from countertop 1")
    game("go to microwave 1")
    assert not any(a.startswith("heat") for a in game.admissible())  # knives are not heatable


def test_closed_receptacles_hide_contents_and_hands_hold_one_object():
    game = kitchen_game()
    game("go to fridge 1")
    assert not any("egg 2" in a for a in game.admissible())
    game("open fridge 1")
    assert "take egg 2 from fridge 1" in game.admissible()
    game("take egg 2 from fridge 1")
    assert not any(a.startswith("take ") for a in game.admissible())
    game("go to countertop 1")
    assert not any(a.startswith("take ") for a in game.admissible())


def test_light_task():
    start = {"book 1": "bed 1", "cd 1": "sidetable 1", "desklamp 1": "desk 1"}
    world = make_world("look_at_obj_in_light", start, receptacles=("bed 1", "desk 1", "sidetable 1"),
                       obj="book", recep=None, toggle="desklamp")
    game = Game(world)
    assert game("go to desk 1") == "You arrive at desk 1. On the desk 1, you see a desklamp 1."
    assert "take desklamp 1 from desk 1" not in game.admissible()  # lamps stay put
    assert "examine desklamp 1" not in game.admissible()  # only held objects can be examined
    assert game("use desklamp 1") == "You turn on the desklamp 1."
    assert not game.won  # nothing in hand
    game("go to sidetable 1")
    game("take cd 1 from sidetable 1")
    game("go to desk 1")
    assert not game.won  # wrong object
    game("move cd 1 to desk 1")
    game("go to bed 1")
    game("take book 1 from bed 1")
    assert not game.won  # the lamp is elsewhere
    game("go to desk 1")
    assert game.won
    assert plan(world, State.initial(world)) == [
        "go to bed 1", "take book 1 from bed 1", "go to desk 1", "use desklamp 1"]


def test_any_instance_wins_and_pick_two_needs_one_receptacle():
    game = kitchen_game(task_type="pick_and_place_simple")
    game("go to cabinet 1")
    game("open cabinet 1")
    game("take apple 2 from cabinet 1")
    game("go to diningtable 1")
    game("move apple 2 to diningtable 1")
    assert game.won
    start = {"apple 1": "countertop 1", "apple 2": "countertop 2", "apple 3": "fridge 1"}
    world = make_world("pick_two_obj_and_place", start, recep="countertop",
                       receptacles=("countertop 1", "countertop 2", "fridge 1"))
    assert not won(world, State.initial(world))  # one apple in each countertop is not two in one
    game = Game(world)
    game("go to countertop 2")
    game("take apple 2 from countertop 2")
    game("go to countertop 1")
    game("move apple 2 to countertop 1")
    assert game.won


def test_goal_templates_are_used_both_ways():
    for task in TASK_TYPES:
        env = AlfworldSimEnv(task_types=[task])
        word = r"\w+"
        patterns = [re.compile(t.format(obj=word, recep=word, toggle=word) + r"\.") for t in GOALS[task]]
        used = set()
        for seed in range(30):
            _, info = env.reset(seed=seed)
            used |= {i for i, p in enumerate(patterns) if p.fullmatch(info["task"])}
            assert any(p.fullmatch(info["task"]) for p in patterns), info["task"]
        assert used == {0, 1}


@pytest.mark.parametrize("grammar", ["move", "put"])
def test_admissible_lists_are_sorted_and_in_grammar(grammar):
    env, rng = AlfworldSimEnv(grammar=grammar), random.Random(0)
    for seed in range(40):
        _, info = env.reset(seed=seed)
        for _ in range(25):
            acts = info["admissible_actions"]
            assert acts == sorted(set(acts)) and {"look", "inventory", "help"} <= set(acts)
            place = [a for a in acts if a.startswith(("move ", "put "))]
            if grammar == "move":
                assert all(re.fullmatch(r"move \w+ \d+ to \w+ \d+", a) for a in place)
            else:
                assert all(re.fullmatch(r"put \w+ \d+ in/on \w+ \d+", a) for a in place)
            _, _, term, trunc, info = env.step(rng.choice(acts))
            if term or trunc:
                break


def test_train_and_test_rooms_are_disjoint():
    env = AlfworldSimEnv()
    rooms = {}
    for split in ("train", "test"):
        rooms[split] = set()
        for seed in range(300):
            env.reset(seed=seed, options={"split": split})
            assert room_split(env.world.room()) == split and env.world.task_id.startswith(split)
            rooms[split].add(env.world.room())
    assert not rooms["train"] & rooms["test"] and len(rooms["test"]) > 50


# -- the expert -----------------------------------------------------------------------------------
def play_expert(env: AlfworldSimEnv, oracle: bool = True) -> int:
    """Follow the oracle (or the observing expert) to the end; return the number of steps it took."""
    info, steps = {"won": False}, 0
    while not info["won"]:
        action = env.expert_plan()[0] if oracle else env.expert_action()
        _, _, _terminated, truncated, info = env.step(action)
        steps += 1
        assert info["is_action_valid"] and not truncated
    return steps


@pytest.mark.parametrize("grammar", ["move", "put"])
@pytest.mark.parametrize("split", ["train", "test"])
def test_expert_wins_every_task_type(grammar, split):
    env, seen = AlfworldSimEnv(grammar=grammar), set()
    for seed in range(200):
        _, info = env.reset(seed=seed, options={"split": split})
        planned = len(env.expert_plan())
        assert play_expert(env) == planned <= 15
        env.reset(seed=seed, options={"split": split})
        assert planned <= play_expert(env, oracle=False) <= planned + 2 * len(env.world.receptacles)
        seen.add(info["task_type"])
    assert seen == set(TASK_TYPES)


def test_observing_expert_searches_before_it_takes():
    """Before it has seen a goal object, the warm start's expert searches the receptacles that can
    hold one, in the room's listed order, opening closed ones; it never walks to an unseen object."""
    env = AlfworldSimEnv()
    for seed in range(100):
        env.reset(seed=seed)
        world = env.world
        homes = world.rules.homes
        wanted = homes[world.obj_type] | (homes[world.toggle_type] if world.toggle_type else frozenset())
        candidates = [r for r in world.receptacles if world.kind[r] in wanted]
        assert env.expert_action() == "go to " + candidates[0]
        env.step(env.expert_action())
        if world.kind[candidates[0]] in world.rules.openable:
            assert env.expert_action() == "open " + candidates[0]
        info = {"won": False}
        while not info["won"]:
            action = env.expert_action()
            if action.startswith("take "):
                _obj, rec = action[5:].split(" from ")
                assert rec in env.inspected, (seed, action)
            *_, info = env.step(action)


def test_expert_wins_in_full_size_rooms():
    env = AlfworldSimEnv(scene="full")
    for seed in range(30):
        env.reset(seed=seed)
        assert len(env.world.receptacles) >= 15
        play_expert(env)


def shortest(world: World, state: State) -> int:
    """Breadth-first search over every state-changing command: the true optimum."""
    frontier, seen = deque([(state, 0)]), {state.key()}
    while frontier:
        node, depth = frontier.popleft()
        for cmd in choices(world, node, "move").values():
            if cmd[0] in INERT:
                continue
            nxt = node.copy()
            transition(nxt, cmd)
            if won(world, nxt):
                return depth + 1
            if nxt.key() not in seen:
                seen.add(nxt.key())
                frontier.append((nxt, depth + 1))
    raise AssertionError("unsolvable")


def test_expert_is_shortest_from_random_states():
    rng, checked = random.Random(1), 0
    for task in TASK_TYPES:
        env = AlfworldSimEnv(task_types=[task], n_receptacles=(4, 6), n_distractors=(1, 3))
        for seed in range(25):
            _, info = env.reset(seed=seed)
            for _ in range(rng.randint(0, 25)):  # wander: wrong objects in hand, things opened or heated
                _, _, term, _, info = env.step(rng.choice(info["admissible_actions"]))
                if term:
                    break
            if env.won:
                continue
            assert len(env.expert_plan()) == shortest(env.world, env.state), (task, seed)
            assert play_expert(env) <= env.max_steps
            checked += 1
    assert checked > 100


def shared_seeds(env: AlfworldSimEnv, n: int) -> list[int]:
    """The first ``n`` seeds whose room has receptacles that share a location."""
    found = []
    for seed in range(3000):
        env.reset(seed=seed)
        if len(env.world.at) < len(env.world.receptacles):
            found.append(seed)
            if len(found) == n:
                break
    return found


def test_expert_is_shortest_where_receptacles_share_a_location():
    rng, checked = random.Random(2), 0
    for task in TASK_TYPES:
        env = AlfworldSimEnv(task_types=[task], n_receptacles=(5, 7))
        for seed in shared_seeds(env, 6):
            _, info = env.reset(seed=seed)
            for _ in range(rng.randint(0, 15)):
                _, _, term, _, info = env.step(rng.choice(info["admissible_actions"]))
                if term:
                    break
            if not env.won:
                assert len(env.expert_plan()) == shortest(env.world, env.state), (task, seed)
                checked += 1
    assert checked > 25


# -- snapshots ------------------------------------------------------------------------------------
def _act(info: dict, pick: int) -> str:
    acts = info["admissible_actions"]
    return "jump around" if pick % 9 == 0 else acts[pick % len(acts)]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), split=st.sampled_from(["train", "test"]),
       prefix=st.lists(st.integers(0, 999), max_size=20), tail=st.lists(st.integers(0, 999), max_size=25))
def test_restore_then_same_actions_gives_same_results(seed, split, prefix, tail):
    env = AlfworldSimEnv()
    _, info = env.reset(seed=seed, options={"split": split})
    for pick in prefix:
        _, _, term, trunc, info = env.step(_act(info, pick))
        if term or trunc:
            return
    snap, key, info0 = env.snapshot(), env.state_key(), info

    def run(e: AlfworldSimEnv) -> list:
        out, inf = [], info0
        for pick in tail:
            obs, reward, term, trunc, inf = e.step(_act(inf, pick))
            out.append((obs, reward, term, trunc, inf, e.state_key(), e.expert_action()))
            if term or trunc:
                break
        return out

    first = run(env)
    env.reset(seed=seed + 1)
    env.restore(snap)
    assert env.state_key() == key
    assert run(env) == first
    fresh = AlfworldSimEnv()  # a snapshot does not depend on the env that took it
    fresh.restore(snap)
    assert run(fresh) == first


# -- prompts --------------------------------------------------------------------------------------
def test_prompt_presets():
    env = AlfworldSimEnv()
    obs, info = env.reset(seed=0)
    spec = env.agent_spec
    first = spec.render(info["task"], obs, info["admissible_actions"], [], 0)
    assert first.startswith("Task: " + info["task"]) and "help" not in first and len(first) < 600
    action = env.expert_action()
    obs2, *_, info2 = env.step(action)
    later = spec.render(info2["task"], obs2, info2["admissible_actions"], [(obs, action)], 1)
    assert f"\n> {action}\n" in later and spec.parse(spec.format_action(action)).action == action

    verl = AlfworldSimEnv(prompt="verl-agent").agent_spec
    text = verl.render(info2["task"], obs2, info2["admissible_actions"], [(obs, action)], 1)
    assert f"[Observation 1: '{obs}', Action 1: '{action}']" in text
    shown = [a for a in info2["admissible_actions"] if a != "help"]
    assert "['" + "'\n '".join(shown) + "']" in text and "'help'" not in text
    assert verl.require_think and not verl.parse(f"<action>{action}</action>").format_valid
