"""The warm start with an expert that follows a fixed plan: TextWorld-Express's gold path
cannot continue once a random action left it. Such an episode ends at that action, with one line saying
so; an env with no expert at all is still refused with 'no expert'."""

from __future__ import annotations

import pytest

from prover.engines.hf import HFEngine
from prover.envs.base import TextEnv
from prover.errors import CapabilityError
from prover.policy.warmstart import expert_rows

PLAN = ("open door", "go north", "take key", "unlock chest")


class GoldPathEnv(TextEnv):
    """Four steps to win; the expert replays the gold path and knows nothing once an action left it. The
    plan's next action is never listed among the admissible ones, so every random action leaves it."""

    expert_follows_plan = True

    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        self.done, self.on_plan = 0, True
        return "Open the chest.", self._info()

    def _info(self, won: bool = False) -> dict:
        return {"task": "Open the chest.", "won": won, "is_action_valid": True,
                "admissible_actions": ["look", "inventory", "wait"]}

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self.on_plan and action == PLAN[self.done]:
            self.done += 1
        else:
            self.on_plan = False
        won = self.done == len(PLAN)
        return f"Step {self.done}.", float(won), won, False, self._info(won)

    def state_key(self) -> tuple:
        return (self.done, self.on_plan)

    def expert_action(self) -> str | None:
        return PLAN[self.done] if self.on_plan else None


class UndeclaredGoldPathEnv(GoldPathEnv):
    expert_follows_plan = False


class NoExpertEnv(GoldPathEnv):
    def expert_action(self) -> str | None:
        return None


@pytest.fixture(scope="module")
def tok(tiny_policy_dir):
    return HFEngine(tiny_policy_dir).tokenizer


def rows_and_lines(env_cls, tok, share: float, episodes: int = 6) -> tuple[list, list[str]]:
    lines: list[str] = []
    rows = expert_rows(env_cls, tok, episodes=episodes, random_share=share, seed=0, max_turns=8, note=lines.append)
    return rows, lines


def test_a_random_action_off_the_plan_ends_that_episode_with_a_line(tok):
    rows, lines = rows_and_lines(GoldPathEnv, tok, share=1.0)
    assert len(rows) == 6  # each episode: its one random turn, then the expert has nothing
    assert lines == ["warm start: env GoldPathEnv: its expert follows a fixed plan (expert_follows_plan), so 6 of "
                     "6 expert episodes ended at the random action that left the plan "
                     "(warmstart.random_action_share=1); their turns up to it are kept"]


def test_without_random_actions_the_plan_is_cloned_whole_and_nothing_is_said(tok):
    rows, lines = rows_and_lines(GoldPathEnv, tok, share=0.0)
    assert len(rows) == 6 * len(PLAN) and lines == []


def test_an_undeclared_expert_that_stops_after_a_random_action_is_named_so(tok):
    rows, [line] = rows_and_lines(UndeclaredGoldPathEnv, tok, share=1.0, episodes=3)
    assert len(rows) == 3
    assert "its expert returned None after a random action (declare expert_follows_plan = True" in line
    assert "3 of 3 expert episodes ended" in line


def test_an_env_without_an_expert_is_still_refused(tok):
    with pytest.raises(CapabilityError, match="env NoExpertEnv has no expert"):
        rows_and_lines(NoExpertEnv, tok, share=0.5)
