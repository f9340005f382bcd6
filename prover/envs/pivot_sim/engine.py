"""pivot-sim's rules and text: the state, the admissible actions, the transition and the feedback.

Everything here is a pure function of a ``World`` and an immutable ``State``, so the env, the expert
and the search for pivotal turns (``search``) share one set of rules, a state is its own snapshot, and
states can key a memo table.

Rules. At an open station (the next rack not yet used) the agent may take one of the rack's items,
which closes the rack for good; "go forward" is refused there. Elsewhere "go forward" moves one cell
on. Three fillers ("look", "wait", "check bag") change nothing but a turn. Every turn, valid or not,
counts against ``max_steps``. Arriving at the vault (position W) ends the episode: won when every item
taken is the right one and the vault does not jam (the ``jammed`` draw, probability ``noise``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from prover.envs.pivot_sim.world import Station, World, listing

FORWARD_ACTION = "go forward"
FILLERS = ("check bag", "look", "wait")
# Move codes: a take is the item's index on the rack (>= 0); the rest are negative.
FORWARD, LOOK, WAIT, BAG, INVALID = -1, -2, -3, -4, -5
FILLER_CODES = {"look": LOOK, "wait": WAIT, "check bag": BAG}
WALK_MENU = {FORWARD_ACTION: FORWARD, **FILLER_CODES}
WALK_ACTIONS = tuple(sorted(WALK_MENU))

NOTHING = "Nothing happens."
GATE = "A gate blocks the way: take an item from the rack first."
TASK = "Take the right items from the racks and open the vault at the end of the corridor."


class State(NamedTuple):
    pos: int  # cells walked; the vault is at world.length
    taken: tuple[int, ...]  # rack index of the item taken at each station passed so far
    steps: int  # turns used, invalid ones included
    done: bool  # the episode ended: at the vault, or out of turns
    won: bool


INITIAL = State(0, (), 0, False, False)


def open_station(world: World, state: State) -> int | None:
    """The station whose rack is open where the agent stands, or None."""
    i = len(state.taken)
    return i if i < len(world.positions) and world.positions[i] == state.pos else None


@lru_cache(maxsize=4096)
def station_menu(station: Station) -> tuple[dict[str, int], tuple[str, ...]]:
    menu = {f"take {item}": j for j, item in enumerate(station.options)}
    menu.update(FILLER_CODES)
    return menu, tuple(sorted(menu))


def choices(world: World, state: State) -> tuple[dict[str, int], tuple[str, ...]]:
    """(action text -> move code, the sorted admissible actions) in ``state``; nothing once done."""
    if state.done:
        return {}, ()
    i = open_station(world, state)
    return (WALK_MENU, WALK_ACTIONS) if i is None else station_menu(world.stations[i])


def all_right(world: World, taken: tuple[int, ...]) -> bool:
    return len(taken) == len(world.stations) and all(t == s.right for t, s in zip(taken, world.stations))


def arrives(world: World, state: State, code: int) -> bool:
    """Whether this move reaches the vault (where the noise is drawn)."""
    return code == FORWARD and state.pos + 1 == world.length


def advance(world: World, state: State, code: int, jammed: bool = False) -> State:
    """The state after move ``code`` (INVALID is a no-op that still uses a turn)."""
    pos, taken, steps = state.pos, state.taken, state.steps + 1
    if code == FORWARD:
        pos += 1
    elif code >= 0:
        taken = (*taken, code)
    if pos == world.length:
        return State(pos, taken, steps, True, not jammed and all_right(world, taken))
    return State(pos, taken, steps, steps >= world.max_steps, False)


def outcomes(world: World, state: State, code: int) -> list[tuple[float, State]]:
    """The chance outcomes of a move: the vault jams with probability ``noise``, whatever was taken."""
    nxt = advance(world, state, code)
    if nxt.won and world.noise > 0.0:
        return [(1.0 - world.noise, nxt), (world.noise, advance(world, state, code, jammed=True))]
    return [(1.0, nxt)]


# -- text -----------------------------------------------------------------------------------------
def describe(world: World, state: State) -> str:
    """What the agent sees where it stands (the answer to "look")."""
    i = open_station(world, state)
    if i is not None:
        rack = world.stations[i].rack
        return f"{rack} {world.clue}" if world.clue_mode == "visible" else rack
    ahead = world.length - state.pos
    here = "The rack here is closed. " if state.pos in world.positions else ""
    return f"{here}The vault is {ahead} step{'s' if ahead > 1 else ''} ahead."


def welcome(world: World) -> str:
    """The first observation: the clue on a sign, in both clue modes, then the first cell."""
    return f"You enter a corridor. A sign reads: {world.clue} {describe(world, INITIAL)}"


def feedback(world: World, before: State, code: int, after: State, jammed: bool) -> str:
    """The observation after a move from ``before`` to ``after``."""
    if code == INVALID:
        return GATE if open_station(world, before) is not None else NOTHING
    if code >= 0:
        return f"You take the {world.stations[len(before.taken)].options[code]}. The rack closes."
    if code == FORWARD:
        if after.pos < world.length:
            return "You walk forward. " + describe(world, after)
        if after.won:
            return "You reach the vault. It takes your items and opens. You win!"
        return "You reach the vault. It " + ("jams" if jammed else "rejects your items") + " and stays shut."
    if code == BAG:
        items = [f"the {world.stations[i].options[t]}" for i, t in enumerate(before.taken)]
        return f"You carry {listing(items)}." if items else "Your bag is empty."
    if code == WAIT:
        return "You wait. Nothing changes."
    return describe(world, after)
