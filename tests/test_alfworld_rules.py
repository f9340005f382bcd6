"""alfworld-sim follows ALFWorld's own tables: placements, the action sets, lamps, shared locations,
slicing, the generated tasks; alfworld-sim-v1 keeps the sim's first tables unchanged."""

from __future__ import annotations

import zlib

import pytest

from prover.envs import make_env
from prover.envs.alfworld_sim import TASK_TYPES, AlfworldSimEnv
from prover.envs.alfworld_sim.expert import plan
from prover.envs.alfworld_sim.rules import RULES
from prover.envs.alfworld_sim.world import generate
from prover.errors import ConfigError
from test_alfworld_sim import Game, make_world

# -- ALFWorld's rules ------------------------------------------------------------------------------
# Expected values below are read off ALFWorld's own files by hand, never from our tables:
# constants.py = alfworld/gen/constants.py, alfred.pddl / alfred.twl2 = alfworld/data/.
V1 = RULES["v1"]


def room(task_type: str, start: dict[str, str], receptacles: tuple[str, ...], rules=RULES["alfworld"],
         **kwargs) -> Game:
    kwargs = {"obj": "cloth", "recep": "countertop", **kwargs}
    return Game(make_world(task_type, start, receptacles=receptacles, rules=rules, **kwargs))


def holding(game: Game, obj: str, at: str) -> Game:
    """Fetch ``obj`` from where it starts and carry it to ``at``."""
    source = game.world.start[obj]
    for cmd in (f"go to {source}", f"open {source}", f"take {obj} from {source}", f"go to {at}",
                f"open {at}"):
        if cmd in game.admissible():  # no move to where the agent is, no opening what is not closed
            game(cmd)
    return game


BATH = ("countertop 1", "sinkbasin 1", "towelholder 1")


@pytest.mark.parametrize("rules", [RULES["alfworld"], V1])
def test_towels_cannot_be_cleaned_and_hang_only_on_towel_holders(rules):
    # alfred.pddl's CleanObject needs (cleanable ?o); constants.py's VAL_ACTION_OBJECTS['Cleanable']
    # has Cloth but neither Towel nor HandTowel. VAL_RECEPTACLE_OBJECTS puts Towel in TowelHolder only.
    start = {"towel 1": "towelholder 1", "cloth 1": "countertop 1"}
    game = holding(room("pick_and_place_simple", start, BATH, rules), "towel 1", "sinkbasin 1")
    cleans = "clean towel 1 with sinkbasin 1" in game.admissible()
    assert cleans == (rules is V1)  # v1 cleaned towels; ALFWorld does not
    game("go to countertop 1")
    assert ("move towel 1 to countertop 1" in game.admissible()) == (rules is V1)
    game("go to towelholder 1")
    game("move towel 1 to towelholder 1")
    holding(game, "cloth 1", "sinkbasin 1")
    assert game("clean cloth 1 with sinkbasin 1") == "You clean the cloth 1 using the sinkbasin 1."


def test_placements_follow_val_receptacle_objects():
    # constants.py VAL_RECEPTACLE_OBJECTS: CounterTop has Book; Cabinet lacks RemoteControl; Microwave
    # has Plate but not Pan; StoveBurner is {Kettle, Pan, Pot}; Ottoman has Pillow; Safe lacks Pen.
    recs = ("cabinet 1", "countertop 1", "microwave 1", "ottoman 1", "safe 1", "stoveburner 1")
    trips = {  # object: (where it starts, where it is carried, whether it may be put there)
        "book 1": ("ottoman 1", "countertop 1", True), "remotecontrol 1": ("ottoman 1", "cabinet 1", False),
        "plate 1": ("countertop 1", "microwave 1", True), "pan 1": ("countertop 1", "microwave 1", False),
        "kettle 1": ("cabinet 1", "stoveburner 1", True), "pillow 1": ("countertop 1", "ottoman 1", True),
        "pen 1": ("countertop 1", "safe 1", False)}
    start = {obj: source for obj, (source, _, _) in trips.items()}
    for obj, (_, target, allowed) in trips.items():
        game = holding(room("pick_and_place_simple", start, recs), obj, target)
        assert (f"move {obj} to {target}" in game.admissible()) == allowed, obj


