"""``gem``: GEM's single-player games (gem-llm 0.1.0) that run offline, as a prover env.

``game`` is a GEM id from ``GAMES`` (``"game:Sudoku-v0-easy"``; the ``game:`` prefix may be left out).
GEM's env is gymnasium-like but not a ``gymnasium.Env``: ``reset(seed)`` returns the rules and
``info["suffix"]``, where the board is; ``step`` returns feedback and the new board in ``info["suffix"]``.
The prover env shows ``feedback + "\\n" + suffix`` each turn; ``info["task"]`` is GEM's rules text.

Actions: the policy answers ``<action>2 3 4</action>`` (prover's parser) and GEM wants ``\\boxed{2 3 4}``: the
env wraps the action in ``\\boxed{}`` unless it already holds one (then it is sent as written). GEM ends the
episode on a format error (no ``\\boxed{}`` it can parse) with reward -0.1. ``format_error="noop"`` (the
default, prover's contract: an invalid action changes nothing) answers GEM's message, reports
``is_action_valid`` False and puts the game back as it was (turn counter included); ``format_error="end"``
keeps GEM's own end and its -0.1. An action GEM parses but rejects (a number out of range, a filled cell)
is GEM's business either way: its feedback and reward 0, the turn counted, ``is_action_valid`` False.

Splits: GEM has none. ``train`` plays GEM seed ``s``, ``eval`` seed ``s + 2**29``, ``test`` seed
``s + 2**30``, so the three never share a seed.

Randomness: GEM seeds and draws from the process-wide ``random`` and ``numpy.random`` (2048 places tiles,
Minesweeper its mines, during play). ``uses_global_rng = True`` declares it, for the framework's own guard;
the env also keeps its own copy of both states and swaps it in around every GEM call, so that other code
drawing between steps changes no game, and a snapshot (a deep copy of the game plus both states) is exact.
``state_key`` is a digest of the game object's attributes and of those RNG states.
Expert: binary search for the three Guess the Number ids (``prover_gem.expert``), none for the other games;
``train_recipe_for`` keeps the warm start on for those ids only (with a warm start size tuned for the tiny
policy) and turns it off for every other game.
"""

from __future__ import annotations

import copy
import hashlib
import random
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from prover.envs import AgentSpec, TextEnv
from prover.envs.base import MAX_TEXT, TEXT_CHARSET
from prover.errors import ConfigError, ContractError

from prover_gem.canon import canonical
from prover_gem.expert import EXPERT_GAMES, guess_the_number_move

# GEM's game ids that run here without a download (the Wordle, Hangman and WordSearch ids need NLTK's
# `words` corpus; FifteenPuzzle-v0-random and Crosswords-v0-random fail in gem-llm 0.1.0 itself).
GAMES = tuple(f"game:{name}" for name in (
    "GuessTheNumber-v0-easy", "GuessTheNumber-v0-hard", "GuessTheNumber-v0-random",
    "Mastermind-v0-easy", "Mastermind-v0-hard", "Mastermind-v0-random",
    "Minesweeper-v0-easy", "Minesweeper-v0-hard", "Minesweeper-v0-random",
    "FifteenPuzzle-v0-easy", "FifteenPuzzle-v0-hard",
    "Sudoku-v0-easy", "Sudoku-v0-hard", "Sudoku-v0-random",
    "TowerofHanoi-v0-easy", "TowerofHanoi-v0-hard", "TowerofHanoi-v0-random",
    "Game2048-v0-easy", "Game2048-v0-hard", "Game2048-v0-extreme-hard", "Game2048-v0-random",
    "Sokoban-v0-easy", "Sokoban-v0-hard", "Sokoban-v0-random",
    "Crosswords-v0-easy", "Crosswords-v0-hard"))
DEFAULT_GAME = "game:GuessTheNumber-v0-easy"
SPLIT_OFFSET = {"train": 0, "eval": 1 << 29, "test": 1 << 30}
FORMAT_ERRORS = ("noop", "end")
FORMAT_ERROR_REWARD = -0.1  # gem.utils.constants.LanguageGameReward.format_error_reward

SPEC = AgentSpec(
    first_template="{observation}\nAnswer with <action>your move</action> (what goes inside \\boxed{{}}).",
    later_template="Rules: {task}\nStep {step}. Recent history:\n{history}\nNow: {observation}\n"
                   "Answer with <action>your move</action> (what goes inside \\boxed{{}}).",
    lowercase=False,  # GEM's moves are case-sensitive in places (Crosswords' letters, Sokoban's words)
)


def full_id(game: str) -> str:
    """A GEM id with its ``game:`` prefix, which may be left out."""
    return game if game.startswith("game:") else f"game:{game}"


@dataclass(frozen=True)
class GemSnapshot:
    game: Any  # a deep copy of the GEM env
    rng: tuple  # (random's state, numpy's legacy state)
    fields: tuple  # the prover env's own fields
    record: tuple  # the replay record


