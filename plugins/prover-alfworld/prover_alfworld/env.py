"""``alfworld``: ALFWorld's text game on the real engine (TextWorld + Fast Downward), as a prover env.

Two sources of games:

* ``data_dir=...``: a user's ALFWorld data (the ``json_2.1.1`` folder of ``alfworld-download``);
  ``reset(seed=s, options={"split": ...})`` plays game ``s mod n`` of the split, in path order.
  ``train`` is ALFWorld's train folder and ``test`` its unseen-rooms folder (``valid_unseen``).
* no ``data_dir`` (the default): the tasks of ``alfworld-sim``, drawn with the same arguments and
  seeds and emitted as PDDL problems (``prover_alfworld.emit``). This runs offline, and it is how
  ``alfworld-sim`` is checked against the real engine. ``rules`` picks the sim's rule set for the
  generated rooms: ``"alfworld"`` (ALFWorld's tables, the default) or ``"v1"`` (``alfworld-sim-v1``'s).

The agent-facing text is ``alfworld-sim``'s (its ``AgentSpec`` presets), so a policy trained on the
stand-in is prompted identically here. Reward is 1.0 on the step that wins, ``terminated`` when won,
``truncated`` after ``max_steps`` (ALFWorld's configs use 50).

Commands reach the engine as the agent wrote them, as in ALFWorld: "Examine toilet 1" is not
admissible and the engine answers "Nothing happens.". ``normalize_commands=True`` lower-cases them and
collapses runs of spaces first (``alfworld-sim``'s switch of the same name), more lenient than ALFWorld.

The expert (``expert_action``, for the warm start) is ALFWorld's ``planner`` expert: the first command
of Fast Downward's plan from the current true state, for generated games and a user's games alike.
The tiny tokenizer's corpus is played on ``alfworld-sim`` (``corpus_env``): its text is this env's, and
its episodes take microseconds where a reset here takes most of a second.

Snapshots are the base class's replay (seed, options, actions): Fast Downward keeps the game state
inside its C library, which can read a state but not set one, so there is no cheaper exact copy.
A restore reloads the game only when another one is loaded, then resets and replays.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from prover.envs import TextEnv
from prover.envs.alfworld_sim.env import SCENES, AlfworldSimEnv
from prover.envs.alfworld_sim.prompts import PRESETS
from prover.envs.alfworld_sim.rules import RULES
from prover.envs.alfworld_sim.world import TASK_TYPES, generate
from prover.errors import ConfigError, ContractError

from prover_alfworld import data, emit
from prover_alfworld.engine import RealGame

TASK_MARK = "Your task is to: "


class AlfworldEnv(TextEnv):
    """ALFWorld on TextWorld's PDDL engine; see the module docstring."""

    native_snapshot = False

    def __init__(self, *, data_dir: str | None = None, task_types: Sequence[str] = TASK_TYPES,
                 scene: str = "small", max_steps: int = 50, prompt: str = "compact",
                 normalize_commands: bool = False, rules: str = "alfworld") -> None:
        task_types = (task_types,) if isinstance(task_types, str) else tuple(task_types)
        unknown = sorted(set(task_types) - set(TASK_TYPES))
        if unknown or not task_types:
            raise ConfigError(f"alfworld: task_types {unknown or '()'} invalid; choose from {TASK_TYPES}")
        for name, value, valid in (("scene", scene, SCENES), ("prompt", prompt, PRESETS), ("rules", rules, RULES)):
            if value not in valid:
                raise ConfigError(f"alfworld: unknown {name} {value!r}; choose one of {sorted(valid)}")
        if max_steps < 1:
            raise ConfigError(f"alfworld: max_steps={max_steps} must be at least 1")
        self.data_dir, self.task_types, self.scene, self.max_steps = data_dir, task_types, scene, max_steps
        self.prompt, self.normalize_commands, self.rules = prompt, normalize_commands, rules
        self.agent_spec = PRESETS[prompt]
        self._games: dict[str, list[data.GameFile]] = {}
        self._engine: RealGame | None = None
        self.task_id: str | None = None

    # -- the gym API -----------------------------------------------------------------------------
    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        split = options.get("split", "train")
        if self._engine is None:
            self._engine = RealGame()
        if self.data_dir is None:
            self._load_generated(seed, split)
        else:
            self._load_file(seed, split)
        obs, self._admissible, won = self._engine.reset()
        self.task = obs.rpartition(TASK_MARK)[2].strip()
        self.steps, self.won = 0, won
        return obs, self._info(True)

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self.won or self.steps >= self.max_steps:
            raise ContractError("AlfworldEnv.step() after the episode ended; call reset() first")
        command = " ".join(action.lower().split()) if self.normalize_commands else action
        valid = command.strip() in self._admissible  # PddlEnv.step strips the command, then matches it exactly
        obs, self._admissible, won = self._engine.step(command)
        self.steps += 1
        newly_won = won and not self.won
        self.won = self.won or won
        truncated = not self.won and self.steps >= self.max_steps
        return obs, 1.0 if newly_won else 0.0, self.won, truncated, self._info(valid)

    def _info(self, valid: bool) -> dict:
        return {"won": self.won, "is_action_valid": valid, "admissible_actions": sorted(self._admissible),
                "task": self.task, "task_type": self.task_type, "task_id": self.task_id}

    def expert_action(self) -> str | None:
        """The planner's next command, when it is admissible (it always was in the games tried)."""
        if self._engine is None or self.won or not self._engine.plan:
            return None
        action = self._engine.plan[0]
        return action if action in self._admissible else None

    def corpus_env(self) -> TextEnv:
        """alfworld-sim with this env's tasks and prompt: the same text, without the engine's cost."""
        return AlfworldSimEnv(task_types=self.task_types, scene=self.scene, max_steps=self.max_steps,
                              prompt=self.prompt, rules=self.rules)

    def state_key(self) -> Hashable:
        """The game and its dynamic PDDL facts (positions, hand, open, hot/cool/clean, toggled)."""
        if self._engine is None or self.task_id is None:
            raise ContractError("AlfworldEnv.state_key() called before reset()")
        return (self.task_id, self._engine.facts())

    # -- loading games ---------------------------------------------------------------------------
    def _load_generated(self, seed: int, split: str) -> None:
        if split not in ("train", "test"):
            raise ConfigError(f"alfworld: unknown split {split!r} for generated games; choose train or test")
        # The same draws as AlfworldSimEnv._reset: the goal phrasing from the env RNG, then the world.
        template = int(self.np_random.integers(2))
        recs, distractors = SCENES[self.scene]
        world = generate(split, seed, template, self.task_types, recs, distractors, self.rules)
        self.task_type, self.task_id = world.task_type, world.task_id
        identity = (world.task_id, template)
        if self._engine.loaded != identity:
            self._engine.load(emit.game(world), identity)

    def _load_file(self, seed: int, split: str) -> None:
        if split not in self._games:
            self._games[split] = data.collect(self.data_dir, split, self.task_types)
        games = self._games[split]
        game = games[seed % len(games)]
        self.task_type, self.task_id = game.task_type, f"{split}/{game.task_id}"
        if self._engine.loaded != game.path:
            content = data.read_game(game)
            try:
                self._engine.load(content, game.path)
            except Exception as exc:  # the engine's parser errors have no common base class
                raise ConfigError(f"alfworld: the engine cannot load {game.path}: "
                                  f"{type(exc).__name__}: {exc}") from exc