def test_kettles_clean_but_do_not_heat_and_fixtures_stay_put():
    # VAL_ACTION_OBJECTS: Kettle is Cleanable, not Heatable. HousePlant and Television are in no
    # VAL_RECEPTACLE_OBJECTS set and no shipped game marks them pickupable: they are seen, never taken.
    recs = ("countertop 1", "microwave 1", "sinkbasin 1", "tvstand 1")
    start = {"kettle 1": "countertop 1", "houseplant 1": "countertop 1", "television 1": "tvstand 1"}
    game = room("pick_clean_then_place_in_recep", start, recs, obj="kettle")
    assert game("go to countertop 1") == (
        "You arrive at countertop 1. On the countertop 1, you see a houseplant 1, and a kettle 1.")
    assert "take houseplant 1 from countertop 1" not in game.admissible()
    game("take kettle 1 from countertop 1")
    game("go to microwave 1")
    assert not any(a.startswith("heat ") for a in game.admissible())
    game("go to sinkbasin 1")
    assert "clean kettle 1 with sinkbasin 1" in game.admissible()
    game("go to tvstand 1")
    assert not any(a.startswith("take ") for a in game.admissible())


@pytest.mark.parametrize("rules", [RULES["alfworld"], V1])
def test_every_desk_lamp_can_be_switched_on(rules):
    # constants.py VAL_ACTION_OBJECTS['Toggleable'] = {DeskLamp, FloorLamp}, and ALFWorld's games mark
    # every desk lamp toggleable, whatever the task; ToggleObject then needs the lamp in a receptacle
    # at the agent's location. v1 let only the light task's lamps be used.
    start = {"book 1": "bed 1", "desklamp 1": "sidetable 1"}
    game = room("pick_and_place_simple", start, ("bed 1", "desk 1", "sidetable 1"), rules, obj="book",
                recep="desk")
    game("go to sidetable 1")
    assert ("use desklamp 1" in game.admissible()) == (rules is not V1)
    assert "take desklamp 1 from sidetable 1" not in game.admissible()  # lamps are never pickupable


def test_receptacles_that_share_a_location():
    # alfred.pddl: GotoLocation moves to a location; OpenObject, PickupObject, PutObject and examine
    # need (receptacleAtLocation ?r ?l) with the agent at ?l, so every receptacle there is in reach.
    # Texts: alfred.twl2's look.feedback lists {r.name} of all receptacles at the location.
    recs = ("countertop 1", "drawer 1", "stoveburner 1", "stoveburner 2")
    start = {"pan 1": "stoveburner 1", "kettle 1": "stoveburner 2", "cloth 1": "drawer 1"}
    sites = {"stoveburner 1": "stoveburner 2", "drawer 1": "countertop 1"}
    game = Game(make_world("pick_and_place_simple", start, receptacles=recs, obj="pan", recep="countertop",
                           sites=sites))
    assert game("go to stoveburner 2") == (
        "You arrive at stoveburner 2. On the stoveburner 2, you see a kettle 1.")
    assert "go to stoveburner 1" not in game.admissible()  # already there
    assert game("look") == "You are facing the stoveburner 2, and stoveburner 1. Next to it, you see nothing."
    assert game("examine stoveburner 1") == "On the stoveburner 1, you see a pan 1."
    # the shortest plan takes the pan from here: stoveburner 1 stands where the agent is
    assert plan(game.world, game.state) == [
        "take pan 1 from stoveburner 1", "go to countertop 1", "move pan 1 to countertop 1"]
    assert game("take pan 1 from stoveburner 1") == "You pick up the pan 1 from the stoveburner 1."
    assert game("go to drawer 1") == "You arrive at drawer 1. The drawer 1 is closed."
    assert {"move pan 1 to countertop 1", "open drawer 1", "examine countertop 1"} <= set(game.admissible())
    assert "move pan 1 to drawer 1" not in game.admissible()  # closed (and VAL lacks Pan in Drawer)



