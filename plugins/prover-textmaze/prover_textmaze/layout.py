"""Procedural TextMaze layouts: a grid of named rooms, a key, and a goal room behind a locked door.

The maze is a spanning tree (randomised depth-first carving), so there is exactly one way into the
goal room, a dead end; locking that door makes the key necessary. The key lies off the direct route,
so walking to it first is the episode's pivotal decision. The expert plan from the start is capped
at ``MAX_PLAN`` steps so a 30-step episode leaves room for mistakes.

Splits are disjoint by construction: a layout's split is a hash of its structure (walls, start, key,
goal; not the room names), and ``layout_for`` draws candidates until one of the asked split comes up,
so a test maze is never a train maze, not even a renamed one.
"""

from __future__ import annotations

import hashlib
import random
from collections import deque
from dataclasses import dataclass
from functools import lru_cache

DIRS = {"north": (-1, 0), "south": (1, 0), "east": (0, 1), "west": (0, -1)}
OPPOSITE = {"north": "south", "south": "north", "east": "west", "west": "east"}
ROOM_NAMES = (
    "armory", "attic", "ballroom", "bathroom", "bedroom", "cellar", "chapel", "courtyard", "crypt",
    "dungeon", "foyer", "gallery", "garden", "greenhouse", "hall", "kennel", "kitchen", "laundry",
    "library", "lounge", "nursery", "office", "pantry", "parlor", "stable", "storeroom", "study",
    "tower", "vault", "workshop",
)
SIDES = (4, 5)  # rows and columns are each drawn from these: 4x4 to 5x5 rooms
GOAL_DIST = (3, 8)  # goal room's distance from the start, in moves
MAX_PLAN = 16  # expert steps from the start: to the key, take it, to the goal
TEST_SHARE = 5  # one structure in five belongs to the test split
SPLITS = ("train", "test")


@dataclass(frozen=True)
class Layout:
    """One maze. Rooms are numbered ``row * cols + col``; row 0 is the north edge."""

    rows: int
    cols: int
    exits: tuple[tuple[tuple[str, int], ...], ...]  # per room: (direction, neighbour), by direction
    names: tuple[str, ...]
    start: int
    key: int
    goal: int

    def where(self, room: int) -> str:
        """``"the kitchen (2,3)"``: name and (row,col), so the agent can steer by coordinates."""
        row, col = divmod(room, self.cols)
        return f"the {self.names[room]} ({row},{col})"

    @property
    def split(self) -> str:
        structure = (self.rows, self.cols, self.exits, self.start, self.key, self.goal)
        digest = hashlib.sha256(repr(structure).encode()).hexdigest()
        return "test" if int(digest, 16) % TEST_SHARE == 0 else "train"


def _carve(rng: random.Random, rows: int, cols: int) -> list[dict[str, int]]:
    """A perfect maze by randomised depth-first search: every room reachable by exactly one path."""
    exits: list[dict[str, int]] = [{} for _ in range(rows * cols)]
    first = rng.randrange(rows * cols)
    seen, stack = {first}, [first]
    while stack:
        row, col = divmod(stack[-1], cols)
        fresh = [(d, (row + dr) * cols + col + dc) for d, (dr, dc) in DIRS.items()
                 if 0 <= row + dr < rows and 0 <= col + dc < cols
                 and (row + dr) * cols + col + dc not in seen]
        if not fresh:
            stack.pop()
            continue
        d, nxt = rng.choice(fresh)
        exits[stack[-1]][d], exits[nxt][OPPOSITE[d]] = nxt, stack[-1]
        seen.add(nxt)
        stack.append(nxt)
    return exits


def _distances(exits: list[dict[str, int]], source: int) -> list[int]:
    dist = [-1] * len(exits)
    dist[source] = 0
    queue = deque([source])
    while queue:
        room = queue.popleft()
        for nxt in exits[room].values():
            if dist[nxt] < 0:
                dist[nxt] = dist[room] + 1
                queue.append(nxt)
    return dist


def _draw(rng: random.Random) -> Layout | None:
    """One candidate layout, or None when this maze has no start/goal/key that fits the caps."""
    rows, cols = rng.choice(SIDES), rng.choice(SIDES)
    exits = _carve(rng, rows, cols)
    rooms = range(rows * cols)
    for _ in range(10):
        start = rng.randrange(rows * cols)
        from_start = _distances(exits, start)
        goals = [g for g in rooms if len(exits[g]) == 1 and GOAL_DIST[0] <= from_start[g] <= GOAL_DIST[1]]
        if not goals:
            continue
        goal = rng.choice(goals)
        from_goal = _distances(exits, goal)
        route = from_start[goal]  # in a tree, k is on the route iff the distances add up
        keys = [k for k in rooms if from_start[k] + from_goal[k] > route
                and from_start[k] + 1 + from_goal[k] <= MAX_PLAN]
        if keys:
            return Layout(rows, cols, tuple(tuple(sorted(e.items())) for e in exits),
                          tuple(rng.sample(ROOM_NAMES, rows * cols)), start, rng.choice(keys), goal)
    return None


@lru_cache(maxsize=4096)  # replay snapshots reset often; a test layout costs ~0.5 ms to draw
def layout_for(split: str, seed: int) -> Layout:
    """The layout of task ``seed`` in ``split``; the same pair always gives the same layout."""
    attempt = 0
    while True:
        layout = _draw(random.Random(f"textmaze/{split}/{seed}/{attempt}"))
        if layout is not None and layout.split == split:
            return layout
        attempt += 1