class GemEnv(TextEnv):
    """A GEM game; see the module docstring."""

    native_snapshot = True
    uses_global_rng = True
    agent_spec = SPEC
    # Sokoban marks a box on its goal with '√' (the only character past ASCII that the listed games write)
    observation_space = spaces.Text(max_length=MAX_TEXT, charset=TEXT_CHARSET | {"√"})
    # binary search plays on from any guesses (it follows no fixed plan): expert_follows_plan stays False
    EXPERT_RECIPE: ClassVar[dict[str, Any]] = {"warmstart.episodes": 300}

    @classmethod
    def train_recipe_for(cls, kwargs: dict) -> dict[str, Any]:
        """The warm start (sized for the tiny policy) for the games with an expert; off for the others."""
        game = str(kwargs.get("game", DEFAULT_GAME))
        return dict(cls.EXPERT_RECIPE) if full_id(game) in EXPERT_GAMES else {"warmstart.enabled": False}

    def __init__(self, *, game: str = DEFAULT_GAME, format_error: str = "noop") -> None:
        game = full_id(game)
        if game not in GAMES:
            raise ConfigError(f"gem: game {game!r} is not one this env runs offline; choose one of {list(GAMES)}")
        if format_error not in FORMAT_ERRORS:
            raise ConfigError(f"gem: unknown format_error {format_error!r}; choose one of {list(FORMAT_ERRORS)}")
        self.game, self.format_error = game, format_error
        self._gem: Any = None
        self._rng: tuple | None = None
        self.task = ""

    @contextmanager
    def _own_rng(self) -> Iterator[None]:
        """Run GEM with this env's random and numpy states, then give the process its own back."""
        outside = (random.getstate(), np.random.get_state())
        random.setstate(self._rng[0])
        np.random.set_state(self._rng[1])
        try:
            yield
        finally:
            self._rng = (random.getstate(), np.random.get_state())
            random.setstate(outside[0])
            np.random.set_state(outside[1])

    # -- the gym API -----------------------------------------------------------------------------
    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        split = options.get("split", "train")
        if split not in SPLIT_OFFSET:
            raise ConfigError(f"gem: unknown split {split!r}; choose one of {sorted(SPLIT_OFFSET)}")
        if self._gem is None:
            import gem  # gem imports reasoning_gym, nltk and sympy: seconds, so only when a game is played

            self._rng = (random.getstate(), np.random.get_state())
            with self._own_rng():
                self._gem = gem.make(self.game)
        self._rng = (random.getstate(), np.random.get_state())  # GEM's reset seeds both from the seed
        with self._own_rng():
            rules, info = self._gem.reset(seed=seed + SPLIT_OFFSET[split])
        self.task, self.gem_seed = rules.strip(), seed + SPLIT_OFFSET[split]
        self.won = self.done = False
        return f"{self.task}\n{info.get('suffix', '')}".strip(), self._info(True)

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self.done:
            raise ContractError("GemEnv.step() after the episode ended; call reset() first")
        move = action if "\\boxed{" in action else f"\\boxed{{{action}}}"
        before = self._save() if self.format_error == "noop" else None
        with self._own_rng():
            feedback, reward, terminated, truncated, info = self._gem.step(move)
        format_error = terminated and float(reward) == FORMAT_ERROR_REWARD
        if format_error and before is not None:  # put the game back: an invalid action changes nothing
            self._load(before)
            return feedback.strip(), 0.0, False, False, self._info(False)
        self.won = float(reward) >= 1.0 and terminated  # LanguageGameReward.success_reward ends the game
        self.done = bool(terminated or truncated)
        valid = not format_error and not self._rejected(feedback)
        obs = f"{feedback.strip()}\n{info.get('suffix', '')}".strip()
        return obs, float(reward), bool(terminated), bool(truncated) and not terminated, self._info(valid)

    @staticmethod
    def _rejected(feedback: str) -> bool:
        """GEM's words for a move it parsed and refused (its games share them: 'invalid', 'not valid',
        'outside the range', 'already')."""
        text = feedback.lower()
        return any(w in text for w in ("invalid", "not valid", "outside the range", "already"))

    def expert_action(self) -> str | None:
        """Binary search's next guess in Guess the Number (``prover_gem.expert``); None in the other games
        and once the episode ended."""
        if self._gem is None or self.done or self.game not in EXPERT_GAMES:
            return None
        return guess_the_number_move(self._gem.unwrapped)

    def _info(self, valid: bool) -> dict:
        return {"won": self.won, "is_action_valid": valid, "task": self.task, "game": self.game}

    def state_key(self) -> Hashable:
        """A digest of the game's attributes (board, turn, target) and of the RNG states it draws from."""
        if self._gem is None:
            raise ContractError("GemEnv.state_key() called before reset()")
        text = repr((canonical(vars(self._gem.unwrapped)), canonical(self._rng), self.won, self.done))
        return (self.game, self.gem_seed, hashlib.sha256(text.encode()).hexdigest())

    # -- native snapshots ------------------------------------------------------------------------
    def _save(self) -> GemSnapshot:
        fields = (self.task, self.gem_seed, self.won, self.done)
        return GemSnapshot(copy.deepcopy(self._gem), copy.deepcopy(self._rng), fields, self.replay_record())

    def _load(self, snap: GemSnapshot) -> None:
        self._gem, self._rng = copy.deepcopy(snap.game), copy.deepcopy(snap.rng)
        self.task, self.gem_seed, self.won, self.done = snap.fields

    def snapshot(self) -> GemSnapshot:
        if self._gem is None:
            raise ContractError("GemEnv.snapshot() called before reset()")
        return self._save()

    def restore(self, snapshot: Any) -> None:
        if not isinstance(snapshot, GemSnapshot):
            raise ContractError(f"GemEnv.restore() got {type(snapshot).__name__}, expected a GemSnapshot")
        self._load(snapshot)
        self.set_replay_record(snapshot.record)
