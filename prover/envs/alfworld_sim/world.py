"""What an ALFWorld room holds, and how one task and its room are drawn from a seed.

The tables are ours and deliberately small: four room kinds, the receptacle types each has (with the
most instances one room may hold), and which object types each receptacle type can contain
(ALFWorld's ``canContain``) and which can be heated, cooled, cleaned or switched on. They follow the
spirit of ALFRED's scenes (apples in fridges, books on desks, soap by the sink) without copying its
lists.

A ``World`` is everything about an episode that never changes: the task, the receptacles, the objects
and where they start. The mutable part lives in ``engine.State``.

Seen and unseen rooms: ALFWorld's unseen split holds rooms never trained on. Here a room is the set of
receptacle names of a scene kind, and a checksum of it puts every room in exactly one split, so no
train seed can ever produce a test room (``room_split``). Drawing a task for a split redraws until the
room falls in that split.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field
from typing import Mapping

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

OPENABLE = frozenset({"cabinet", "drawer", "fridge", "microwave", "safe"})
# Objects ALFWorld's problems mark ``isReceptacleObject``; ``examine`` describes them as containers.
RECEPTACLE_OBJECTS = frozenset({"bowl", "box", "cup", "mug", "pan", "plate", "pot"})

# Room kind -> receptacle type -> most instances in one room.
ROOMS: dict[str, dict[str, int]] = {
    "kitchen": {"cabinet": 8, "coffeemachine": 1, "countertop": 3, "diningtable": 1, "drawer": 6,
                "fridge": 1, "garbagecan": 1, "microwave": 1, "shelf": 3, "sinkbasin": 2,
                "stoveburner": 4, "toaster": 1},
    "livingroom": {"armchair": 2, "cabinet": 4, "coffeetable": 1, "diningtable": 1, "drawer": 6,
                   "dresser": 1, "garbagecan": 1, "shelf": 6, "sidetable": 3, "sofa": 1, "tvstand": 1},
    "bedroom": {"armchair": 1, "bed": 1, "desk": 2, "drawer": 8, "dresser": 1, "garbagecan": 1,
                "laundryhamper": 1, "safe": 1, "shelf": 6, "sidetable": 2},
    "bathroom": {"bathtubbasin": 1, "cabinet": 4, "countertop": 1, "drawer": 4, "garbagecan": 1,
                 "handtowelholder": 1, "shelf": 3, "sinkbasin": 2, "toilet": 1, "toiletpaperhanger": 1,
                 "towelholder": 1},
}

# Object type: (rooms it appears in, receptacle types that can hold it, properties).
# Properties: h heatable, c coolable, w cleanable (washable), t a lamp (switched on, never carried).
_OBJECT_ROWS = {
    "apple": ("kitchen", "countertop diningtable fridge garbagecan microwave sinkbasin", "hcw"),
    "bread": ("kitchen", "countertop diningtable fridge garbagecan microwave", "hc"),
    "egg": ("kitchen", "countertop diningtable fridge garbagecan microwave sinkbasin", "hcw"),
    "lettuce": ("kitchen", "countertop diningtable fridge garbagecan sinkbasin", "cw"),
    "potato": ("kitchen", "countertop diningtable fridge garbagecan microwave sinkbasin", "hcw"),
    "tomato": ("kitchen", "countertop diningtable fridge garbagecan microwave sinkbasin", "hcw"),
    "cup": ("kitchen", "cabinet countertop diningtable fridge microwave shelf sinkbasin", "hcw"),
    "mug": ("kitchen", "cabinet coffeemachine countertop diningtable fridge microwave shelf sinkbasin",
            "hcw"),
    "plate": ("kitchen", "cabinet countertop diningtable fridge microwave shelf sinkbasin", "hcw"),
    "bowl": ("kitchen", "cabinet countertop diningtable fridge microwave shelf sinkbasin", "cw"),
    "pan": ("kitchen", "cabinet countertop diningtable fridge sinkbasin stoveburner", "cw"),
    "pot": ("kitchen", "cabinet countertop diningtable fridge sinkbasin stoveburner", "cw"),
    "fork": ("kitchen", "countertop diningtable drawer sinkbasin", "w"),
    "knife": ("kitchen", "countertop diningtable drawer sinkbasin", "w"),
    "ladle": ("kitchen", "countertop diningtable drawer sinkbasin", "w"),
    "spatula": ("kitchen", "countertop diningtable drawer sinkbasin", "w"),
    "spoon": ("kitchen", "countertop diningtable drawer sinkbasin", "w"),
    "saltshaker": ("kitchen", "cabinet countertop diningtable drawer shelf", ""),
    "peppershaker": ("kitchen", "cabinet countertop diningtable drawer shelf", ""),
    "winebottle": ("kitchen", "cabinet countertop diningtable fridge garbagecan shelf", "c"),
    "dishsponge": ("kitchen bathroom", "bathtubbasin cabinet countertop drawer shelf sinkbasin toilet", "w"),
    "soapbottle": ("kitchen bathroom", "cabinet countertop diningtable garbagecan shelf toilet", ""),
    "alarmclock": ("bedroom livingroom", "desk dresser shelf sidetable", ""),
    "book": ("bedroom livingroom", "armchair bed coffeetable desk diningtable drawer dresser shelf "
             "sidetable sofa", ""),
    "box": ("bedroom livingroom", "armchair cabinet coffeetable desk diningtable dresser shelf sidetable "
            "sofa", ""),
    "cd": ("bedroom livingroom", "cabinet coffeetable desk drawer dresser garbagecan safe shelf sidetable",
           ""),
    "cellphone": ("bedroom livingroom", "armchair bed coffeetable desk diningtable drawer dresser safe "
                  "shelf sidetable sofa", ""),
    "creditcard": ("bedroom livingroom", "armchair coffeetable desk diningtable drawer dresser safe shelf "
                   "sidetable sofa", ""),
    "keychain": ("bedroom livingroom", "armchair cabinet coffeetable desk diningtable drawer dresser safe "
                 "shelf sidetable sofa", ""),
    "laptop": ("bedroom livingroom", "armchair bed coffeetable desk diningtable dresser sidetable sofa", ""),
    "newspaper": ("livingroom", "armchair coffeetable diningtable dresser garbagecan sidetable sofa tvstand",
                  ""),
    "pen": ("bedroom livingroom", "coffeetable desk drawer dresser garbagecan shelf sidetable", ""),
    "pencil": ("bedroom livingroom", "coffeetable desk drawer dresser garbagecan shelf sidetable", ""),
    "pillow": ("bedroom livingroom", "armchair bed sofa", ""),
    "remotecontrol": ("livingroom", "armchair cabinet coffeetable diningtable drawer dresser sidetable sofa "
                      "tvstand", ""),
    "statue": ("livingroom", "cabinet coffeetable desk diningtable dresser shelf sidetable tvstand", ""),
    "vase": ("livingroom", "cabinet coffeetable desk diningtable dresser shelf sidetable tvstand", ""),
    "watch": ("bedroom livingroom", "cabinet coffeetable desk drawer dresser safe shelf sidetable", ""),
    "cloth": ("bathroom bedroom", "bathtubbasin cabinet countertop drawer dresser garbagecan laundryhamper "
              "shelf sinkbasin toilet", "w"),
    "candle": ("bathroom", "bathtubbasin cabinet countertop drawer shelf toilet", ""),
    "handtowel": ("bathroom", "countertop handtowelholder", "w"),
    "soapbar": ("bathroom", "bathtubbasin cabinet countertop garbagecan shelf sinkbasin toilet", "w"),
    "spraybottle": ("bathroom", "cabinet countertop drawer garbagecan shelf toilet", ""),
    "tissuebox": ("bathroom bedroom livingroom", "cabinet coffeetable countertop desk dresser garbagecan "
                  "shelf sidetable toilet", ""),
    "toiletpaper": ("bathroom", "cabinet countertop drawer garbagecan shelf toilet toiletpaperhanger", ""),
    "towel": ("bathroom", "countertop towelholder", "w"),
    "desklamp": ("bedroom livingroom", "desk dresser sidetable", "t"),
    "floorlamp": ("bedroom livingroom", "armchair dresser sidetable sofa", "t"),
}
HOLDS: dict[str, frozenset[str]] = {o: frozenset(r.split()) for o, (_, r, _) in _OBJECT_ROWS.items()}
PROPS: dict[str, str] = {o: p for o, (_, _, p) in _OBJECT_ROWS.items()}
ROOM_OBJECTS: dict[str, tuple[str, ...]] = {
    room: tuple(o for o, (rooms, _, _) in _OBJECT_ROWS.items() if room in rooms.split()) for room in ROOMS
}


def type_of(name: str) -> str:
    """``"cabinet 13"`` -> ``"cabinet"``: every entity is shown as its type and an instance number."""
    return name.rpartition(" ")[0]


def _rank(name: str) -> tuple[str, int]:
    # ALFWorld lists things by type, higher instance numbers first ("a cabinet 2, a cabinet 1, ...").
    kind, _, n = name.rpartition(" ")
    return kind, -int(n)


@dataclass(frozen=True)
class World:
    """The fixed part of an episode: the task and the room. Treat the mappings as read-only."""

    task_id: str  # "<split>/<task type>/seed-<n>", like ALFWorld's gamefile path
    task_type: str
    goal: str  # the goal sentence, e.g. "put a clean apple in diningtable"
    obj_type: str
    recep_type: str | None  # None for the light task
    toggle_type: str | None  # the lamp type of the light task
    scene: str
    receptacles: tuple[str, ...]  # put in ALFWorld's display order on construction
    start: Mapping[str, str]  # object -> receptacle it starts in
    objects: tuple[str, ...] = field(init=False)
    kind: Mapping[str, str] = field(init=False)  # entity name -> type
    targets: tuple[str, ...] = field(init=False)  # objects of the goal type
    lamps: tuple[str, ...] = field(init=False)  # lamps of the goal toggle type

    def __post_init__(self) -> None:
        recs = tuple(sorted(set(self.receptacles) | set(self.start.values()), key=_rank))
        objects = tuple(sorted(self.start, key=_rank))
        set_ = object.__setattr__  # frozen: the derived fields are filled once, here
        set_(self, "receptacles", recs)
        set_(self, "objects", objects)
        set_(self, "start", {o: self.start[o] for o in objects})
        set_(self, "kind", {n: type_of(n) for n in (*recs, *objects)})
        set_(self, "targets", tuple(o for o in objects if type_of(o) == self.obj_type))
        set_(self, "lamps", tuple(o for o in objects if type_of(o) == self.toggle_type))

    def room(self) -> tuple[str, ...]:
        """The room's identity for the seen/unseen split: scene kind and receptacle names."""
        return (self.scene, *self.receptacles)


