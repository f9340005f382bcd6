"""What ``prover new credit`` and ``prover new judge`` write, code and test per kind (``string.Template``:
name, module, cls, title); the env's are in scaffold_templates.py. Working plugins, not stubs: see there."""

CREDIT_CODE = '''\
"""${title}: a leave-one-out outcome baseline (RLOO) on every token of a trajectory.

    A_i       = R_i - mean_{j != i} R_j          baseline = "loo"  (RLOO, Ahmadian et al., arXiv 2402.14740)
    A_i       = R_i - mean_j R_j                 baseline = "mean"
    A_{i,t,k} = A_i                              every token k of every turn t of trajectory i

R_i is the trajectory's score, reward.scale times its env return (prover.credit.base.trajectory_score).
A group of one has no baseline and gets 0. Made by `prover new credit ${name}`; docs/plugins.md in prover
explains each part.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from prover.credit.base import CreditAssigner, CreditContext, MethodConfig, broadcast, trajectory_score
from prover.types import Advantages, Batch


class ${cls}Config(MethodConfig):
    baseline: Literal["loo", "mean"] = Field(
        "loo", description="The baseline R_i is compared with: the mean of the group's other trajectories "
        "(loo) or of all of them (mean).")


def baseline_advantages(scores: np.ndarray, baseline: str) -> np.ndarray:
    """(G,) advantages of one group from its (G,) scores; zeros for a group of fewer than two."""
    n = len(scores)
    if n < 2:
        return np.zeros(n)
    if baseline == "loo":
        return scores - (scores.sum() - scores) / (n - 1)
    return scores - scores.mean()


class ${cls}(CreditAssigner):
    Config = ${cls}Config
    needs_groups = True  # compares a group's trajectories: refused at rollout.group_size=1
    needs_snapshots = False  # never branches, so it runs on envs that cannot snapshot

    def assign(self, batch: Batch, ctx: CreditContext) -> Advantages:
        per_turn = []
        for group in batch.groups:
            scores = np.array([trajectory_score(tr, ctx.config.reward) for tr in group.trajectories])
            advantages = baseline_advantages(scores, self.config.baseline)
            per_turn.append([np.full(len(tr.turns), a) for tr, a in zip(group.trajectories, advantages)])
        values = broadcast(batch, per_turn)  # one value per completion token of every turn
        flat = [a for g in values for tr in g for a in tr]
        mean_abs = float(np.mean(np.abs(np.concatenate(flat)))) if flat else 0.0
        return Advantages(values=values, metrics={"credit/mean_abs_advantage": mean_abs})
'''

CREDIT_TEST = '''\
"""The ${name} credit method keeps the credit contract (prover's tests/test_credit_contract.py) and matches
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

from ${module} import ${cls}


def trajectory(traj_id: str, won: bool, n_turns: int, tokens: int = 2) -> Trajectory:
    """A won trajectory has reward 1.0 on its last turn, so its score R_i is reward.scale (10) times 1."""
    turns = [Turn(prompt_ids=[1], completion_ids=[5] * tokens, logprobs=[-0.5] * tokens, observation="o",
                  completion_text="", action="a", format_valid=True, action_valid=True,
                  reward=1.0 if won and t == n_turns - 1 else 0.0, state_key=t) for t in range(n_turns)]
    return Trajectory(traj_id, "task", "", turns=turns, won=won)


def assign(batch: Batch, **fields) -> list[np.ndarray]:
    method = CREDIT.get("${name}")(${cls}.Config(**fields))
    advantages = method.assign(batch, CreditContext(TrainConfig()))  # reward.scale = 10
    values = advantages.flat()
    turns = batch.turns()
    assert [len(v) for v in values] == [t.n_tokens for t in turns]  # one value per completion token
    return values


def test_found_by_name() -> None:
    assert CREDIT.get("${name}") is ${cls}


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
        load_config(None, ["credit.name=${name}", "rollout.group_size=1"])
    with pytest.raises(ConfigError, match="credit.baseline"):
        load_config(None, ["credit.name=${name}", "credit.baseline=median"])
'''

JUDGE_CODE = '''\
"""${title}: proposes the last turns before the success's final turn (a recency heuristic).

Free and deterministic: it reads nothing but the segment bounds, so it is a baseline an informed judge must
beat. A judge proposes and never writes advantages; ProVer validates the proposal and verifies it by
branching. Made by `prover new judge ${name}`; docs/plugins.md in prover explains each part.
"""

from __future__ import annotations

from pydantic import Field

from prover.judges.base import Judge, JudgeSettings, valid_segments
from prover.types import JudgeRequest, JudgeResult, JudgeUsage, Proposal


class ${cls}Config(JudgeSettings):
    turns: int = Field(1, ge=1, description="Turns of the proposed segment, at most (and at most the "
                       "request's max_turns).")


class ${cls}(Judge):
    """Free, deterministic: the valid segment of at most judge.turns turns that ends latest before the
    success's final turn. It reads nothing but the segment bounds."""

    Config = ${cls}Config

    def propose(self, request: JudgeRequest) -> JudgeResult:
        longest = min(self.config.turns, request.max_turns)
        candidates = [s for s in valid_segments(request) if s.end_turn - s.start_turn + 1 <= longest]
        if not candidates:  # e.g. a one-turn success: there is no state after a segment to branch from
            return JudgeResult(None, failure="no valid segment in the successful trajectory")
        best = max(candidates, key=lambda s: (s.end_turn, s.end_turn - s.start_turn))
        n = best.end_turn - best.start_turn + 1
        # A free judge costs nothing; an LLM judge fills calls, tokens and dollars here.
        proposal = Proposal(best, rationale=f"the {n} turn(s) before the last one")
        return JudgeResult(proposal, usage=JudgeUsage())
'''

JUDGE_TEST = '''\
"""The ${name} judge returns proposals that pass prover's validation, worked out by hand on small groups.
Found by name, so the package must be installed (`pip install -e .`)."""

from __future__ import annotations

import pytest

from prover.config_load import load_config
from prover.errors import ConfigError
from prover.judges import validate_segment
from prover.registry import JUDGES
from prover.types import Group, JudgeRequest, Segment, Trajectory, Turn

from ${module} import ${cls}


def trajectory(traj_id: str, won: bool, n_turns: int, rejected: tuple[int, ...] = ()) -> Trajectory:
    turns = [Turn(prompt_ids=[1], completion_ids=[5], logprobs=[-0.5], observation=f"o{t}",
                  completion_text="", action=f"a{t}", format_valid=True, action_valid=t not in rejected,
                  reward=1.0 if won and t == n_turns - 1 else 0.0, state_key=t) for t in range(n_turns)]
    return Trajectory(traj_id, "task", "", turns=turns, won=won)


def request(n_turns: int, rejected: tuple[int, ...] = ()) -> JudgeRequest:
    group = Group("task", [trajectory("lose", False, 6), trajectory("win", True, n_turns, rejected)])
    return JudgeRequest(group, target=1, max_turns=4)


def propose(req: JudgeRequest, **fields) -> Segment | None:
    judge = JUDGES.get("${name}")(${cls}.Config(**fields))
    result = judge.propose(req)
    assert result.usage.calls == 0 and result.usage.dollars == 0.0  # free
    if result.proposal is None:
        assert result.failure  # no proposal always says why
        return None
    assert validate_segment(req, result.proposal.segment) is None
    return result.proposal.segment


def test_found_by_name() -> None:
    assert JUDGES.get("${name}") is ${cls}


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
        load_config(None, ["credit.name=prover", "judge.name=${name}", "judge.turns=0"])
'''
