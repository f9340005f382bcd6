"""What ``prover new env`` writes, code and test (``string.Template``: name, module, cls, title); the credit
method's and judge's are in scaffold_plugin_templates.py. Each is a working plugin, not a stub:
tests/test_scaffold.py installs, tests and trains with what they make, and keeps examples/plugins/ (names
dial, loo, recent) identical to their output."""

ENV_CODE = '''\
"""${title}: a dial shows 0 to 9; turn it to the task's number, then press the button.

Made by `prover new env ${name}`: a small env that keeps the whole env contract (prover/envs/base.py),
with a native snapshot, a state key, an expert for the warm start and a training recipe. Replace the dial
with your task and keep `pytest tests` passing; docs/plugins.md in prover explains each part.
"""

from __future__ import annotations

import random
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, ClassVar

from prover.envs import AgentSpec, TextEnv
from prover.errors import ConfigError, ContractError

SPLITS = ("train", "test")
ACTIONS = ("press button", "turn left", "turn right")  # sorted, as info["admissible_actions"] must be


@dataclass(frozen=True)
class ${title}Snapshot:
    """Every field the state is made of, and the replay record (so that a restored env can snapshot again)."""

    split: str
    seed: int
    target: int
    dial: int
    steps: int
    done: bool
    record: tuple


class ${cls}(TextEnv):
    """A dial shows 0 to 9 and starts at 0; turning wraps around. Reward 1.0 and ``terminated`` when the
    button is pressed with the dial at the task's number; ``truncated`` after ``max_steps``. A press at
    another number is valid and changes nothing; any other text is an invalid no-op that uses a step."""

    native_snapshot = True  # snapshot() copies a few fields instead of replaying every action
    # Settings with which the tiny policy learns this env: `prover train env.name=${name}` applies each one
    # that the user's config leaves unset (only with model.path=tiny).
    train_recipe: ClassVar[dict[str, Any]] = {"rollout.max_turns": 12, "warmstart.episodes": 300}
    # The agent's prompt, as data. Short: a tiny model reads every token of it on every turn.
    agent_spec = AgentSpec(
        first_template="Task: {task}\\nObservation: {observation}\\nActions: {actions}",
        later_template=("Task: {task}\\nHistory:\\n{history}\\nObservation: {observation}\\n"
                        "Actions: {actions}"),
        history_entry="{observation} > {action}",
    )
    dial: int | None = None  # None until the first reset

    def __init__(self, max_steps: int = 12) -> None:
        if max_steps < 1:
            raise ConfigError(f"${name} max_steps must be >= 1, got {max_steps}")
        self.max_steps = max_steps

    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        split = options.get("split", "train")
        if split not in SPLITS:
            raise ConfigError(f"${name} split must be one of {SPLITS}, got {split!r}")
        # The task follows from the seed and split alone: the replay record and check_env rely on it.
        self.split, self.seed = split, seed
        self.target = random.Random(f"{split}/{seed}").randint(1, 9)
        self.dial, self.steps, self.done = 0, 0, False
        return f"{self._task()} The dial shows 0.", self._info(valid=True, won=False)

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self.done:
            raise ContractError("${cls}.step() after the episode ended; call reset() first")
        self.steps += 1
        act = " ".join(action.lower().split())
        won = act == "press button" and self.dial == self.target
        if act in ("turn left", "turn right"):
            self.dial = (self.dial + (1 if act == "turn right" else -1)) % 10
            obs = f"The dial shows {self.dial}."
        elif act == "press button":
            obs = "The lock opens. You win!" if won else f"Nothing happens. The dial shows {self.dial}."
        else:  # an invalid action is a no-op, never an exception
            obs = f"You can't do that. The dial shows {self.dial}."
        truncated = not won and self.steps >= self.max_steps
        self.done = won or truncated
        return obs, float(won), won, truncated, self._info(valid=act in ACTIONS, won=won)

    def state_key(self) -> Hashable:
        """(target, dial): all that decides what the same actions do from here. The seed only picks the
        target, and the step count is left out so that GiGPO groups the same state across turns."""
        return (self.target, self.dial)

    def snapshot(self) -> ${title}Snapshot:
        if self.dial is None:
            raise ContractError("${cls}.snapshot() called before reset()")
        return ${title}Snapshot(
            self.split, self.seed, self.target, self.dial, self.steps, self.done, self.replay_record())

    def restore(self, snapshot: ${title}Snapshot) -> None:
        if not isinstance(snapshot, ${title}Snapshot):
            got = type(snapshot).__name__
            raise ContractError(f"${cls}.restore() got {got}, expected a ${title}Snapshot")
        s = snapshot
        self.split, self.seed, self.target, self.dial, self.steps, self.done = (
            s.split, s.seed, s.target, s.dial, s.steps, s.done)
        self.set_replay_record(s.record)

    def expert_action(self) -> str | None:
        """The shortest way to the number, then the button: what the warm start clones."""
        if self.dial is None or self.done:
            return None
        if self.dial == self.target:
            return "press button"
        return "turn right" if (self.target - self.dial) % 10 <= 5 else "turn left"

    def _task(self) -> str:
        return f"Turn the dial to {self.target} and press the button."

    def _info(self, valid: bool, won: bool) -> dict:
        actions = [] if self.done else list(ACTIONS)
        return {"task": self._task(), "admissible_actions": actions, "won": won, "is_action_valid": valid}
'''