def room_split(room: tuple[str, ...]) -> str:
    """Which split a room belongs to: a fixed quarter of all rooms is held out for test."""
    return "test" if zlib.crc32("|".join(room).encode()) % 4 == 0 else "train"


def _task_options() -> dict[str, dict[str, list[tuple[str, str | None, str | None]]]]:
    """task type -> room -> every feasible (object type, receptacle type, lamp type)."""
    out: dict[str, dict[str, list]] = {}
    for task in TASK_TYPES:
        _, prop, appliances = PROCESSING.get(task, ("", "", ()))
        per_room: dict[str, list] = {}
        for room, recs in ROOMS.items():
            if appliances and not set(appliances) & set(recs):
                continue
            options = []
            for obj in ROOM_OBJECTS[room]:
                homes = HOLDS[obj] & set(recs)
                if "t" in PROPS[obj] or prop not in PROPS[obj] or not homes:
                    continue
                if task == LIGHT:
                    options += [(obj, None, lamp) for lamp in ("desklamp", "floorlamp")
                                if lamp in ROOM_OBJECTS[room] and HOLDS[lamp] & set(recs)]
                    continue
                for recep in sorted(homes - set(appliances)):
                    if homes - {recep}:  # the object can start somewhere that is not already the goal
                        options.append((obj, recep, None))
            if options:
                per_room[room] = options
        out[task] = per_room
    return out


