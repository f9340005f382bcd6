"""Budget-matched GRPO: the group size per step from a schedule, a reference run, or an overhead."""

from __future__ import annotations

import json

import pytest

from prover.config import load_config
from prover.credit.budget_matched_grpo import BudgetMatchedConfig, BudgetMatchedGRPO
from prover.errors import ConfigError


def test_paper_table4_schedule():
    # Qwen3.5-2B ALFWorld in the paper's Table 4: 11 per group for steps 1-84, then 12
    method = BudgetMatchedGRPO(BudgetMatchedConfig(schedule=[(1, 11), (85, 12)]))
    assert [method.group_size(s, 8) for s in (1, 84, 85, 100)] == [11, 11, 12, 12]


def test_fixed_overhead_rounds_up():
    assert BudgetMatchedGRPO().group_size(1, 8) == 9  # ceil(8 * 1.125)
    assert BudgetMatchedGRPO(BudgetMatchedConfig(overhead=0.024)).group_size(1, 8) == 9  # ceil(8.192)
    assert BudgetMatchedGRPO(BudgetMatchedConfig(overhead=0.0)).group_size(1, 8) == 8


def test_budget_from_a_reference_run(tmp_path):
    ref = tmp_path / "metrics.jsonl"
    rows = [{"step": 0, "phase": "eval", "eval/success": 0.1},
            {"step": 1, "phase": "train", "cost/rollout_tokens": 1000.0, "cost/branch_tokens": 250.0},
            {"step": 2, "phase": "train", "cost/rollout_tokens": 1000.0, "cost/branch_tokens": 0.0}]
    ref.write_text("".join(json.dumps(r) + "\n" for r in rows))
    method = BudgetMatchedGRPO(BudgetMatchedConfig(budget_from=str(ref)))
    assert method.group_size(1, 8) == 10  # ceil(8 * 1250 / 1000)
    assert method.group_size(2, 8) == 8  # no branch tokens that step
    assert method.group_size(3, 8) == 9  # beyond the reference: its mean ratio 1.125


def test_bad_settings_are_one_line_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="not both"):
        load_config(None, ["credit.name=budget-matched-grpo", "credit.schedule=[[1, 9]]",
                           f"credit.budget_from={tmp_path}/m.jsonl"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(None, ["credit.name=budget-matched-grpo", f"credit.budget_from={tmp_path}/missing.jsonl"])
    with pytest.raises(ConfigError, match="start at step 1"):
        load_config(None, ["credit.name=budget-matched-grpo", "credit.schedule=[[5, 9]]"])
    cfg = load_config(None, ["credit.name=budget-matched-grpo", "credit.schedule=[[1, 9], [3, 10]]"])
    assert BudgetMatchedGRPO.from_train_config(cfg).group_size(3, 8) == 10
