"""Budget-matched GRPO: GRPO with larger groups, spending the generated tokens a branching method spends.

    G'(step) = schedule phase of ``step``                          (a table such as the paper's Table 4)
             | ceil(G * tokens_ref(step) / rollout_tokens_ref(step))   (from a reference run's metrics)
             | ceil(G * (1 + overhead))                             (a fixed measured overhead)
    A_i      = GRPO advantage over the G' members of the group (see grpo.py)

Paper: the budget-matched baseline of ProVer (arXiv 2609.36178), Table 1 and appendix Table 4 (per-phase
group sizes, e.g. 11 then 12 trajectories per group for Qwen3.5-2B on ALFWorld); the arithmetic is in
../shared/research/algorithms.md §5.

Departures:
1. Besides a fixed schedule, G' can be derived step by step from a reference run's metrics.jsonl
   (rollout plus branch tokens over rollout tokens), so the two arms spend the same measured budget.
2. The default, ``overhead=0.125``, is one extra trajectory per group of 8 (the paper's "8 to 9").
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from pydantic import Field, model_validator

from prover.credit.grpo import GRPO, GRPOConfig
from prover.registry import CREDIT


class BudgetMatchedConfig(GRPOConfig):
    overhead: float = Field(0.125, ge=0.0, description="Token overhead to match when neither schedule nor "
                            "budget_from is given: G' = ceil(G * (1 + overhead)).")
    schedule: list[tuple[int, int]] | None = Field(None, description="Phases as [first_step, group_size] pairs, "
                                                   "e.g. [[1, 11], [85, 12]] (the paper's Table 4).")
    budget_from: str | None = Field(None, description="metrics.jsonl of a reference run (e.g. ProVer's): each "
                                    "step's G' matches that step's rollout plus branch tokens.")

    @model_validator(mode="after")
    def _one_source(self) -> "BudgetMatchedConfig":
        if self.schedule is not None and self.budget_from is not None:
            raise ValueError("give credit.schedule or credit.budget_from, not both")
        if self.schedule is not None and (not self.schedule or self.schedule[0][0] > 1
                                          or any(g < 1 for _, g in self.schedule)):
            raise ValueError("credit.schedule must start at step 1 and give group sizes of at least 1")
        if self.budget_from is not None and not Path(self.budget_from).is_file():
            raise ValueError(f"credit.budget_from file {self.budget_from!r} does not exist")
        return self


def budget_ratios(metrics_path: str) -> dict[int, float]:
    """(rollout + branch tokens) / rollout tokens per train step of a reference run."""
    ratios = {}
    for line in Path(metrics_path).read_text().splitlines():
        r = json.loads(line)
        if r.get("phase") == "train" and r.get("cost/rollout_tokens"):
            ratios[int(r["step"])] = (r["cost/rollout_tokens"] + r.get("cost/branch_tokens", 0.0)) \
                / r["cost/rollout_tokens"]
    return ratios


@CREDIT.register("budget-matched-grpo")
class BudgetMatchedGRPO(GRPO):
    Config = BudgetMatchedConfig

    def __init__(self, config: BudgetMatchedConfig | None = None) -> None:
        super().__init__(config)
        cfg = self.config
        self._ratios = budget_ratios(cfg.budget_from) if cfg.budget_from else {}

    def group_size(self, step: int, default: int) -> int:
        cfg = self.config
        if cfg.schedule is not None:
            return [g for first, g in sorted(cfg.schedule) if first <= step][-1]
        if cfg.budget_from is not None:
            ratio = self._ratios.get(step) or (sum(self._ratios.values()) / len(self._ratios) if self._ratios else 1.0)
            return math.ceil(default * ratio - 1e-9)
        return math.ceil(default * (1 + cfg.overhead) - 1e-9)
