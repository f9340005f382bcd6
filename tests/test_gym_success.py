"""The Gymnasium adapter's success rule (``env.kwargs.success``, ``prover/envs/success.py``): by default a
reached goal (terminated with a positive reward) is a win, as MiniGrid and FrozenLake end an episode; the
rule that decided is printed once; action names and the task text come from settings too."""

from __future__ import annotations

from typing import ClassVar

import gymnasium
import pytest
from gymnasium import spaces

from prover.envs import make_env
from prover.errors import ConfigError

GOAL_ID = "prover-test/GoalCorridor-v0"


class GoalCorridor(gymnasium.Env):
    """Cells 0..3, the goal at 3: reaching it ends the episode with reward 0.97 and an info that says
    nothing of success (as MiniGrid's); ``says`` puts ``is_success`` in the info (False, to tell the rules
    apart). A step reward of 0.1 for moving forward; truncated after ``limit`` steps."""

    metadata: ClassVar[dict] = {"render_modes": []}
    observation_space = spaces.Text(max_length=40, charset="abcdefghijklmnopqrstuvwxyz0123456789 ")
    action_space = spaces.Discrete(2)

    def __init__(self, says: bool = False, limit: int = 6) -> None:
        self.says, self.limit = says, limit

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        self.pos = self.steps = 0
        return "cell 0", {}

    def step(self, action: int) -> tuple[str, float, bool, bool, dict]:
        self.steps += 1
        self.pos = max(0, self.pos + (1 if action == 1 else -1))
        goal = self.pos == 3
        info = {"is_success": False} if self.says else {}
        return f"cell {self.pos}", 0.97 if goal else 0.1 * action, goal, self.steps >= self.limit, info


gymnasium.register(GOAL_ID, entry_point=GoalCorridor)


def _play(actions: list[str], **kwargs) -> list[tuple]:
    env = make_env("gymnasium", id=GOAL_ID, action_names=["back", "forward"], **kwargs)
    env.reset(seed=0)
    return [(r, term, trunc, info["won"]) for r, term, trunc, info in (env.step(a)[1:] for a in actions)]


def test_a_reached_goal_wins_by_default_and_the_rule_is_told_once(capsys):
    out = _play(["forward"] * 3)
    assert out == [(0.1, False, False, False), (0.1, False, False, False), (0.97, True, False, True)]
    err = capsys.readouterr().err
    assert err == (f"note: gymnasium env {GOAL_ID!r}: an episode counts as won by terminated with a positive "
                   "reward (success=auto; env.kwargs.success sets the rule: auto, info:KEY, terminated or "
                   "reward>=X)\n")
    assert _play(["forward"] * 3)[-1][-1] is True
    assert capsys.readouterr().err == ""


def test_each_rule_scores_the_same_steps_as_its_definition():
    path = ["forward", "back", "forward", "forward", "forward"]  # 1, 0, 1, 2, 3: the goal on step 5
    assert [w for *_, w in _play(path, says=True)] == [False] * 5  # auto: the env's is_success decides
    assert [w for *_, w in _play(path, says=True, success="terminated")] == [False] * 4 + [True]
    assert [w for *_, w in _play(path, says=True, success="info:is_success")] == [False] * 5
    assert [w for *_, w in _play(path, success="info:is_success")] == [False] * 5  # missing: False
    assert [w for *_, w in _play(path, success="reward>=0.1")] == [True, False, True, True, True]
    assert [w for *_, w in _play(path, success="reward >= 0.5")] == [False] * 4 + [True]
    # a step cut off by the time limit is no win under auto, though its reward (0.1) is positive
    cut = _play(["forward", "forward", "back", "forward"], limit=4)
    assert cut[3] == (0.1, False, True, False)


def test_a_refused_action_wins_nothing():
    env = make_env("gymnasium", id=GOAL_ID, action_names=["back", "forward"], success="reward>=0")
    env.reset(seed=0)
    assert env.step("jump")[4]["won"] is False and env.step("back")[4]["won"] is True


def test_action_names_and_task_come_from_settings():
    env = make_env("gymnasium", id=GOAL_ID, action_names=["Back", "Forward"], task="Walk to cell 3.")
    obs, info = env.reset(seed=0)
    assert (obs, info["task"], info["admissible_actions"]) == ("cell 0", "Walk to cell 3.", ["Back", "Forward"])
    assert env.step("forward")[0] == "cell 1"  # matched case-insensitively
    assert make_env("gymnasium", id=GOAL_ID).reset(seed=0)[1]["task"] == "cell 0"  # none: the first observation
    assert make_env("gymnasium", id=GOAL_ID).reset(seed=0)[1]["admissible_actions"] == ["0", "1"]


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"success": "reward>=abc"}, "success='reward>=abc' is not one of auto, info:KEY, terminated or reward>=X"),
    ({"success": "info:"}, "success='info:' is not one of"),
    ({"success": "reward>=1e999"}, "needs a finite reward"),
    ({"action_names": ["a", "A"]}, "has 2 actions, and env.kwargs.action_names ['a', 'A'] are not that many distinct"),
    ({"action_names": ["a", "b", "c"]}, "are not that many distinct, non-empty names"),
])
def test_bad_settings_are_one_line(kwargs, words):
    with pytest.raises(ConfigError) as err:
        make_env("gymnasium", id=GOAL_ID, **kwargs)
    assert words in str(err.value) and "\n" not in str(err.value)
