"""A shortest plan from any state, with full knowledge of the room (an oracle, not a fair agent).

Every command costs one step, so a plan is short when it visits few places and opens few things. An
optimal plan for these tasks has a fixed shape: put down whatever useless object is in hand, fetch a
goal object, process it, deliver it (twice for pick-two), or for the light task carry it to a lamp and
switch the lamp on. Only the choices inside that shape are open: which instance to use, where to put
down the held object, which appliance, which goal receptacle, and whether to switch the lamp on
before or after fetching. ``plan`` draws every combination on a copy of the state with the engine's
own transitions, stops each one the moment the goal holds, and keeps the shortest (ties go to the
first drawn, so the plan is a pure function of the state). The tests check it against breadth-first
search over all commands on small rooms.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from itertools import permutations

from prover.envs.alfworld_sim.engine import State, command, is_open, transition, won
from prover.envs.alfworld_sim.world import LIGHT, PROCESSING, TWO, World


class _Sketch:
    """One candidate plan, drawn on a private copy of the state; it stops recording once won."""

    def __init__(self, world: World, state: State) -> None:
        self.world, self.state = world, state.copy()
        self.cmds: list[tuple] = []
        self.done = False

    def do(self, cmd: tuple) -> None:
        if not self.done:
            self.cmds.append(cmd)
            transition(self.state, cmd)
            self.done = won(self.world, self.state)

    def go(self, rec: str) -> None:
        here = self.world.site[rec]
        if self.state.loc != here:  # a receptacle that stands where the agent is needs no move
            self.do(("go", rec, here))

    def reach(self, rec: str) -> None:
        """Stand at ``rec`` with it open, as taking from or putting into it requires."""
        self.go(rec)
        if not is_open(self.world, self.state, rec):
            self.do(("open", rec))

    def take(self, obj: str) -> None:
        if self.state.holding != obj:
            rec = self.state.where[obj]
            self.reach(rec)
            self.do(("take", obj, rec))

    def put(self, obj: str, rec: str) -> None:
        self.reach(rec)
        self.do(("put", obj, rec))


def plan(world: World, state: State, grammar: str = "move") -> list[str]:
    """The commands of a shortest winning plan from ``state`` ([] if the task is already won)."""
    if won(world, state):
        return []
    best: list[tuple] | None = None
    for sketch in _candidates(world, state):
        if sketch.done and (best is None or len(sketch.cmds) < len(best)):
            best = sketch.cmds
    if best is None:
        raise RuntimeError(f"no plan found for {world.task_id}; this is a bug in the expert")
    return [command(cmd, grammar) for cmd in best]


def _drops(world: World, state: State, keep: tuple[str, ...]) -> list[str | None]:
    """Where the held object may be put down: nowhere if it is needed (or nothing is held)."""
    held = state.holding
    if held is None or held in keep:
        return [None]
    return [r for r in world.receptacles if world.kind[r] in world.rules.holds[world.kind[held]]]


def _candidates(world: World, state: State) -> Iterator[_Sketch]:
    held = state.holding
    recs = [r for r in world.receptacles if world.kind[r] == world.recep_type]
    if world.task_type == LIGHT:
        for obj in world.targets:
            for drop in _drops(world, state, (obj,)):
                for lamp in world.lamps:
                    for lamp_first in (False, True):
                        sk = _Sketch(world, state)
                        if drop:
                            sk.put(held, drop)
                        if lamp_first and lamp not in state.lit:
                            sk.go(state.where[lamp])
                            sk.do(("use", lamp))
                        sk.take(obj)
                        sk.go(state.where[lamp])
                        sk.do(("use", lamp))
                        yield sk
    elif world.task_type == TWO:
        for rec in recs:
            inside = [o for o in world.targets if state.where[o] == rec]
            others = [o for o in world.targets if state.where[o] != rec]
            for pair in permutations(others, 2 - len(inside)):
                if held in pair and pair[0] != held:
                    continue  # the held one goes first; anything else only drops and re-takes it
                for drop in _drops(world, state, pair):
                    sk = _Sketch(world, state)
                    if drop:
                        sk.put(held, drop)
                    for obj in pair:
                        sk.take(obj)
                        sk.put(obj, rec)
                    yield sk
    else:
        verb, _, appliance_types = PROCESSING.get(world.task_type, (None, "", ()))
        appliances = [r for r in world.receptacles if world.kind[r] in appliance_types] or [None]
        done_already = {"heat": state.hot, "cool": state.cool, "clean": state.clean}.get(verb, set())
        for obj in world.targets:
            for drop in _drops(world, state, (obj,)):
                for appliance in appliances:
                    for rec in recs:
                        sk = _Sketch(world, state)
                        if drop:
                            sk.put(held, drop)
                        sk.take(obj)
                        if verb and obj not in done_already:
                            sk.go(appliance)
                            sk.do((verb, obj, appliance))
                        sk.put(obj, rec)
                        yield sk


def observed_action(world: World, state: State, inspected: set[str], grammar: str = "move") -> str | None:
    """The next command of an expert that knows only what the agent has seen.

    The shortest plan above walks straight to objects hidden in closed cabinets, which no policy can
    learn from its observations. This expert is the one the warm start clones: it searches the
    receptacles that can hold what the task needs, in the room's listed order, opening closed ones
    (and examining one that stands where it already is), until it has seen enough (one goal object,
    two for pick-two, plus a lamp for the light task); then it follows the shortest plan over the
    objects it has seen. ``inspected`` holds the receptacles whose contents the agent has been shown.
    """
    if won(world, state):
        return None
    seen = {o for o, r in state.where.items() if r is None or r in inspected}
    targets = tuple(o for o in world.targets if o in seen)
    lamps = tuple(o for o in world.lamps if o in seen)
    need_lamp = world.task_type == LIGHT and not lamps
    if len(targets) < (2 if world.task_type == TWO else 1) or need_lamp:
        homes = world.rules.homes
        wanted = set(homes[world.obj_type]) | (set(homes[world.toggle_type]) if need_lamp else set())
        for rec in world.receptacles:
            if rec in inspected or world.kind[rec] not in wanted:
                continue
            if state.loc != world.site[rec]:
                return command(("go", rec), grammar)
            closed = world.kind[rec] in world.rules.openable and rec not in state.opened
            return command(("open" if closed else "examine", rec), grammar)
        return plan(world, state, grammar)[0]  # nothing left to search: fall back to the oracle
    view = copy.copy(world)  # the same room, restricted to the objects seen so far
    object.__setattr__(view, "targets", targets)
    object.__setattr__(view, "lamps", lamps or world.lamps)
    return plan(view, state, grammar)[0]


def inspect_after(world: World, state: State, cmd: tuple, inspected: set[str]) -> None:
    """Record what a successful command showed: a reached or examined open receptacle, or one just
    opened. (Arriving shows only the receptacle named, not the others at its location.)"""
    verb = cmd[0]
    shown = verb in ("go", "examine") and cmd[1] in world.site and is_open(world, state, cmd[1])
    if verb == "open" or shown:
        inspected.add(cmd[1])