def test_slicing_with_a_knife():
    # alfred.pddl's SliceObject: (sliceable ?co), the agent holds a Knife or ButterKnife, and ?co is at
    # the agent's location (objectAtLocation: inside a closed fridge too). VAL_ACTION_OBJECTS['Sliceable']
    # has Apple and Tomato, not Mug. alfred.twl2: "You sliced the {co} with the {ko}.", and examine's
    # "This is a cool sliced {o}." / "This is a sliced {o}.".
    start = {"knife 1": "countertop 1", "apple 1": "countertop 1", "mug 1": "countertop 1",
             "tomato 1": "fridge 1"}
    game = room("pick_cool_then_place_in_recep", start, ("countertop 1", "fridge 1"), obj="apple")
    game("go to countertop 1")
    game("take knife 1 from countertop 1")
    assert [a for a in game.admissible() if a.startswith("slice")] == ["slice apple 1 with knife 1"]
    assert game("slice apple 1 with knife 1") == "You sliced the apple 1 with the knife 1."
    game("go to fridge 1")
    assert "slice tomato 1 with knife 1" in game.admissible()
    game("go to countertop 1")
    game("move knife 1 to countertop 1")
    game("take apple 1 from countertop 1")
    assert game("examine apple 1") == "This is a sliced apple 1."
    game("go to fridge 1")
    game("cool apple 1 with fridge 1")
    assert game("examine apple 1") == "This is a cool sliced apple 1."
    v1 = room("pick_cool_then_place_in_recep", start, ("countertop 1", "fridge 1"), V1, obj="apple")
    holding(v1, "knife 1", "countertop 1")
    assert not any(a.startswith("slice") for a in v1.admissible())


def test_generated_tasks_follow_alfworld():
    # GOALS_VALID: heat and cool only in kitchens, clean in kitchens and bathrooms, light in bedrooms and
    # living rooms. json_2.1.1 ships no solvable floor-lamp light task, so every goal lamp is a desk lamp.
    kinds = {"pick_heat_then_place_in_recep": {"kitchen"}, "pick_cool_then_place_in_recep": {"kitchen"},
             "pick_clean_then_place_in_recep": {"kitchen", "bathroom"},
             "look_at_obj_in_light": {"bedroom", "livingroom"}}
    env, shared = AlfworldSimEnv(scene="full"), 0
    for seed in range(120):
        env.reset(seed=seed)
        world = env.world
        assert world.scene in kinds.get(world.task_type, {world.scene})
        assert world.toggle_type in (None, "desklamp")
        for obj, rec in world.start.items():  # everything starts where ALFWorld could put it (or stands)
            assert world.kind[rec] in world.rules.homes[world.kind[obj]]
        shared += len(world.at) < len(world.receptacles)
    assert shared > 10  # full-size rooms share locations often, as ALFWorld's kitchens do


def test_v1_rooms_are_unchanged():
    # Pinned from the code before the sim followed ALFWorld's tables: seed 0 of the train split, and a checksum
    # of the goals, receptacles and starting places of 200 default-sized v1 rooms.
    env = make_env("alfworld-sim-v1")
    _, info = env.reset(seed=0)
    assert info["task"] == "heat some bread and put it in fridge."
    assert env.world.receptacles == ("fridge 1", "garbagecan 1", "microwave 1", "shelf 1", "sinkbasin 2",
                                     "sinkbasin 1")
    assert dict(env.world.start) == {"bread 2": "microwave 1", "bread 1": "garbagecan 1"}
    worlds = (generate(split, s, s % 2, TASK_TYPES, (4, 7), (1, 2), rules="v1")
              for split in ("train", "test") for s in range(100))
    text = "".join(repr((w.goal, w.receptacles, sorted(w.start.items()))) for w in worlds)
    assert zlib.crc32(text.encode()) == 2685188888
    with pytest.raises(ConfigError, match="unknown rules"):
        AlfworldSimEnv(rules="v0")


