"""What an ALFWorld room holds, and how one task and its room are drawn from a seed.

The tables live in ``rules.py`` (ALFWorld's, from ``alfred.py``, by default; the sim's first ones,
``rules_v1.py``, for ``alfworld-sim-v1``): room kinds and the receptacle types each has, where each
object type can be put (ALFWorld's ``canContain``) and what can be heated, cooled, cleaned or switched
on.

A ``World`` is everything about an episode that never changes: the task, the receptacles and where
they stand, the objects and where they start. The mutable part lives in ``engine.State``. A location
is named by its first receptacle in display order; under ALFWorld's rules several receptacles may
stand at one location (two stove burners, a coffee machine on a countertop), as in ALFWorld's games.

Seen and unseen rooms: ALFWorld's unseen split holds rooms never trained on. Here a room is the set of
receptacle names of a scene kind, and a checksum of it puts every room in exactly one split, so no
train seed can ever produce a test room (``room_split``). Drawing a task for a split redraws until the
room falls in that split.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from prover.envs.alfworld_sim.rules import GOALS, LIGHT, PROCESSING, RULES, TASK_TYPES, TWO, Rules, get_rules
from prover.errors import ConfigError

__all__ = ["GOALS", "LIGHT", "PROCESSING", "TASK_TYPES", "TWO", "World", "generate", "room_split", "type_of"]


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
    rules: Rules = RULES["alfworld"]
    sites: Mapping[str, str] = field(default_factory=dict)  # receptacle -> one it stands with (else alone)
    objects: tuple[str, ...] = field(init=False)
    kind: Mapping[str, str] = field(init=False)  # entity name -> type
    targets: tuple[str, ...] = field(init=False)  # objects of the goal type
    lamps: tuple[str, ...] = field(init=False)  # lamps of the goal toggle type
    site: Mapping[str, str] = field(init=False)  # receptacle -> its location (the first receptacle there)
    at: Mapping[str, tuple[str, ...]] = field(init=False)  # location -> the receptacles there, in order
    portable: frozenset[str] = field(init=False)  # objects that can be picked up
    switches: frozenset[str] = field(init=False)  # lamps that can be switched on

    def __post_init__(self) -> None:
        recs = tuple(sorted(set(self.receptacles) | set(self.start.values()), key=_rank))
        objects = tuple(sorted(self.start, key=_rank))
        kind = {n: type_of(n) for n in (*recs, *objects)}
        groups: dict[str, list[str]] = {}
        for rec in recs:
            groups.setdefault(self.sites.get(rec, rec), []).append(rec)
        props = self.rules.props
        set_ = object.__setattr__  # frozen: the derived fields are filled once, here
        set_(self, "receptacles", recs)
        set_(self, "objects", objects)
        set_(self, "start", {o: self.start[o] for o in objects})
        set_(self, "kind", kind)
        set_(self, "targets", tuple(o for o in objects if kind[o] == self.obj_type))
        set_(self, "lamps", tuple(o for o in objects if kind[o] == self.toggle_type))
        set_(self, "site", {rec: group[0] for group in groups.values() for rec in group})
        set_(self, "at", {group[0]: tuple(group) for group in groups.values()})
        set_(self, "portable", frozenset(o for o in objects if kind[o] in self.rules.portable))
        set_(self, "switches", frozenset(o for o in objects if "t" in props[kind[o]]
                                         and (self.rules.all_lamps or kind[o] == self.toggle_type)))

    def room(self) -> tuple[str, ...]:
        """The room's identity for the seen/unseen split: scene kind and receptacle names."""
        return (self.scene, *self.receptacles)


def room_split(room: tuple[str, ...]) -> str:
    """Which split a room belongs to: a fixed quarter of all rooms is held out for test."""
    return "test" if zlib.crc32("|".join(room).encode()) % 4 == 0 else "train"


