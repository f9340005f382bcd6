"""One TextWorld-Express JVM, driven through py4j calls on its ``PythonInterface``.

``textworld_express.TextWorldExpressEnv`` starts the JVM (its bundled ``textworld-express.jar``) and holds the
gateway; we call the interface's methods ourselves (textworld_express/textworld_express.py calls the same
ones) so that each step is one JVM call and the fold's seeds, the gold path and the game's objects are at hand.

textworld_express (and so py4j and a JVM) is imported here, on first use, never by ``import prover_twx``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
from typing import Any, ClassVar

from prover.errors import ConfigError

GAMES = ("cookingworld", "coin", "twc", "mapreader", "arithmetic", "sorting", "simonsays", "peckingorder")
# prover's split -> TWX's gameFold; each fold has its own 1000 generation seeds (train 0-999, dev
# 10000-10999, test 20000-20999 for every game); 'eval' is prover's name for a held-out validation split.
FOLDS = {"train": "train", "dev": "dev", "eval": "dev", "valid": "dev", "test": "test"}
# Games whose world is more than the room the agent stands in: every room is part of the state.
MULTI_ROOM = frozenset({"cookingworld", "coin", "twc", "mapreader"})


class TwxEngine:
    """A JVM running TextWorld-Express. ``started`` counts the JVMs this process launched (one per engine)."""

    started: ClassVar[int] = 0
    _count_lock = threading.Lock()

    def __init__(self) -> None:
        if shutil.which("java") is None:
            raise ConfigError("twx: TextWorld-Express runs on Java (17 or later) and `java` is not on PATH; "
                              "install a JRE (Debian: apt-get install default-jre-headless)")
        from textworld_express import TextWorldExpressEnv  # lazy: its Java bridge, only once java is found

        self._twx = TextWorldExpressEnv(envStepLimit=10**9)  # the prover env counts steps itself
        self.server = self._twx.server
        with TwxEngine._count_lock:
            TwxEngine.started += 1
        self.loaded: tuple[str, str] | None = None
        self._seeds: dict[tuple[str, str, str], list[int]] = {}

    def load(self, game: str, params: str) -> None:
        """Make ``game`` with generation ``params`` (TWX's "key=value,..." string) the current game."""
        if self.loaded == (game, params):
            return
        message = self.server.load(game, params)
        if message:
            raise ConfigError(f"twx: TextWorld-Express refused game {game!r} with params {params!r}: "
                              f"{' '.join(str(message).split())}")
        self.loaded = (game, params)

    def fold_seeds(self, fold: str) -> list[int]:
        """The generation seeds of ``fold`` for the loaded game (TWX's getSeedsTrain/Dev/Test)."""
        key = (*self.loaded, fold)
        if key not in self._seeds:
            getter = {"train": self.server.getSeedsTrain, "dev": self.server.getSeedsDev,
                      "test": self.server.getSeedsTest}[fold]
            self._seeds[key] = [int(s) for s in getter()]
        return self._seeds[key]

    def new_game(self, generation_seed: int, fold: str) -> dict[str, Any]:
        """Generate the game of ``generation_seed`` in ``fold`` (gold path included) and return its first step."""
        out = json.loads(self.server.generateNewGameJSON(generation_seed, fold, True))
        played = int(self.properties().get("seed", -1))
        if played == -1:  # TWX's load() accepts a malformed value ("numLocations=x") and then makes nothing
            raise ConfigError(f"twx: TextWorld-Express made no {self.loaded[0]!r} game from params "
                              f"{self.loaded[1]!r}; check each value (TWX's README lists them)")
        if played != generation_seed:  # the engine would otherwise play a game the fold does not hold
            raise ConfigError(f"twx: asked for generation seed {generation_seed} of fold {fold!r}, "
                              f"the engine generated seed {played}")
        return out

    def step(self, action: str) -> dict[str, Any]:
        return json.loads(self.server.stepJSON(action))

    def properties(self) -> dict[str, Any]:
        return json.loads(self.server.getGenerationPropertiesJSON())

    def task(self) -> str:
        return str(self.server.getTaskDescription())

    def gold(self) -> list[str]:
        return [str(a) for a in self.server.getGoldActionSequence()]

    def world(self) -> str:
        """A digest of the game's objects as the engine holds them (not the text it shows): every room with
        its contents, doors and flags (open, cut, cooked, ...), the agent's room and inventory, and what the
        game's scorer keeps beside them. Simon Says has no world, only the index of the instruction the agent
        is at (``currentStep``)."""
        game = self.server.game()
        game_name = self.loaded[0]
        if game_name == "simonsays":
            parts = [str(game.currentStep())]
        else:
            rooms = game.locations() if game_name in MULTI_ROOM else [game.agentLocation()]
            parts = [str(game.agentLocation().name()), str(game.agentInventory().toJSON())]
            parts += [str(room.toJSON()) for room in rooms]
        parts += self._scored_state(game, game_name)
        return hashlib.sha256("\x00".join(parts).encode()).hexdigest()

    @staticmethod
    def _scored_state(game, game_name: str) -> list[str]:
        """What a game's scorer reads that the objects' JSON leaves out (javap of its Scoring class): whether
        the math problem was read (arithmetic wins only after it), the instruction book's reading, and the
        ingredients cookingworld has counted as found (a flag that stays set once an ingredient is taken)."""
        if game_name == "arithmetic":
            return [str(game.scorer().mathProblemObj().hasBeenRead())]
        if game_name == "peckingorder":
            return [str(game.instructionBook().hasBeenRead())]
        if game_name == "cookingworld":
            return [str(list(game.scorer().ingredientsFound())), str(game.scorer().maxScoreFromPrep())]
        return []

    def close(self) -> None:
        try:
            self._twx.close()
        except Exception:  # noqa: BLE001 - the JVM may already be gone (interpreter exit); nothing to free
            pass
