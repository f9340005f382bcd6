"""TextMaze: walk a small maze of named rooms, take the key, unlock the goal room.

A plugin env that is small enough for a tiny model on CPU and still has a pivotal decision: the goal
room's only door is locked and the key lies off the direct route, so an agent that heads straight for
the goal wastes its steps. It keeps the base class's replay snapshot on purpose: the dynamics depend
only on the seed, the split and the actions, which is what replay needs, and this env is the test
that replay snapshots work for an env the framework has never seen.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable

from prover.envs import AgentSpec, TextEnv
from prover.errors import ConfigError, ContractError

from prover_textmaze.layout import SPLITS, Layout, layout_for

INVALID = "You can't do that."


class TextMazeEnv(TextEnv):
    """Reward 1.0 and ``terminated`` on entering the goal room; ``truncated`` after ``max_steps``.

    Actions are ``go north|south|east|west``, ``take key`` and ``look``. Going through the locked door
    with the key unlocks it and enters the goal room. Anything else, the locked door without the key
    included, is an invalid no-op that still uses a step.
    """

    # Compact on purpose: a tiny model reads these on CPU, and every token is paid on every turn.
    agent_spec = AgentSpec(
        first_template="Task: {task}\nObservation: {observation}\nActions: {actions}",
        later_template="Task: {task}\nHistory:\n{history}\nObservation: {observation}\nActions: {actions}",
        history_entry="{observation} > {action}",
    )

    def __init__(self, max_steps: int = 30) -> None:
        if max_steps < 1:
            raise ConfigError(f"textmaze max_steps must be >= 1, got {max_steps}")
        self.max_steps = max_steps

    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        split = options.get("split", "train")
        if split not in SPLITS:
            raise ConfigError(f"textmaze split must be one of {SPLITS}, got {split!r}")
        self.split, self.seed = split, seed
        self.layout: Layout = layout_for(split, seed)
        self.room, self.has_key, self.steps, self.done = self.layout.start, False, 0, False
        lay = self.layout
        self.task = f"Take the key in {lay.where(lay.key)}, then unlock {lay.where(lay.goal)}."
        return f"{self.task} {self._describe()}", self._info(valid=True, won=False)

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self.done:
            raise ContractError("TextMazeEnv.step() after the episode ended; call reset() first")
        self.steps += 1
        act = " ".join(action.lower().split())
        moves = self._moves(self.room, self.has_key)
        if act in moves:
            was_carrying = self.has_key
            self.room, self.has_key = moves[act]
            if self.room == self.layout.goal:
                obs = f"You unlock the door and enter the {self.layout.names[self.room]}. You win!"
            else:
                obs = ("You take the key. " if self.has_key and not was_carrying else "") + self._describe()
        elif act in self._moves(self.room, True):  # the locked door, without the key
            obs = f"The door is locked; you need the key. {self._describe()}"
        else:
            obs = f"{INVALID} {self._describe()}"
        won = self.room == self.layout.goal
        truncated = not won and self.steps >= self.max_steps
        self.done = won or truncated
        return obs, float(won), won, truncated, self._info(valid=act in moves, won=won)

    def state_key(self) -> Hashable:
        """(split, seed, room, has_key). The step count is left out on purpose, so that GiGPO groups
        the same room across turns; it only matters at truncation."""
        return (self.split, self.seed, self.room, self.has_key)

    def expert_action(self) -> str | None:
        """The first step of a shortest plan (breadth-first over (room, has_key)) to the goal."""
        if self.done:
            return None
        start = (self.room, self.has_key)
        first: dict[tuple[int, bool], str | None] = {start: None}
        queue = deque([start])
        while queue:
            state = queue.popleft()
            if state[0] == self.layout.goal:
                return first[state]
            for act, nxt in sorted(self._moves(*state).items()):
                if nxt not in first:
                    first[nxt] = first[state] or act
                    queue.append(nxt)
        return None

    def _moves(self, room: int, has_key: bool) -> dict[str, tuple[int, bool]]:
        """Every admissible action in (room, has_key) and the (room, has_key) it leads to."""
        moves = {"look": (room, has_key)}
        for direction, nxt in self.layout.exits[room]:
            if nxt != self.layout.goal or has_key:
                moves[f"go {direction}"] = (nxt, has_key)
        if room == self.layout.key and not has_key:
            moves["take key"] = (room, True)
        return moves

    def _describe(self) -> str:
        exits = ", ".join(d + (" (locked)" if nxt == self.layout.goal else "")
                          for d, nxt in self.layout.exits[self.room])
        key = " The key is here." if self.room == self.layout.key and not self.has_key else ""
        return f"You are in {self.layout.where(self.room)}. Exits: {exits}.{key}"

    def _info(self, valid: bool, won: bool) -> dict:
        actions = [] if self.done else sorted(self._moves(self.room, self.has_key))
        return {"task": self.task, "admissible_actions": actions, "won": won, "is_action_valid": valid}