ENV_TEST = '''\
"""The ${name} env keeps the env contract, found by name as `prover train` finds it (the package must be
installed: `pip install -e .`). Every test reads only the contract (actions from `admissible_actions` or the
expert, the class's own `train_recipe`), so they still hold once your env replaces the example's."""

from __future__ import annotations

import pytest

from prover.config_load import load_config
from prover.envs import check_env, make_env
from prover.envs.checker import check_gymnasium

from ${module} import ${cls}


def an_action(env: ${cls}, info: dict) -> str:
    """A legal action from here: the first admissible one, else the expert's."""
    action = (info.get("admissible_actions") or [None])[0] or env.expert_action()
    if action is None:
        pytest.skip("the env lists no admissible actions and has no expert")
    return action


def test_check_env_passes_on_the_env_found_by_name() -> None:
    env = make_env("${name}")
    assert isinstance(env, ${cls})
    assert check_env(env, seeds=tuple(range(5))) > 0  # a broken rule raises, naming it
    assert check_gymnasium(env) == 1


def test_the_expert_wins_every_task_of_both_splits() -> None:
    env = ${cls}()
    for split in ("train", "test"):
        for seed in range(20):
            env.reset(seed=seed, options={"split": split})
            if env.expert_action() is None:
                pytest.skip("the env has no expert (the warm start needs one)")
            done = truncated = False
            while not (done or truncated):
                _, _, done, truncated, info = env.step(env.expert_action())
            assert info["won"] and not truncated, f"the expert lost task {seed} of {split}"


def test_restore_goes_back_to_the_snapshot() -> None:
    env = ${cls}()
    for seed in range(10):  # a task whose first action leaves the episode running
        _, info = env.reset(seed=seed)
        _, _, done, truncated, info = env.step(an_action(env, info))
        if not (done or truncated):
            break
    else:
        pytest.skip("every episode ended at its first action")
    snap, key, action = env.snapshot(), env.state_key(), an_action(env, info)
    first = env.step(action)
    env.restore(snap)
    assert env.state_key() == key
    assert env.step(action)[:4] == first[:4]


def test_the_recipe_sets_what_the_config_leaves_unset() -> None:
    for key, value in ${cls}.train_recipe.items():
        section, field = key.rsplit(".", 1)
        loaded = load_config(None, ["env.name=${name}"])
        for part in section.split("."):
            loaded = getattr(loaded, part)
        assert getattr(loaded, field) == value, key
'''
