"""The real ALFWorld engine: TextWorld's PDDL env with ALFWorld's entity names, one game at a time.

This is what alfworld's ``AlfredTWEnv`` builds for each game (alfworld:alfworld/agents/environment/
alfred_tw_env.py): a ``textworld.envs.pddl.PddlEnv`` asked for admissible commands and ``won``,
wrapped in alfworld's own ``AlfredDemangler``, which names entities ``type N``. We drive the wrapped
env directly instead of through ``textworld.gym`` so that a game can be loaded from a dict (generated
games never touch the disk) and so that the step cap, the reward and ``extra.gamefile`` (ALFWorld's
``AlfredInfos``) are handled by the prover env around it.

textworld and alfworld are imported here, on first use, never by ``import prover_alfworld``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# Predicates whose truth changes during play; the state key is built from these alone, so that
# bookkeeping facts (``checked``) do not split states that behave the same.
DYNAMIC = frozenset({"atlocation", "inreceptacle", "objectatlocation", "holds", "holdsany", "opened",
                     "ishot", "iscool", "isclean", "istoggled", "ison", "issliced"})


@contextmanager
def _argv_kept() -> Iterator[None]:
    # fast_downward.pddl2sas overwrites sys.argv (its translator reads options from it); put it back.
    saved = list(sys.argv)
    try:
        yield
    finally:
        sys.argv[:] = saved


class RealGame:
    """One TextWorld ``PddlEnv`` + ``AlfredDemangler``; ``load`` a game, then ``reset`` and ``step``.

    ``reset``/``step`` return ``(feedback, admissible commands, won)``; ``plan`` then holds the planner's
    commands from the current state to the goal. That is ALFWorld's ``planner`` expert (``AlfredExpert``
    in alfred_tw_env.py reads TextWorld's ``policy_commands``: Fast Downward replans from the true state
    at every step, about 2 ms here against about 46 ms for the step itself). Each instance loads its own
    copy of Fast Downward's library (``fast_downward.load_lib``), so instances do not share state.
    """

    def __init__(self) -> None:
        # alfworld and textworld are heavy: loaded when a game is built, not when prover reads the entry point
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
        from textworld import EnvInfos
        from textworld.envs.pddl import PddlEnv

        infos = EnvInfos(admissible_commands=True, won=True, policy_commands=True)
        self._env = AlfredDemangler(PddlEnv(infos), shuffle=False)
        self._state = None
        self.plan: list[str] = []
        self.loaded: object = None  # an identity of the loaded game, so reloading it can be skipped

    def load(self, game: dict | Path, identity: object) -> None:
        """Load a ``game.tw-pddl`` (a path, or its content as a dict)."""
        self.loaded = None  # until the load succeeds
        with _argv_kept():
            self._env.load(str(game) if isinstance(game, Path) else game)
        self.loaded = identity

    def reset(self) -> tuple[str, list[str], bool]:
        with _argv_kept():  # a reset translates the PDDL problem again
            self._state = self._env.reset()
        return self._result()

    def step(self, command: str) -> tuple[str, list[str], bool]:
        self._state, _, _ = self._env.step(command)
        return self._result()

    def facts(self) -> tuple[str, ...]:
        """The dynamic facts of the current state, sorted: a canonical identity of the state."""
        return tuple(sorted(str(f) for f in self._state["_facts"] if f.name in DYNAMIC))

    def _result(self) -> tuple[str, list[str], bool]:
        state = self._state
        self.plan = list(state["policy_commands"] or [])
        return state.feedback, list(state["admissible_commands"]), bool(state["won"])
