"""The recent judge returns proposals that pass prover's validation, worked out by hand on small groups.
Found by name, so the package must be installed (`pip install -e .`)."""

from __future__ import annotations

import pytest

from prover.config_load import load_config
from prover.errors import ConfigError
from prover.judges import validate_segment
from prover.registry import JUDGES
from prover.types import Group, JudgeRequest, Segment, Trajectory, Turn

from prover_recent import RecentJudge


def trajectory(traj_id: str, won: bool, n_turns: int, rejected: tuple[int, ...] = ()) -> Trajectory:
    turns = [Turn(prompt_ids=[1], completion_ids=[5], logprobs=[-0.5], observation=f"o{t}",
                  completion_text="", action=f"a{t}", format_valid=True, action_valid=t not in rejected,
                  reward=1.0 if won and t == n_turns - 1 else 0.0, state_key=t) for t in range(n_turns)]
    return Trajectory(traj_id, "task", "", turns=turns, won=won)


def request(n_turns: int, rejected: tuple[int, ...] = ()) -> JudgeRequest:
    group = Group("task", [trajectory("lose", False, 6), trajectory("win", True, n_turns, rejected)])
    return JudgeRequest(group, target=1, max_turns=4)


def propose(req: JudgeRequest, **fields) -> Segment | None:
    judge = JUDGES.get("recent")(RecentJudge.Config(**fields))
    result = judge.propose(req)
    assert result.usage.calls == 0 and result.usage.dollars == 0.0  # free
    if result.proposal is None:
        assert result.failure  # no proposal always says why
        return None
    assert validate_segment(req, result.proposal.segment) is None
    return result.proposal.segment


def test_found_by_name() -> None:
    assert JUDGES.get("recent") is RecentJudge


@pytest.mark.parametrize("turns, rejected, expected", [
    (1, (), (3, 3)),  # turns 0..4: the last turn before the final one
    (3, (), (1, 3)),
    (9, (), (0, 3)),  # cut to the request's max_turns (4)
    (1, (3,), (2, 2)),  # a rejected action is never inside a segment
    (2, (3,), (1, 2)),
])
def test_segments_worked_by_hand(turns: int, rejected: tuple[int, ...], expected: tuple[int, int]) -> None:
    assert propose(request(5, rejected), turns=turns) == Segment("win", *expected)


def test_a_one_turn_success_gets_no_proposal() -> None:
    assert propose(request(1)) is None


def test_bad_settings_fail_when_the_config_loads() -> None:
    with pytest.raises(ConfigError, match="judge.turns"):
        load_config(None, ["credit.name=prover", "judge.name=recent", "judge.turns=0"])
