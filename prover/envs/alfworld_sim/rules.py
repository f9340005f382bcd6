"""The rules a generated room follows, as one ``Rules`` value: ALFWorld's (the default) or v1's.

The task types, goal phrasings and appliances are the same under both; what differs is the tables
(``alfred.py`` holds ALFWorld's facts, ``rules_v1.py`` the sim's first tables) and three switches
that v1 lacks: every lamp can be switched on, receptacles may share a location, and tasks draw their
objects and goal receptacles from those of ALFWorld's shipped games. The world generator, the
engine, the expert and the PDDL writer (``prover_alfworld.emit``) all read the world's ``Rules``, so
a world carries its rules with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from prover.envs.alfworld_sim import alfred, rules_v1
from prover.errors import ConfigError

TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
LIGHT, TWO = "look_at_obj_in_light", "pick_two_obj_and_place"

# Two goal phrasings per task type, one picked per episode (ALFWorld's goal library does the same).
GOALS = {
    "pick_and_place_simple": ("put a {obj} in {recep}", "put some {obj} on {recep}"),
    "look_at_obj_in_light": ("look at {obj} under the {toggle}", "examine the {obj} with the {toggle}"),
    "pick_clean_then_place_in_recep": ("put a clean {obj} in {recep}",
                                       "clean some {obj} and put it in {recep}"),
    "pick_heat_then_place_in_recep": ("put a hot {obj} in {recep}", "heat some {obj} and put it in {recep}"),
    "pick_cool_then_place_in_recep": ("put a cool {obj} in {recep}", "cool some {obj} and put it in {recep}"),
    "pick_two_obj_and_place": ("put two {obj} in {recep}", "find two {obj} and put them in {recep}"),
}

# The processing a task asks for: (verb, object property letter, appliance receptacle types).
# Only a sink basin cleans: alfred.pddl's CleanObject names SinkBasinType alone (not BathtubBasinType).
PROCESSING = {
    "pick_clean_then_place_in_recep": ("clean", "w", ("sinkbasin",)),
    "pick_heat_then_place_in_recep": ("heat", "h", ("microwave",)),
    "pick_cool_then_place_in_recep": ("cool", "c", ("fridge",)),
}

Option = tuple[str, "str | None", "str | None"]  # (object type, goal receptacle type, lamp type)


@dataclass(frozen=True)
class Rules:
    """Every table a room is drawn from and played by. Treat the mappings as read-only."""

    name: str
    rooms: Mapping[str, Mapping[str, int]]  # room kind -> receptacle type -> most instances in a room
    weights: Mapping[str, Mapping[str, float]] | None  # kind -> type -> weight of extra draws (None: even)
    room_objects: Mapping[str, tuple[str, ...]]  # room kind -> the object types drawn there, in draw order
    holds: Mapping[str, frozenset[str]]  # object type -> receptacle types that can contain it (canContain)
    homes: Mapping[str, frozenset[str]]  # object type -> receptacle types it may start in
    props: Mapping[str, str]  # type -> h heatable, c coolable, w cleanable, t switchable lamp, s sliceable
    portable: frozenset[str]  # object types that can be picked up
    openable: frozenset[str]
    receptacle_objects: frozenset[str]
    all_lamps: bool  # every lamp can be switched on (v1: only lamps of the task's lamp type)
    shared: Mapping[tuple[str, str], float]  # sorted type pair -> chance two instances share a location
    # Task type -> allowed room kinds / goal object types / goal receptacle (or lamp) types; None: any.
    task_rooms: Mapping[str, frozenset[str]] | None = None
    task_objects: Mapping[str, frozenset[str]] | None = None
    task_receptacles: Mapping[str, frozenset[str]] | None = None
    options: Mapping[str, Mapping[str, list[Option]]] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", _task_options(self))

    def allows(self, task: str, table: Mapping[str, frozenset[str]] | None, name: str) -> bool:
        return table is None or name in table[task]


def _task_options(r: Rules) -> dict[str, dict[str, list[Option]]]:
    """task type -> room kind -> every feasible (object type, goal receptacle type, lamp type)."""
    out: dict[str, dict[str, list[Option]]] = {}
    lamps = sorted(t for t, p in r.props.items() if "t" in p)
    for task in TASK_TYPES:
        _, prop, appliances = PROCESSING.get(task, ("", "", ()))
        per_room: dict[str, list[Option]] = {}
        for room, recs in r.rooms.items():
            if not r.allows(task, r.task_rooms, room) or (appliances and not set(appliances) & set(recs)):
                continue
            options: list[Option] = []
            for obj in r.room_objects[room]:
                homes = r.holds[obj] & set(recs)
                if obj not in r.portable or prop not in r.props[obj] or not homes:
                    continue
                if not r.allows(task, r.task_objects, obj):
                    continue
                if task == LIGHT:
                    options += [(obj, None, lamp) for lamp in lamps if lamp in r.room_objects[room]
                                and r.homes[lamp] & set(recs) and r.allows(task, r.task_receptacles, lamp)]
                    continue
                for recep in sorted(homes - set(appliances)):
                    # the object must be able to start somewhere that is not already the goal
                    if homes - {recep} and r.allows(task, r.task_receptacles, recep):
                        options.append((obj, recep, None))
            if options:
                per_room[room] = options
        out[task] = per_room
    return out


def _v1() -> Rules:
    rows = rules_v1.OBJECT_ROWS
    holds = {o: frozenset(r.split()) for o, (_, r, _) in rows.items()}
    props = {o: p for o, (_, _, p) in rows.items()}
    return Rules(
        name="v1", rooms=rules_v1.ROOMS, weights=None,
        room_objects={room: tuple(o for o, (rooms, _, _) in rows.items() if room in rooms.split())
                      for room in rules_v1.ROOMS},
        holds=holds, homes=holds, props=props,
        portable=frozenset(o for o, p in props.items() if "t" not in p),
        openable=alfred.OPENABLE, receptacle_objects=alfred.RECEPTACLE_OBJECTS, all_lamps=False, shared={})


def _alfworld() -> Rules:
    room_objects = {room: tuple(objs.split()) for room, objs in alfred.ROOM_OBJECTS.items()}
    kinds = sorted({o for objs in room_objects.values() for o in objs})
    holds = {o: frozenset(r for r, objs in alfred.CAN_CONTAIN.items() if o in objs.split()) for o in kinds}
    homes = {o: holds[o] | frozenset(alfred.FIXTURE_HOMES.get(o, "").split()) for o in kinds}
    able = (("h", alfred.HEATABLE), ("c", alfred.COOLABLE), ("w", alfred.CLEANABLE), ("t", alfred.TOGGLEABLE),
            ("s", alfred.SLICEABLE))
    props = {o: "".join(letter for letter, types in able if o in types) for o in kinds}
    return Rules(
        name="alfworld",
        rooms={k: {t: most for t, (_, most) in row.items()} for k, row in alfred.ROOMS.items()},
        weights={k: {t: mean for t, (mean, _) in row.items()} for k, row in alfred.ROOMS.items()},
        room_objects=room_objects, holds=holds, homes=homes, props=props,
        portable=frozenset(o for o in kinds if holds[o]),  # what no receptacle takes is a fixture
        openable=alfred.OPENABLE, receptacle_objects=alfred.RECEPTACLE_OBJECTS, all_lamps=True,
        shared=alfred.SHARED_LOCATION, task_rooms=alfred.TASK_ROOMS,
        task_objects={t: frozenset(v.split()) for t, v in alfred.TASK_OBJECTS.items()},
        task_receptacles={t: frozenset(v.split()) for t, v in alfred.TASK_RECEPTACLES.items()})


RULES: dict[str, Rules] = {"alfworld": _alfworld(), "v1": _v1()}


def get_rules(name: str) -> Rules:
    """The rule set called ``name``; an unknown name is a ConfigError that lists the known ones."""
    if name not in RULES:
        raise ConfigError(f"alfworld-sim: unknown rules {name!r}; choose one of {sorted(RULES)}")
    return RULES[name]
