"""``twx``: TextWorld-Express's eight games on its own Java engine, as a prover env.

``game`` picks one of ``GAMES`` (cookingworld, coin, twc, mapreader, arithmetic, sorting, simonsays,
peckingorder); ``game_params`` is TWX's generation string (``"numLocations=5,includeDoors=0"``; "" = TWX's
defaults). ``reset(seed=s, options={"split": ...})`` plays seed ``s mod 1000`` *of the split's fold*: prover's
``train`` is TWX's train fold (generation seeds 0-999), ``eval`` (also ``dev``/``valid``) its dev fold
(10000-10999) and ``test`` its test fold (20000-20999). The fold's seeds come from TWX's own ``getSeeds*``:
passing ``gameFold="test"`` with seed 0 would play generation seed 0, a train game.

Reward: ``reward="success"`` (the default) gives 1.0 on the step the task succeeds; ``reward="score"`` gives
TWX's own reward, the change of its normalised score (partial credit, negative for some mistakes). The
episode is ``terminated`` when TWX reports success or failure, ``truncated`` after ``max_steps``.
``info["score"]`` is TWX's score either way.

Actions: the admissible list is TWX's ``validActions``, sorted and without repeats (TWX lists some twice,
in an order of its own). An action that is not in it is not sent to the engine: the env answers TWX's
own words for an unknown command and nothing changes (TWX's Simon Says would count it as a turn).

The expert (for the warm start) is TWX's gold path. TWX draws it anew at each generation, unseeded; the env
keeps the first one it sees per game, so it is fixed within a process but not across processes. The expert's
action is the gold action after the last gold-path state equal to the current one (by ``state_key``, so a
look or an unknown command keeps the agent on the path); off the path there is none (None). TWX cannot save
or set a state, so snapshots are the base class's replay (seed, options, actions); a replay step takes about as long
as a step. ``state_key`` is a digest of the engine's objects (``engine.TwxEngine.world``), not of the text.

One env is one JVM (its first reset, JVM start included, took 1.5 s here; about 90 MB resident): it starts
on the first reset and stops on ``close``.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, ClassVar

from prover.envs import TextEnv
from prover.errors import ConfigError, ContractError

from prover_twx.engine import FOLDS, GAMES, TwxEngine

UNKNOWN = "Unknown action: I'm not sure what you mean."  # TWX's answer to a command it cannot parse
REWARDS = ("success", "score")


class TwxEnv(TextEnv):
    """TextWorld-Express on its Java engine; see the module docstring."""

    native_snapshot = False
    # off the gold path there is no expert: a warm start with random actions ends such an episode at the
    # action that left the path (expert_follows_plan), so the recipe clones the gold path unperturbed
    expert_follows_plan: ClassVar[bool] = True
    train_recipe: ClassVar[dict[str, Any]] = {"warmstart.random_action_share": 0.0}

    def __init__(self, *, game: str = "coin", game_params: str = "", max_steps: int = 50,
                 reward: str = "success") -> None:
        if game not in GAMES:
            raise ConfigError(f"twx: unknown game {game!r}; choose one of {list(GAMES)}")
        if reward not in REWARDS:
            raise ConfigError(f"twx: unknown reward {reward!r}; choose one of {list(REWARDS)}")
        if max_steps < 1:
            raise ConfigError(f"twx: max_steps={max_steps} must be at least 1")
        self.game, self.game_params, self.max_steps, self.reward = game, game_params, max_steps, reward
        self._engine: TwxEngine | None = None
        self._gold_keys: list[Hashable] | None = None
        self._golds: dict[str, tuple[str, ...]] = {}
        self.task_id: str | None = None

    # -- the gym API -----------------------------------------------------------------------------
    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        split = options.get("split", "train")
        if split not in FOLDS:
            raise ConfigError(f"twx: unknown split {split!r}; choose one of {sorted(FOLDS)}")
        if self._engine is None:
            self._engine = TwxEngine()
        self._engine.load(self.game, self.game_params)
        fold = FOLDS[split]
        seeds = self._engine.fold_seeds(fold)
        self.generation_seed = seeds[seed % len(seeds)]
        out = self._engine.new_game(self.generation_seed, fold)
        self.task_id = f"{self.game}/{fold}/{self.generation_seed}"
        # TWX's gold agent is not seeded: each generation of a seed gives another gold path (11, 23 and 15
        # actions for coin seed 4). The first one seen is kept, so replays and the expert agree.
        self.task = self._engine.task()
        self._gold = self._golds.setdefault(self.task_id, tuple(self._engine.gold()))
        self._gold_keys = None
        self.steps, self.won, self.score = 0, False, float(out["score"])
        self._absorb(out)
        return f"{self.task}\n{out['observation'].strip()}", self._info(True)

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._done or self.steps >= self.max_steps:
            raise ContractError("TwxEnv.step() after the episode ended; call reset() first")
        self.steps += 1
        valid = action in self._admissible
        if valid:
            out = self._engine.step(action)
            obs, score = out["observation"].strip(), float(out["score"])
            gain = score - self.score
            self.score = score
            self._absorb(out)
        else:
            obs, gain = UNKNOWN, 0.0
        reward = (1.0 if valid and self._won_now else 0.0) if self.reward == "success" else gain
        truncated = not self._done and self.steps >= self.max_steps
        return obs, reward, self._done, truncated, self._info(valid)

    def _absorb(self, out: dict) -> None:
        """Take the engine's answer: success, failure and the next admissible actions."""
        self._won_now = bool(out["tasksuccess"]) and not self.won
        self.won = self.won or bool(out["tasksuccess"])
        self._done = self.won or bool(out["taskfailure"])
        self._admissible = sorted(set(out["validActions"])) if not self._done else []

    def _info(self, valid: bool) -> dict:
        return {"won": self.won, "is_action_valid": valid, "admissible_actions": list(self._admissible),
                "task": self.task, "task_id": self.task_id, "score": self.score}

    def state_key(self) -> Hashable:
        """The game, its generation seed, the engine's objects (a digest) and whether the game has ended."""
        if self._engine is None or self.task_id is None:
            raise ContractError("TwxEnv.state_key() called before reset()")
        return (self.task_id, self._engine.world(), self.won, self._done)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None

    # -- the expert ------------------------------------------------------------------------------
    def expert_action(self) -> str | None:
        """The gold path's next action from this state, or None off the path (or once the game is over)."""
        if self._engine is None or self._done:
            return None
        if self._gold_keys is None:
            self._gold_keys = self._walk_gold()
        key = self.state_key()
        # the last gold state equal to this one: a no-op (look, inventory) leaves the agent on the path
        at = max((i for i, k in enumerate(self._gold_keys) if k == key), default=None)
        return self._gold[at] if at is not None and at < len(self._gold) else None

    def _walk_gold(self) -> list[Hashable]:
        """The state key before each gold action (and after the last), by playing the gold path on the
        engine and then replaying this episode's actions to come back."""
        record = self.replay_record()
        self._engine.new_game(self.generation_seed, FOLDS[dict(record[1]).get("split", "train")])
        keys = [(self.task_id, self._engine.world(), False, False)]
        for action in self._gold:
            out = self._engine.step(action)
            keys.append((self.task_id, self._engine.world(), bool(out["tasksuccess"]),
                         bool(out["tasksuccess"] or out["taskfailure"])))
        self.restore_record(record)
        return keys

    def restore_record(self, record: tuple) -> None:
        """Put the engine back where ``record`` (a ``replay_record()``) left it, keeping the gold keys."""
        gold_keys = self._gold_keys
        seed, options, actions = record
        self.reset(seed=seed, options=dict(options))
        for action in actions:
            self.step(action)
        self._gold_keys = gold_keys
