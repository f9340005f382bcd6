"""``pivot-sim``: a corridor whose pivotal decisions are known exactly, a testbed for credit assignment.

The agent walks a corridor to a vault. On the way it passes ``n_pivots`` stations; at each, a rack
offers ``n_options`` items of one kind ("red key", "blue key", ...). Taking one closes the rack for
good, and "go forward" is refused until an item is taken. The vault opens only if every item is the one
the clue names ("The vault takes the blue key and the brass tool."); it is checked on arrival, ``delay``
turns after the last choice. Walking cells and fillers ("look", "wait", "check bag") make up the rest of
the episode: turns that do not matter. Reward 1.0 on the step that wins, else 0.0.

Knobs (constructor arguments): ``n_pivots`` (>= 1), ``n_options`` (>= 2), ``delay`` (>= 1),
``irrelevant_share`` s in [0, 1) (the corridor has W = max(delay + n_pivots - 1, round(n_pivots * s /
(1 - s))) walking cells; see ``world``), ``noise`` in [0, 1) (the vault jams whatever was taken, drawn
from the env's seeded RNG on arrival: one draw per turn used, so runs of one task that arrive at
different turns jam independently), ``clue`` ("visible": on the sign at the entrance and at every open
rack; "memory": on the sign only), ``max_steps`` (default twice the expert's path, n_pivots + W; never
less than it). ``reset(seed=s, options={"split": "test"})`` draws right items that no train task asks
for; with ``unseen_items=False`` both splits draw them from every word (see ``world``).

Pivotal turns (``pivotal_turns``, diagnostics only). With V* and Q* the optimal success probability
computed exactly by ``search.Oracle`` (steps left count: running out of turns is a failure), turn t of
a trajectory is pivotal when the best achievable success depends on the action taken there:

    max_a Q*(s_t, a) != min_a Q*(s_t, a)   over the admissible actions a of s_t (tolerance 1e-9).

This contains every turn where V* fell (V*(s_{t+1}) < V*(s_t): a wrong item, or a wasted turn the
horizon could not afford), and also the turns where the agent chose right among choices of which some
were wrong. It departs from the literal "turns where V* changed" on purpose: along a success with no
noise V* is 1 at every state, so the literal definition would mark no turn of any success, and the
judges are asked about successes. A station after a wrong item is not pivotal (every action gives 0).
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeGuard

from prover.envs.base import TextEnv
from prover.envs.pivot_sim.engine import INITIAL, INVALID, TASK, State, advance, arrives, choices, feedback, welcome
from prover.envs.pivot_sim.expert import expert_action, expert_path_length
from prover.envs.pivot_sim.prompts import PRESETS
from prover.envs.pivot_sim.search import Oracle
from prover.envs.pivot_sim.world import CLUE_MODES, KIND_NAMES, SPLITS, WORDS_PER_KIND, World, corridor_length, generate
from prover.errors import ConfigError, ContractError

if TYPE_CHECKING:
    from prover.types import Trajectory

ORACLE_CACHE = 256  # tasks whose solved values are kept


@dataclass(frozen=True)
class Snapshot:
    """A native snapshot: the world and the state are immutable, so sharing them is copying them."""

    world: World
    state: State
    rng_state: dict
    replay: tuple  # (seed, options, actions) as the base class records them


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(f"pivot-sim: {message}")


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


class PivotSimEnv(TextEnv):
    """A corridor of irreversible choices with a delayed outcome; see the module docstring."""

    native_snapshot = True
    # Tuned with grpo on seed 101 (benchmarks/configs/bench_pivot_12steps.yaml says how): a warm start that clones the
    # expert with half of its turns random puts the tiny policy at 20-50% held-out success (30% in the
    # bench) instead of ~90% after 1000 episodes; at lr 1e-4 GRPO fell, at 2e-5 it climbs slowly.
    train_recipe: ClassVar[dict[str, Any]] = {"warmstart.episodes": 600, "warmstart.random_action_share": 0.5,
                                              "rollout.max_turns": 16, "learner.lr": 2e-5}

    def __init__(self, *, n_pivots: int = 2, n_options: int = 3, delay: int = 4, irrelevant_share: float = 0.75,
                 noise: float = 0.0, clue: str = "visible", max_steps: int | None = None,
                 prompt: str = "compact", unseen_items: bool = True) -> None:
        _check(_is_int(n_pivots) and 1 <= n_pivots <= len(KIND_NAMES),
               f"n_pivots={n_pivots!r} must be an int from 1 to {len(KIND_NAMES)} (one item kind per station)")
        _check(_is_int(n_options) and 2 <= n_options <= WORDS_PER_KIND,
               f"n_options={n_options!r} must be an int from 2 to {WORDS_PER_KIND}")
        _check(_is_int(delay) and delay >= 1, f"delay={delay!r} must be an int >= 1 (turns from the last "
               "station to the vault)")
        _check(isinstance(irrelevant_share, (int, float)) and 0.0 <= irrelevant_share < 1.0,
               f"irrelevant_share={irrelevant_share!r} must be a number in [0, 1)")
        _check(isinstance(noise, (int, float)) and 0.0 <= noise < 1.0, f"noise={noise!r} must be a number in [0, 1)")
        _check(clue in CLUE_MODES, f"unknown clue {clue!r}; choose one of {list(CLUE_MODES)}")
        _check(prompt in PRESETS, f"unknown prompt {prompt!r}; choose one of {sorted(PRESETS)}")
        _check(isinstance(unseen_items, bool), f"unseen_items={unseen_items!r} must be true or false")
        self.length = corridor_length(n_pivots, float(irrelevant_share), delay)
        self.expert_steps = expert_path_length(n_pivots, self.length)
        if max_steps is None:
            max_steps = 2 * self.expert_steps
        _check(_is_int(max_steps) and max_steps >= self.expert_steps,
               f"max_steps={max_steps!r} must be an int >= {self.expert_steps}, the expert's path "
               f"({n_pivots} takes and {self.length} steps forward)")
        self.n_pivots, self.n_options, self.delay = n_pivots, n_options, delay
        self.irrelevant_share, self.noise, self.clue = float(irrelevant_share), float(noise), clue
        self.max_steps, self.unseen_items = max_steps, unseen_items
        self.agent_spec = PRESETS[prompt]
        self.world: World | None = None
        self._oracles: OrderedDict[str, Oracle] = OrderedDict()
        self._private: PivotSimEnv | None = None

    # -- the gym API -----------------------------------------------------------------------------
    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        split = options.get("split", "train")
        _check(split in SPLITS, f"unknown split {split!r}; choose one of {list(SPLITS)}")
        self.world = generate(split, seed, n_pivots=self.n_pivots, n_options=self.n_options, delay=self.delay,
                              length=self.length, max_steps=self.max_steps, noise=self.noise,
                              clue_mode=self.clue, unseen_items=self.unseen_items)
        self.state = INITIAL
        self._menu, self._actions = choices(self.world, self.state)
        return welcome(self.world), self._info(True)

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        world, before = self.world, self.state
        code = self._menu.get(" ".join(action.lower().split()), INVALID)
        jammed = arrives(world, before, code) and self._jams(before.steps + 1)
        self.state = after = advance(world, before, code, jammed)
        self._menu, self._actions = choices(world, after)
        terminated = after.pos == world.length
        return (feedback(world, before, code, after, jammed), 1.0 if after.won else 0.0, terminated,
                after.done and not terminated, self._info(code != INVALID))

    def _jams(self, turn: int) -> bool:
        # One uniform per turn used, read at arrival: the draw depends on the seed and the arrival turn,
        # so the RNG state stays a function of (seed, steps), which the state key holds.
        return bool(self.np_random.random(turn)[-1] < self.noise)

    def _info(self, valid: bool) -> dict:
        return {"task": TASK, "task_id": self.world.task_id, "won": self.state.won, "is_action_valid": valid,
                "admissible_actions": list(self._actions)}

    def state_key(self) -> Hashable:
        """The task and the whole state: position, items taken, steps used, done, won."""
        self._require_reset("state_key")
        return (self.world.task_id, *self.state)

    # -- snapshots -------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        self._require_reset("snapshot")
        return Snapshot(self.world, self.state, self.np_random.bit_generator.state, self.replay_record())

    def restore(self, snapshot: object) -> None:
        if not isinstance(snapshot, Snapshot):
            raise ContractError(f"PivotSimEnv.restore() got {type(snapshot).__name__}, "
                                "expected a Snapshot from PivotSimEnv.snapshot()")
        self.world, self.state = snapshot.world, snapshot.state
        self.np_random.bit_generator.state = snapshot.rng_state
        self.set_replay_record(snapshot.replay)
        self._menu, self._actions = choices(self.world, self.state)

    # -- privileged views ------------------------------------------------------------------------
    def expert_action(self) -> str | None:
        """The observing expert's next action (see ``expert``); None once the episode is over."""
        self._require_reset("expert_action")
        return expert_action(self.world, self.state)

    def gold(self) -> str:
        """What the vault needs: the right item of every rack, in corridor order."""
        self._require_reset("gold")
        needed = ", ".join(f"the {s.right_item} (rack {i + 1} of {s.kind}s)" for i, s in enumerate(self.world.stations))
        return f"the vault needs {needed}; fillers and waiting change nothing"

    def pivotal_turns(self, trajectory: Trajectory) -> list[int]:
        """The pivotal turns of ``trajectory`` (definition in the module docstring); ``self`` is untouched."""
        oracle, states = self._replay(trajectory)
        return [t for t, state in enumerate(states[:-1]) if oracle.is_pivotal(state)]

    def value_trace(self, trajectory: Trajectory) -> list[float]:
        """V* before each turn of ``trajectory`` and after its last one."""
        oracle, states = self._replay(trajectory)
        return [oracle.value(state) for state in states]

    def _replay(self, trajectory: Trajectory) -> tuple[Oracle, list[State]]:
        """The task's oracle and the states before each turn and after the last, replayed on a private env."""
        split, _, seed = str(trajectory.task_id).partition("/")
        if split not in SPLITS or not seed.lstrip("-").isdigit():
            raise ContractError(f"pivot-sim: task_id {trajectory.task_id!r} is not 'split/seed'")
        if self._private is None:  # a shallow copy: reset gives it its own state, RNG and replay record
            self._private = copy.copy(self)
        env = self._private
        env.reset(seed=int(seed), options={"split": split})
        states = [env.state]
        for t, turn in enumerate(trajectory.turns):
            if env.state.done:
                raise ContractError(f"pivot-sim: trajectory {trajectory.traj_id!r} goes on after its episode "
                                    f"ended (turn {t} of {len(trajectory.turns)}); is it from this env's knobs?")
            env.step(turn.action)
            states.append(env.state)
        return self._oracle(env.world), states

    def _oracle(self, world: World) -> Oracle:
        oracle = self._oracles.get(world.task_id)
        if oracle is None:
            oracle = self._oracles[world.task_id] = Oracle(world)
            if len(self._oracles) > ORACLE_CACHE:
                self._oracles.popitem(last=False)
        return oracle

    def _require_reset(self, what: str) -> None:
        if self.world is None:
            raise ContractError(f"PivotSimEnv.{what}() called before reset()")