def test_tables_match_the_installed_alfworld():
    """Our copy of ALFWorld's facts (alfred.py) against the alfworld package, so that drift is seen."""
    constants = pytest.importorskip("alfworld.gen.constants")
    from importlib import resources

    from prover.envs.alfworld_sim import alfred

    def lower(names):
        return {n.lower() for n in names if not n.endswith("Sliced")}

    movable = lower(constants.MOVABLE_RECEPTACLES)
    theirs = {r.lower(): lower(o) for r, o in constants.VAL_RECEPTACLE_OBJECTS.items()
              if r.lower() not in movable}
    assert {r: set(o.split()) for r, o in alfred.CAN_CONTAIN.items()} == theirs
    actions = constants.VAL_ACTION_OBJECTS
    for ours, key in ((alfred.HEATABLE, "Heatable"), (alfred.COOLABLE, "Coolable"),
                      (alfred.CLEANABLE, "Cleanable"), (alfred.TOGGLEABLE, "Toggleable"),
                      (alfred.SLICEABLE, "Sliceable")):
        assert ours == lower(actions[key]), key
    assert alfred.OPENABLE == lower(constants.OPENABLE_CLASS_LIST) - {"box"}
    assert alfred.RECEPTACLE_OBJECTS == movable
    assert alfred.TASK_ROOMS == {t: lower(k) for t, k in constants.GOALS_VALID.items()
                                 if t in alfred.TASK_ROOMS}
    domain = (resources.files("alfworld") / "data" / "alfred.pddl").read_text()
    for fact in ("(cleanable ?o)", "(receptacleType ?r SinkBasinType)", "(toggleable ?o)", "(sliceable ?co)",
                 "(canContain ?rt ?ot)", "(pickupable ?o)"):
        assert fact in domain, fact


# -- commands: matched as ALFWorld matches them ----------------------------------------------------
def test_commands_match_exactly_unless_normalisation_is_asked_for():
    # ALFWorld's engine is TextWorld's PddlEnv (textworld 1.7.0, textworld/envs/pddl/pddl.py, PddlEnv.step):
    # ``command = command.strip()``, then ``self.prev_state["_valid_commands"].index(command)``; a command
    # not in the list raises ValueError, answered ``self.state.feedback = "Nothing happens."``, and the game
    # state is left as it was. So case and inner spaces count and the ends do not (the alfworld plugin's
    # README, "Commands", and its test_commands_reach_the_engine_as_written_unless_normalisation_is_asked_for).
    def at_toilet(**kwargs):  # a bathroom whose first admissible moves include the toilet
        env = AlfworldSimEnv(**kwargs)
        seed = next(s for s in range(300) if "go to toilet 1" in env.reset(seed=s)[1]["admissible_actions"])
        env.reset(seed=seed)
        return env

    exact = at_toilet()
    arrived, *_, info = exact.step("go to toilet 1")
    assert info["is_action_valid"] and arrived.startswith("You arrive at toilet 1.")
    examined, *_, info = exact.step("examine toilet 1")
    assert info["is_action_valid"] and examined != "Nothing happens."
    for normalize in (False, True):
        env = at_toilet(normalize_commands=normalize)
        key = env.state_key()
        obs, reward, terminated, _, info = env.step("go to  toilet 1")  # two spaces
        if not normalize:
            assert (obs, reward, terminated, info["is_action_valid"]) == ("Nothing happens.", 0.0, False, False)
            assert env.state_key() == key
            obs, *_, info = env.step(" go to toilet 1\t")  # stripped, as PddlEnv.step does
        assert info["is_action_valid"] and obs == arrived
        assert "examine toilet 1" in info["admissible_actions"]
        key = env.state_key()
        obs, *_, info = env.step("Examine toilet 1")
        assert info["is_action_valid"] is normalize and obs == (examined if normalize else "Nothing happens.")
        assert env.state_key() == key  # examining changes nothing either way
    with pytest.raises(ConfigError, match="env.kwargs.normalize_commands"):
        AlfworldSimEnv.parse_settings({"normalize_commands": "sometimes"}, "env.kwargs", "alfworld-sim")