def generate(split: str, seed: int, template: int, task_types: tuple[str, ...],
             n_receptacles: tuple[int, int], n_distractors: tuple[int, int],
             rules: str = "alfworld") -> World:
    """Draw the task and room of ``seed`` in ``split``; the same arguments always give the same world."""
    chosen = get_rules(rules)
    rng = random.Random(f"alfworld-sim/{split}/{seed}")
    for _ in range(10_000):
        world = _draw(rng, chosen, split, seed, template, task_types, n_receptacles, n_distractors)
        if room_split(world.room()) == split:
            return world
    raise ConfigError(f"alfworld-sim: no {split} room for seed {seed} with n_receptacles={n_receptacles}; "
                      "widen the range")


def _receptacles(rng: random.Random, rules: Rules, room: str, required: list[str], target: int) -> list[str]:
    """The room's receptacles: one of each required type, then more drawn up to ``target``."""
    capacity, weights = rules.rooms[room], rules.weights
    counts = dict.fromkeys(required, 1)
    while sum(counts.values()) < target:
        spare = [t for t in sorted(capacity) if counts.get(t, 0) < capacity[t]]
        if not spare:
            break
        # v1 draws the extra types evenly; ALFWorld's rooms are mostly cabinets and drawers
        pick = rng.choice(spare) if weights is None else rng.choices(spare, [weights[room][t] for t in spare])[0]
        counts[pick] = counts.get(pick, 0) + 1
    return [f"{t} {i}" for t in sorted(counts) for i in range(1, counts[t] + 1)]


def _sites(rng: random.Random, rules: Rules, recs: list[str]) -> dict[str, str]:
    """Which receptacles stand together: each joins the first earlier one it draws to share with, at
    the rate ALFWorld's games pair their types."""
    site: dict[str, str] = {}
    for j, rec in enumerate(recs):
        site[rec] = rec
        for other in recs[:j]:
            rate = rules.shared.get(tuple(sorted((type_of(other), type_of(rec)))))
            if rate and rng.random() < rate:
                site[rec] = site[other]
                break
    return site


def _draw(rng: random.Random, rules: Rules, split: str, seed: int, template: int, task_types: tuple[str, ...],
          n_receptacles: tuple[int, int], n_distractors: tuple[int, int]) -> World:
    task = rng.choice(task_types)
    room = rng.choice(sorted(rules.options[task]))
    obj, recep, toggle = rng.choice(rules.options[task][room])
    capacity, homes = rules.rooms[room], rules.homes
    appliances = PROCESSING.get(task, ("", "", ()))[2]

    # Receptacle types the task needs: goal, appliance, where the goal objects (and lamp) start.
    required = [t for t in (recep, rng.choice([a for a in appliances if a in capacity] or [None])) if t]
    sources = [rng.choice(sorted(homes[obj] & set(capacity) - {recep}))
               for _ in range(2 if task == TWO else 1)]
    required += sources
    if toggle:
        required.append(rng.choice(sorted(homes[toggle] & set(capacity))))
    recs = _receptacles(rng, rules, room, required, rng.randint(*n_receptacles))
    sites = _sites(rng, rules, recs) if rules.shared else {}

    placed: list[tuple[str, str]] = []  # (object type, receptacle)

    def place(kind: str, rtype: str | None = None) -> None:
        spots = [r for r in recs if (type_of(r) == rtype if rtype else type_of(r) in homes[kind])
                 and not (kind == obj and type_of(r) == recep)]  # the goal must not hold at reset
        placed.append((kind, rng.choice(spots)))

    for source in sources:
        place(obj, source)
    if toggle:
        place(toggle, required[-1])
    pool = [o for o in rules.room_objects[room]
            if any(type_of(r) in homes[o] and not (o == obj and type_of(r) == recep) for r in recs)]
    for _ in range(rng.randint(*n_distractors)):
        place(rng.choice(pool))

    numbered: dict[str, int] = {}
    start = {}
    for kind, r in placed:
        numbered[kind] = numbered.get(kind, 0) + 1
        start[f"{kind} {numbered[kind]}"] = r
    goal = GOALS[task][template].format(obj=obj, recep=recep, toggle=toggle)
    return World(task_id=f"{split}/{task}/seed-{seed}", task_type=task, goal=goal, obj_type=obj,
                 recep_type=recep, toggle_type=toggle, scene=room, receptacles=tuple(recs), start=start,
                 rules=rules, sites=sites)
