"""``alfworld-sim``: an embedded, procedurally generated ALFWorld with the real game's text interface.

It plays the six ALFWorld task types in generated kitchens, living rooms, bedrooms and bathrooms,
with ALFWorld's commands, feedback strings, admissible-command lists and raw reward (1.0 on the step
that wins, else 0.0), so that prompts, parsers and credit methods move unchanged to the real
benchmark. Being pure Python and a few dicts, it steps in microseconds, snapshots by copying, and
knows its shortest plans (``expert_plan``), which the tests of credit methods lean on.

Rules: by default ALFWorld's own tables (``alfred.py``: what each receptacle can contain, what can be
heated, cooled, cleaned, sliced or switched on, from ``alfworld/gen/constants.py``; rooms, fixtures
and shared locations counted from ALFWorld's shipped games). ``rules="v1"``, which the registered id
``alfworld-sim-v1`` sets, keeps the sim's first tables (``rules_v1.py``) and their dynamics, so that
results obtained before the switch can be reproduced.

Commands are matched as ALFWorld matches them: TextWorld's ``PddlEnv.step`` strips the ends of a
command, then looks it up exactly among the admissible ones, so "Examine toilet 1" or "go to  toilet 1"
(two spaces) answers "Nothing happens." and changes nothing. ``normalize_commands=True`` lower-cases a
command and collapses its runs of spaces first, which is more lenient than ALFWorld (the ``alfworld``
plugin has the same switch). In a rollout the switch changes little: ``AgentSpec.parse`` lower-cases a
policy's completion and collapses the spaces inside its action tags before the env sees it.

Difficulty: the defaults are small rooms (4-7 receptacles, 1-2 distractors) for tiny models on a CPU;
``scene="full"`` gives ALFWorld-sized rooms. ``reset(seed=s, options={"split": "test"})`` draws from
rooms that no train seed ever produces (ALFWorld's unseen split).

Departures from ALFWorld under the default rules (``plugins/prover-alfworld``'s conformance test
plays generated games on the real engine, so the rules and text within a game are ALFWorld's; these
are about which games exist):

1. Rooms are drawn, not taken from ALFRED's 120 scenes. Their receptacle types, counts, objects and
   shared locations follow rates counted from ALFWorld's games, but each room is independent and
   the default ones are far smaller (4-7 receptacles, where ALFWorld's have 6 to 54).
2. Objects start only where ALFWorld's ``canContain`` lets them be put; ALFWorld's start where
   ALFRED's simulator dropped them.
3. Things ALFRED leaves on the floor (floor lamps, baseball bats, basketballs, tennis rackets) are
   absent, as are paper towel rolls and teddy bears, which no receptacle can take back. In ALFWorld
   no command reaches the former, so its games have no solvable floor-lamp task and neither has this.
4. Tasks draw their goal object and receptacle uniformly from the feasible pairs among those that
   ALFWorld's games use, not with the games' frequencies.
5. With nothing on the floor, "Next to it, you see" always lists nothing, as it does in ALFWorld
   wherever nothing stands on the floor by the receptacle.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Annotated

from pydantic import Field

from prover.envs.alfworld_sim.engine import NOTHING, State, choices, feedback, transition, welcome, won
from prover.envs.alfworld_sim.expert import inspect_after, observed_action, plan
from prover.envs.alfworld_sim.prompts import PRESETS
from prover.envs.alfworld_sim.rules import RULES
from prover.envs.alfworld_sim.world import TASK_TYPES, World, generate
from prover.envs.base import TextEnv
from prover.errors import ConfigError, ContractError

# scene -> (receptacles per room, distractor objects per room), each a (min, max) range
SCENES = {"small": ((4, 7), (1, 2)), "full": ((15, 30), (10, 20))}
SPLITS = ("train", "test")


@dataclass(frozen=True)
class Snapshot:
    """A native snapshot: the world (immutable, shared) and a private copy of everything mutable."""

    world: World
    state: State
    steps: int
    won: bool
    rng_state: dict
    inspected: frozenset  # receptacles whose contents the agent has seen (for the observing expert)
    replay: tuple  # (seed, options, actions) as the base class records them


def _range(name: str, value: int | Sequence[int]) -> tuple[int, int]:
    lo, hi = (value, value) if isinstance(value, int) else tuple(value)
    if not 0 <= lo <= hi:
        raise ConfigError(f"alfworld-sim: {name}={value!r} must be an int or a (min, max) pair with "
                          "0 <= min <= max")
    return lo, hi


class AlfworldSimEnv(TextEnv):
    """ALFWorld's text game on generated rooms; see the module docstring."""

    native_snapshot = True

    def __init__(self, *, task_types: Sequence[str] = TASK_TYPES, scene: str = "small",
                 n_receptacles: int | Sequence[int] | None = None,
                 n_distractors: int | Sequence[int] | None = None,
                 grammar: str = "move", max_steps: int = 50, prompt: str = "compact",
                 rules: str = "alfworld",
                 normalize_commands: Annotated[bool, Field(description=(
                     "lower-case a command and collapse its spaces before matching it; false matches it "
                     "exactly after stripping its ends, as ALFWorld (TextWorld) does"))] = False) -> None:
        for name, value, valid in (("scene", scene, SCENES), ("grammar", grammar, ("move", "put")),
                                   ("prompt", prompt, PRESETS), ("rules", rules, RULES)):
            if value not in valid:
                raise ConfigError(f"alfworld-sim: unknown {name} {value!r}; choose one of {sorted(valid)}")
        task_types = (task_types,) if isinstance(task_types, str) else tuple(task_types)
        unknown = sorted(set(task_types) - set(TASK_TYPES))
        if unknown or not task_types:
            raise ConfigError(f"alfworld-sim: task_types {unknown or '()'} invalid; choose from {TASK_TYPES}")
        if max_steps < 1:
            raise ConfigError(f"alfworld-sim: max_steps={max_steps} must be at least 1")
        recs, distractors = SCENES[scene]
        self.task_types = task_types
        self.n_receptacles = _range("n_receptacles", recs if n_receptacles is None else n_receptacles)
        self.n_distractors = _range("n_distractors", distractors if n_distractors is None else n_distractors)
        self.grammar = grammar
        self.rules = rules
        self.max_steps = max_steps
        self.normalize_commands = normalize_commands
        self.agent_spec = PRESETS[prompt]
        self.world: World | None = None

    # -- the gym API -----------------------------------------------------------------------------
    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        split = options.get("split", "train")
        if split not in SPLITS:
            raise ConfigError(f"alfworld-sim: unknown split {split!r}; choose one of {SPLITS}")
        template = int(self.np_random.integers(2))  # which of the two goal phrasings
        self.world = generate(split, seed, template, self.task_types, self.n_receptacles, self.n_distractors,
                              self.rules)
        self.state = State.initial(self.world)
        self.steps, self.won = 0, False
        self.inspected: set[str] = set()
        self._choices = choices(self.world, self.state, self.grammar)
        return welcome(self.world, self.state), self._info(True)

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        # PddlEnv.step: command.strip(), then an exact lookup; "Nothing happens." when it is not there
        cmd = self._choices.get(" ".join(action.lower().split()) if self.normalize_commands else action.strip())
        if cmd is None:
            obs = NOTHING
        else:
            transition(self.state, cmd)
            inspect_after(self.world, self.state, cmd, self.inspected)
            obs = feedback(self.world, self.state, cmd, self.grammar)
            self._choices = choices(self.world, self.state, self.grammar)
        self.steps += 1
        newly_won = cmd is not None and not self.won and won(self.world, self.state)
        self.won = self.won or newly_won
        truncated = not self.won and self.steps >= self.max_steps
        return obs, 1.0 if newly_won else 0.0, self.won, truncated, self._info(cmd is not None)

    def _info(self, valid: bool) -> dict:
        world = self.world
        return {"won": self.won, "is_action_valid": valid, "admissible_actions": sorted(self._choices),
                "task": world.goal + ".", "task_type": world.task_type, "task_id": world.task_id}

    def state_key(self) -> Hashable:
        """The task id and the true state; the step count is left out so that GiGPO can group."""
        self._require_reset("state_key")
        return (self.world.task_id, *self.state.key())

    # -- snapshots -------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        self._require_reset("snapshot")
        return Snapshot(self.world, self.state.copy(), self.steps, self.won,
                        self.np_random.bit_generator.state, frozenset(self.inspected),
                        self.replay_record())

    def restore(self, snapshot: object) -> None:
        if not isinstance(snapshot, Snapshot):
            raise ContractError(f"AlfworldSimEnv.restore() got {type(snapshot).__name__}, "
                                "expected a Snapshot from AlfworldSimEnv.snapshot()")
        self.world, self.state = snapshot.world, snapshot.state.copy()
        self.steps, self.won = snapshot.steps, snapshot.won
        self.np_random.bit_generator.state = snapshot.rng_state
        self.inspected = set(snapshot.inspected)
        self.set_replay_record(snapshot.replay)
        self._choices = choices(self.world, self.state, self.grammar)

    # -- the oracle ------------------------------------------------------------------------------
    def expert_plan(self) -> list[str]:
        """A shortest list of commands that wins from the current state, knowing where everything is."""
        self._require_reset("expert_plan")
        return plan(self.world, self.state, self.grammar)

    def gold(self) -> str:
        """Where things are, as the all-knowing shortest plan from the current state."""
        return "a shortest winning plan: " + "; ".join(self.expert_plan())

    def expert_action(self) -> str | None:
        """The next command of an expert that uses only what the agent has seen (it searches for
        hidden objects, then plans over the ones it found); None once the task is won. This is the
        expert the warm start clones; ``expert_plan()`` is the all-knowing oracle."""
        self._require_reset("expert_action")
        return observed_action(self.world, self.state, self.inspected, self.grammar)

    def _require_reset(self, what: str) -> None:
        if self.world is None:
            raise ContractError(f"AlfworldSimEnv.{what}() called before reset()")


class AlfworldSimV1Env(AlfworldSimEnv):
    """``alfworld-sim-v1``: the sim's first rules (``rules_v1.py``), kept so that earlier results can be
    reproduced. Everything else (text, grammar, scenes, splits, prompts) is the same env's."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**{"rules": "v1", **kwargs})