TASK_OPTIONS = _task_options()


def generate(split: str, seed: int, template: int, task_types: tuple[str, ...],
             n_receptacles: tuple[int, int], n_distractors: tuple[int, int]) -> World:
    """Draw the task and room of ``seed`` in ``split``; the same arguments always give the same world."""
    rng = random.Random(f"alfworld-sim/{split}/{seed}")
    for _ in range(10_000):
        world = _draw(rng, split, seed, template, task_types, n_receptacles, n_distractors)
        if room_split(world.room()) == split:
            return world
    raise ConfigError(f"alfworld-sim: no {split} room for seed {seed} with n_receptacles={n_receptacles}; "
                      "widen the range")


def _draw(rng: random.Random, split: str, seed: int, template: int, task_types: tuple[str, ...],
          n_receptacles: tuple[int, int], n_distractors: tuple[int, int]) -> World:
    task = rng.choice(task_types)
    room = rng.choice(sorted(TASK_OPTIONS[task]))
    obj, recep, toggle = rng.choice(TASK_OPTIONS[task][room])
    capacity = ROOMS[room]
    appliances = PROCESSING.get(task, ("", "", ()))[2]

    # Receptacle types the task needs: goal, appliance, where the goal objects (and lamp) start.
    required = [t for t in (recep, rng.choice([a for a in appliances if a in capacity] or [None])) if t]
    sources = [rng.choice(sorted(HOLDS[obj] & set(capacity) - {recep}))
               for _ in range(2 if task == TWO else 1)]
    required += sources
    if toggle:
        required.append(rng.choice(sorted(HOLDS[toggle] & set(capacity))))
    counts = dict.fromkeys(required, 1)
    target = rng.randint(*n_receptacles)
    while sum(counts.values()) < target:
        spare = [t for t in sorted(capacity) if counts.get(t, 0) < capacity[t]]
        if not spare:
            break
        pick = rng.choice(spare)
        counts[pick] = counts.get(pick, 0) + 1
    recs = [f"{t} {i}" for t in sorted(counts) for i in range(1, counts[t] + 1)]

    placed: list[tuple[str, str]] = []  # (object type, receptacle)

    def place(kind: str, rtype: str | None = None) -> None:
        homes = [r for r in recs if (type_of(r) == rtype if rtype else type_of(r) in HOLDS[kind])
                 and not (kind == obj and type_of(r) == recep)]  # the goal must not hold at reset
        placed.append((kind, rng.choice(homes)))

    for source in sources:
        place(obj, source)
    if toggle:
        place(toggle, required[-1])
    pool = [o for o in ROOM_OBJECTS[room]
            if any(type_of(r) in HOLDS[o] and not (o == obj and type_of(r) == recep) for r in recs)]
    for _ in range(rng.randint(*n_distractors)):
        place(rng.choice(pool))

    numbered: dict[str, int] = {}
    start = {}
    for kind, r in placed:
        numbered[kind] = numbered.get(kind, 0) + 1
        start[f"{kind} {numbered[kind]}"] = r
    goal = GOALS[task][template].format(obj=obj, recep=recep, toggle=toggle)
    return World(task_id=f"{split}/{task}/seed-{seed}", task_type=task, goal=goal, obj_type=obj,
                 recep_type=recep, toggle_type=toggle, scene=room, receptacles=tuple(recs), start=start)
