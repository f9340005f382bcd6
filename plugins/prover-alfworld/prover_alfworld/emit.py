"""Write an alfworld-sim task as an ALFWorld game: a ``game.tw-pddl`` the real engine loads.

A game file is JSON with ALFWorld's domain (``alfred.pddl``), its grammar (``alfred.twl2``) with the
goal sentence put in place of "UNKNOWN GOAL", a PDDL problem, ``solvable`` and a ``walkthrough``
(alfworld:scripts/alfworld-generate writes the same five keys). ``traj_data.json`` beside it carries
the task type and targets, which is what ALFWorld's loader filters on.

The problem states the sim's world in the domain's predicates, from the world's own rules (ALFWorld's
tables, or v1's), and follows the conventions of the problems ALFWorld ships
(alfworld:alfworld/gen/game_states/planned_game_state.py and the json_2.1.1 games), so that the sim
has to follow them too:

* each receptacle stands at its world location, which several may share (two stove burners); the agent
  starts at one more, in the middle of the room;
* ``canContain`` is the rules' placement table; the portable objects are ``pickupable`` (fixtures and
  lamps are not); ``heatable``/``coolable``/``cleanable``/``sliceable`` come from the rules' property
  table; the lamps the world lets the agent switch on are ``toggleable`` (every lamp under ALFWorld's
  rules, only the task's lamp type under v1's);
* bowls, boxes, cups, mugs, pans, plates and pots are ``isReceptacleObject`` (which changes what
  ``examine`` says about them);
* objects of the goal type that start in a fridge are already ``isCool``;
* the goal is ALFWorld's goal formula for the task type (alfworld:alfworld/gen/goal_library.py).

Entity ids are chosen so that ALFWorld's ``Demangler`` (which numbers the instances of a type in
reverse order of their sorted ids) shows every entity under the sim's name, e.g. ``cabinet 3``.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path

from prover.envs.alfworld_sim.world import LIGHT, PROCESSING, TWO, World, type_of

# Types the domain names as constants; a problem must declare them even if no entity has them.
DOMAIN_TYPES = ("sinkbasin", "microwave", "fridge", "knife", "butterknife")
FLAGS = (("h", "heatable"), ("c", "coolable"), ("w", "cleanable"), ("s", "sliceable"))  # rules' letters
START = "loc_bar_start"


@cache
def logic() -> tuple[str, str]:
    """ALFWorld's domain and grammar text, read from the installed ``alfworld`` package."""
    data = resources.files("alfworld") / "data"
    return (data / "alfred.pddl").read_text(), (data / "alfred.twl2").read_text()


def _ids(world: World) -> dict[str, str]:
    """Sim name -> PDDL id that the Demangler turns back into that name."""
    counts: dict[str, int] = {}
    for name in (*world.receptacles, *world.objects):
        counts[type_of(name)] = counts.get(type_of(name), 0) + 1
    ids = {}
    for name in (*world.receptacles, *world.objects):
        kind, n = type_of(name), int(name.rpartition(" ")[2])
        # The Demangler appends "basin" to the text before the first "_bar_" of any id with "basin".
        head, tail = (kind[:-5], "_bar_basin") if kind.endswith("basin") else (kind, "")
        ids[name] = f"{head}_bar_{counts[kind] - n:03d}{tail}"
    return ids


def _goal(world: World) -> str:
    obj, recep, toggle = world.obj_type, world.recep_type, world.toggle_type
    if world.task_type == LIGHT:
        return (f"(and (exists (?ot - object ?r - receptacle ?a - agent ?l - location) (and "
                f"(objectType ?ot {toggle}Type) (toggleable ?ot) (isToggled ?ot) (receptacleAtLocation ?r ?l) "
                f"(atLocation ?a ?l) (inReceptacle ?ot ?r))) "
                f"(exists (?o - object ?a - agent) (and (objectType ?o {obj}Type) (holds ?a ?o))))")
    if world.task_type == TWO:
        return (f"(exists (?r - receptacle) (exists (?o1 - object) (and (objectType ?o1 {obj}Type) "
                f"(receptacleType ?r {recep}Type) (inReceptacle ?o1 ?r) (exists (?o2 - object) (and "
                f"(not (= ?o1 ?o2)) (objectType ?o2 {obj}Type) (receptacleType ?r {recep}Type) "
                f"(inReceptacle ?o2 ?r))))))")
    extra = ""
    if world.task_type in PROCESSING:
        verb = PROCESSING[world.task_type][0]
        able, flag = {"clean": ("cleanable", "isClean"), "heat": ("heatable", "isHot"),
                      "cool": ("coolable", "isCool")}[verb]
        extra = f" ({able} ?o) ({flag} ?o)"
    return (f"(exists (?r - receptacle) (exists (?o - object) (and (inReceptacle ?o ?r) "
            f"(objectType ?o {obj}Type) (receptacleType ?r {recep}Type){extra})))")


