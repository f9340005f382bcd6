"""Budget-matched GRPO: GRPO with larger groups, spending the generated tokens a branching method spends.

    G'(step)   = schedule phase of ``step``                        (a table such as the paper's Table 4)
               | sized from a reference run's tokens (below)        (``budget_from``, what `prover bench` uses)
               | ceil(G * (1 + overhead))                           (a fixed measured overhead)
    A_i        = GRPO advantage over the G' members of the group (see grpo.py)

    budget_from: before step s, with B_ref(s) the reference run's generated tokens (rollout + branch)
    summed over steps 1..s, B_own the tokens this run generated in steps 1..s-1, and tau this run's
    rollout tokens per trajectory at step s-1 (at step 1 the reference's, as both start from one policy
    and one task stream):
               N(s) = round((B_ref(s) - B_own) / tau)                trajectories this step, at least G per task
               G'_i = floor(N / n) or that plus one                  spread over the n tasks, first tasks first

Paper: the budget-matched baseline of ProVer (arXiv 2609.36178), Table 1 and appendix Table 4: per-phase
group sizes (every update holds 16 groups) of G' = 9 to 12 in most settings, and 8 to 9 only for the 4B
model on ALFWorld, where ProVer's overhead is smallest. Our notes: docs/methods/budget-matched-grpo.md.

Departures:
1. ``budget_from`` tracks the reference's cumulative budget step by step instead of a fixed phase
   table, so the two arms' realised generated tokens stay within a few percent over the run (the bench
   reports the ratio) whatever their episode lengths. The group size may differ by one between the
   tasks of a step, which is how a fractional G' is spent; the group statistics use each group's own size.
2. The group size never drops below the configured G: budget matching only adds trajectories.
3. The default, ``overhead=0.125``, is one extra trajectory per group of 8.
4. The GRPO term has grpo.py's defaults, the base shared with prover (``norm="mean"``: centred, not
   divided by the std; ``credit.norm=std`` selects verl's), so against ProVer only the group size and
   the verified bonus differ.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import cast

from pydantic import Field, model_validator

from prover.credit.grpo import GRPO, GRPOConfig
from prover.errors import ConfigError


class BudgetMatchedConfig(GRPOConfig):
    overhead: float = Field(0.125, ge=0.0, description="Token overhead to match when neither schedule nor "
                            "budget_from is given: G' = ceil(G * (1 + overhead)).")
    schedule: list[tuple[int, int]] | None = Field(None, description="Phases as [first_step, group_size] pairs, "
                                                   "e.g. [[1, 11], [85, 12]] (the paper's Table 4).")
    budget_from: str | None = Field(None, description="metrics.jsonl of a reference run (e.g. ProVer's on the same "
                                    "env and seed): G' tracks its cumulative rollout plus branch tokens.")

    @model_validator(mode="after")
    def _one_source(self) -> BudgetMatchedConfig:
        if self.schedule is not None and self.budget_from is not None:
            raise ValueError("give credit.schedule or credit.budget_from, not both")
        if self.schedule is not None and (not self.schedule or self.schedule[0][0] > 1
                                          or any(g < 1 for _, g in self.schedule)):
            raise ValueError("credit.schedule must start at step 1 and give group sizes of at least 1")
        if self.budget_from is not None and not Path(self.budget_from).is_file():
            raise ValueError(f"credit.budget_from file {self.budget_from!r} does not exist")
        return self


def train_rows(metrics_path: Path) -> dict[int, dict]:
    """The train-step records of a metrics.jsonl by step (a torn last line is skipped)."""
    rows = {}
    if not metrics_path.is_file():
        return rows
    for line in metrics_path.read_text().splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("phase") == "train":
            rows[int(r["step"])] = r
    return rows


def generated(row: dict) -> float:
    return row.get("cost/rollout_tokens", 0.0) + row.get("cost/branch_tokens", 0.0)


def tokens_per_trajectory(row: dict, n_tasks: int) -> float:
    trajectories = row.get("rollout/group_size", 0.0) * n_tasks
    return row.get("cost/rollout_tokens", 0.0) / trajectories if trajectories else 0.0


def spread(total: int, n_tasks: int) -> list[int]:
    """``total`` trajectories over ``n_tasks`` groups, sizes differing by at most one, larger first."""
    base, extra = divmod(total, n_tasks)
    return [base + (i < extra) for i in range(n_tasks)]


class BudgetMatchedGRPO(GRPO):
    Config = BudgetMatchedConfig
    config: BudgetMatchedConfig  # the parsed settings of ``Config``

    def __init__(self, config: BudgetMatchedConfig | None = None, own_metrics: str | None = None) -> None:
        super().__init__(config)
        self.own_metrics = Path(own_metrics) if own_metrics else None  # this run's metrics.jsonl

    @classmethod
    def validate_config(cls, train_cfg) -> None:
        super().validate_config(train_cfg)
        k = train_cfg.rollout.max_off_policy_steps
        if k and cast(BudgetMatchedConfig, cls.parse_config(train_cfg)).budget_from is not None:
            # step s's group sizes are set when its rollout is queued, before step s-1's tokens are logged
            raise ConfigError(f"credit.budget_from matches each step's tokens to the steps logged before it, but "
                              f"rollout.max_off_policy_steps={k} plans a step before the last one is logged; "
                              "use credit.schedule or credit.overhead, or rollout.max_off_policy_steps=0")

    @classmethod
    def from_train_config(cls, train_cfg) -> BudgetMatchedGRPO:
        return cls(cast(BudgetMatchedConfig, cls.parse_config(train_cfg)),
                   own_metrics=str(Path(train_cfg.run.dir) / "metrics.jsonl"))

    def group_sizes(self, step: int, n_tasks: int, default: int) -> list[int]:
        cfg = self.config
        if cfg.schedule is not None:
            return [[g for first, g in sorted(cfg.schedule) if first <= step][-1]] * n_tasks
        if cfg.budget_from is not None:
            return self._matched(step, n_tasks, default)
        return [math.ceil(default * (1 + cfg.overhead) - 1e-9)] * n_tasks

    def _matched(self, step: int, n_tasks: int, default: int) -> list[int]:
        """Group sizes that bring this run's generated tokens to the reference's cumulative budget."""
        ref = train_rows(Path(self.config.budget_from))
        own = train_rows(self.own_metrics) if self.own_metrics else {}
        if not ref:
            return [default] * n_tasks
        mean_ref = sum(generated(r) for r in ref.values()) / len(ref)  # beyond the reference's last step
        target = sum(generated(ref[s]) if s in ref else mean_ref for s in range(1, step + 1))
        spent = sum(generated(own[s]) for s in range(1, step) if s in own)
        last = own.get(step - 1) or ref.get(step) or ref[min(ref)]
        tau = tokens_per_trajectory(last, n_tasks)
        if tau <= 0:
            return [default] * n_tasks
        total = max(default * n_tasks, round((target - spent) / tau))
        return spread(total, n_tasks)
