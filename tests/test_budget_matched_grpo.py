"""Budget-matched GRPO: the group size per step from a schedule, a reference run, or an overhead."""

from __future__ import annotations

import json

import pytest

from prover.config_load import load_config
from prover.credit.budget_matched_grpo import BudgetMatchedConfig, BudgetMatchedGRPO
from prover.errors import ConfigError


def test_paper_table4_schedule():
    # Qwen3.5-2B ALFWorld in the paper's Table 4: 11 per group for steps 1-84, then 12
    method = BudgetMatchedGRPO(BudgetMatchedConfig(schedule=[(1, 11), (85, 12)]))
    assert [method.group_sizes(s, 2, 8) for s in (1, 84, 85, 100)] == [[11, 11]] * 2 + [[12, 12]] * 2


def test_fixed_overhead_rounds_up():
    assert BudgetMatchedGRPO().group_sizes(1, 1, 8) == [9]  # ceil(8 * 1.125)
    assert BudgetMatchedGRPO(BudgetMatchedConfig(overhead=0.024)).group_sizes(1, 1, 8) == [9]  # ceil(8.192)
    assert BudgetMatchedGRPO(BudgetMatchedConfig(overhead=0.0)).group_sizes(1, 1, 8) == [8]


def _metrics(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_budget_from_tracks_the_reference_runs_cumulative_tokens(tmp_path):
    # The reference (a ProVer run at G = 4 on 2 tasks): 8 trajectories of 100 tokens per step, plus branches.
    ref = _metrics(tmp_path / "ref.jsonl", [
        {"step": 0, "phase": "eval", "eval/success": 0.1},
        {"step": 1, "phase": "train", "rollout/group_size": 4.0, "cost/rollout_tokens": 800.0,
         "cost/branch_tokens": 300.0},
        {"step": 2, "phase": "train", "rollout/group_size": 4.0, "cost/rollout_tokens": 800.0,
         "cost/branch_tokens": 100.0}])
    own = tmp_path / "own.jsonl"
    method = BudgetMatchedGRPO(BudgetMatchedConfig(budget_from=str(ref)), own_metrics=str(own))
    # step 1: target 1100 tokens, none spent, tau from the reference's step 1 = 800 / 8 = 100 -> 11 trajectories
    assert method.group_sizes(1, 2, 4) == [6, 5]
    # step 1 went long: 11 trajectories of 120 tokens = 1320. Step 2: target 1100 + 900 = 2000, left 680,
    # tau = 1320 / (5.5 * 2) = 120 -> round(5.67) = 6, below G * tasks = 8, so 8 (never fewer than G)
    _metrics(own, [{"step": 1, "phase": "train", "rollout/group_size": 5.5, "cost/rollout_tokens": 1320.0}])
    assert method.group_sizes(2, 2, 4) == [4, 4]
    # step 3 is past the reference: its mean per step, (1100 + 900) / 2 = 1000, is the target's increment.
    # own step 2 spent 8 x 90 = 720: target 3000, spent 2040, left 960, tau 90 -> round(10.67) = 11
    _metrics(own, [{"step": 1, "phase": "train", "rollout/group_size": 5.5, "cost/rollout_tokens": 1320.0},
                   {"step": 2, "phase": "train", "rollout/group_size": 4.0, "cost/rollout_tokens": 720.0}])
    assert method.group_sizes(3, 2, 4) == [6, 5]


def test_groups_of_different_sizes_are_each_centred_by_their_own_mean():
    from prover.config import TrainConfig
    from prover.credit.base import CreditContext
    from prover.types import Batch, Group, Trajectory, Turn

    def traj(i, won):
        t = Turn(prompt_ids=[1], completion_ids=[2, 3], logprobs=[-0.1, -0.1], action="a", observation="o",
                 completion_text="a", reward=float(won), format_valid=True, action_valid=True, state_key="s")
        return Trajectory(f"t{i}", "task", "task", turns=[t], won=won)

    # groups of 3 and 2 (a fractional G' spread over two tasks): each is centred by its own mean, scale 10
    batch = Batch([Group("a", [traj(0, True), traj(1, False), traj(2, False)]),
                   Group("b", [traj(3, True), traj(4, False)])])
    adv = BudgetMatchedGRPO(BudgetMatchedConfig(norm="mean")).assign(batch, CreditContext(config=TrainConfig()))
    firsts = [float(tr[0][0]) for g in adv.values for tr in g]
    assert firsts == pytest.approx([10 - 10 / 3, -10 / 3, -10 / 3, 5.0, -5.0])


def test_bad_settings_are_one_line_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="not both"):
        load_config(None, ["credit.name=budget-matched-grpo", "credit.schedule=[[1, 9]]",
                           f"credit.budget_from={tmp_path}/m.jsonl"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(None, ["credit.name=budget-matched-grpo", f"credit.budget_from={tmp_path}/missing.jsonl"])
    with pytest.raises(ConfigError, match="start at step 1"):
        load_config(None, ["credit.name=budget-matched-grpo", "credit.schedule=[[5, 9]]"])
    cfg = load_config(None, ["credit.name=budget-matched-grpo", "credit.schedule=[[1, 9], [3, 10]]"])
    assert BudgetMatchedGRPO.from_train_config(cfg).group_sizes(3, 4, 8) == [10] * 4