def _types(world: World) -> tuple[list[str], list[str]]:
    """Every object type and receptacle type the problem declares (the rules' whole vocabulary)."""
    rules = world.rules
    otypes = sorted({type_of(o) for o in world.objects} | set(rules.props) | {"knife", "butterknife"})
    rtypes = sorted({r for rooms in rules.rooms.values() for r in rooms} | set(DOMAIN_TYPES) - set(otypes))
    return otypes, rtypes


def _object_facts(world: World, ids: dict[str, str], loc: dict[str, str]) -> list[str]:
    rules, init = world.rules, []
    for o, r in world.start.items():
        kind, props = type_of(o), rules.props[type_of(o)]
        init += [f"(objectType {ids[o]} {kind}Type)", f"(inReceptacle {ids[o]} {ids[r]})",
                 f"(objectAtLocation {ids[o]} {loc[r]})"]
        init += [f"({flag} {ids[o]})" for letter, flag in FLAGS if letter in props]
        if o in world.portable:
            init.append(f"(pickupable {ids[o]})")
        if o in world.switches:
            init.append(f"(toggleable {ids[o]})")
        if kind in rules.receptacle_objects:
            init.append(f"(isReceptacleObject {ids[o]})")
        if kind == world.obj_type and type_of(r) == "fridge":
            init.append(f"(isCool {ids[o]})")
    return init


def problem(world: World) -> str:
    """The PDDL problem of ``world`` at its initial state."""
    ids = _ids(world)
    loc = {r: f"loc_bar_{ids[world.site[r]]}" for r in world.receptacles}
    otypes, rtypes = _types(world)
    places = sorted(set(loc.values()), key=list(loc.values()).index)
    objects = ([f"{ids[n]} - receptacle" for n in world.receptacles] + [f"{ids[n]} - object" for n in world.objects]
               + [f"{v} - location" for v in (START, *places)] + ["agent1 - agent"]
               + [f"{t}Type - otype" for t in otypes] + [f"{t}Type - rtype" for t in rtypes])
    init = [f"(atLocation agent1 {START})"]
    for r in world.receptacles:
        init += [f"(receptacleType {ids[r]} {type_of(r)}Type)", f"(receptacleAtLocation {ids[r]} {loc[r]})"]
        if type_of(r) in world.rules.openable:
            init.append(f"(openable {ids[r]})")
    init += _object_facts(world, ids, loc)
    holds = world.rules.holds
    init += [f"(canContain {rt}Type {ot}Type)" for rt in rtypes for ot in otypes if rt in holds.get(ot, ())]
    pad = "\n        "
    return (f"(define (problem {world.task_id.replace('/', '_')})\n    (:domain alfred)\n"
            f"    (:objects{pad}{pad.join(objects)}\n    )\n"
            f"    (:init{pad}{pad.join(init)}\n    )\n"
            f"    (:goal {_goal(world)})\n)\n")


def game(world: World, walkthrough: list[str] | None = None) -> dict:
    """The ``game.tw-pddl`` content of ``world`` (what ``PddlEnv.load`` accepts as a dict)."""
    domain, grammar = logic()
    return {"pddl_domain": domain, "grammar": grammar.replace("UNKNOWN GOAL", world.goal),
            "pddl_problem": problem(world), "solvable": True, "walkthrough": walkthrough or []}


def traj_data(world: World) -> dict:
    """The part of ALFRED's ``traj_data.json`` that ALFWorld's loader reads."""
    return {"task_type": world.task_type,
            "pddl_params": {"object_target": world.obj_type, "parent_target": world.recep_type or "",
                            "toggle_target": world.toggle_type or "", "mrecep_target": "",
                            "object_sliced": False}}


def write(world: World, folder: str | Path, walkthrough: list[str] | None = None) -> Path:
    """Write ``game.tw-pddl`` and ``traj_data.json`` of ``world`` into ``folder``; return the game path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "traj_data.json").write_text(json.dumps(traj_data(world), indent=1))
    path = folder / "game.tw-pddl"
    path.write_text(json.dumps(game(world, walkthrough)))
    return path
