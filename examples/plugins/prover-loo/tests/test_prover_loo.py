"""The loo credit method keeps the credit contract (prover's tests/test_credit_contract.py) and matches
its formula on a group worked by hand. Found by name, so the package must be installed
(`pip install -e .`)."""

from __future__ import annotations

import numpy as np
import pytest

from prover.config import TrainConfig
from prover.config_load import load_config
from prover.credit import CreditContext
from prover.errors import ConfigError
from prover.registry import CREDIT
from prover.types import Batch, Group, Trajectory, Turn

from prover_loo import LooCredit


def trajectory(traj_id: str, won: bool, n_turns: int, tokens: int = 2) -> Trajectory:
    """A won trajectory has reward 1.0 on its last turn, so its score R_i is reward.scale (10) times 1."""
    turns = [Turn(prompt_ids=[1], completion_ids=[5] * tokens, logprobs=[-0.5] * tokens, observation="o",
                  completion_text="", action="a", format_valid=True, action_valid=True,
                  reward=1.0 if won and t == n_turns - 1 else 0.0, state_key=t) for t in range(n_turns)]
    return Trajectory(traj_id, "task", "", turns=turns, won=won)


def assign(batch: Batch, **fields) -> list[np.ndarray]:
    method = CREDIT.get("loo")(LooCredit.Config(**fields))
    advantages = method.assign(batch, CreditContext(TrainConfig()))  # reward.scale = 10
    values = advantages.flat()
    turns = batch.turns()
    assert [len(v) for v in values] == [t.n_tokens for t in turns]  # one value per completion token
    return values


def test_found_by_name() -> None:
    assert CREDIT.get("loo") is LooCredit


def test_empty_and_all_failed_groups_give_zeros() -> None:
    failed = Group("failed", [trajectory("A", False, 3), trajectory("B", False, 2)])
    batch = Batch([Group("empty", []), failed])
    assert all(np.all(v == 0.0) for v in assign(batch))


@pytest.mark.parametrize("baseline, expected", [
    ("loo", [10.0, -5.0, -5.0]),  # scores 10, 0, 0: 10 - (0+0)/2, 0 - (10+0)/2, 0 - (10+0)/2
    ("mean", [20 / 3, -10 / 3, -10 / 3]),  # mean 10/3
])
def test_a_group_worked_by_hand(baseline: str, expected: list[float]) -> None:
    group = Group("g", [trajectory("win", True, 2), trajectory("lose", False, 1), trajectory("x", False, 3)])
    batch = Batch([group])
    values = assign(batch, baseline=baseline)
    per_turn = [expected[0]] * 2 + [expected[1]] + [expected[2]] * 3
    for v, want in zip(values, per_turn):
        np.testing.assert_allclose(v, want, rtol=1e-6)
    assert abs(sum(expected)) < 1e-9  # both baselines sum to zero over a group


def test_bad_settings_fail_when_the_config_loads() -> None:
    with pytest.raises(ConfigError, match="group_size"):
        load_config(None, ["credit.name=loo", "rollout.group_size=1"])
    with pytest.raises(ConfigError, match="credit.baseline"):
        load_config(None, ["credit.name=loo", "credit.baseline=median"])
