"""The numbers of the paper's three tables, from the bench cells' metrics.jsonl files (``report.py`` writes
them as Markdown and CSV; ``stats.py`` holds the statistics).

- Table 1, per env and method: final held-out success (``eval/success`` at the last step), mean over
  seeds with a bootstrap CI; the paired difference against the baseline row (same env and seed) with its
  CI and verdict; the same two for the area under the held-out curve; the median step to reach the
  ``reach`` level; the largest evaluation SE of its cells; its generated tokens per step against the
  baseline's. "avg" averages the envs per seed first (seeds with every env finished).
- Table 2: per step, means over a cell's train records, then over seeds: generated policy tokens
  (``cost/rollout_tokens + cost/branch_tokens``), judge or critic tokens and cents
  (``cost/judge_tokens``, ``cost/judge_dollars``; 0 when a method logs none), and ``time/step``.
- Table 3: per method with a judge, per env and over all envs: success (as Table 1) and the proposal
  diagnostics pooled over every train step and seed: eligible groups per step (the groups whose win count
  the method sends to its judge); the valid-proposal rate = valid proposals / judged groups; acceptance =
  accepted / valid proposals; mean segment length and mean Delta weighted by each step's valid proposals;
  and, where the env knows its pivotal turns (``truth/*``), hit rate = hits / proposals, precision = accepted
  hits / accepted, recall = accepted hits / hits, and the judged trajectories' pivotal share weighted by
  proposals.

Only finished cells (their settings unchanged, the final eval record present) enter the tables.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prover.bench import stats
from prover.bench.matrix import Cell, Plan
from prover.system.files import read_jsonl

CELL_FILE = "cell.json"  # the settings hash a cell's run was started with
TRUTH = ("truth/proposals", "truth/hits", "truth/accepted", "truth/accepted_hits")


def read_history(run_dir: Path) -> list[dict[str, Any]]:
    return read_jsonl(Path(run_dir) / "metrics.jsonl")


def final_eval(history: list[dict[str, Any]], steps: int) -> dict[str, Any] | None:
    return next((r for r in reversed(history) if r.get("phase") == "eval" and r.get("step") == steps), None)


def started_key(cell: Cell) -> str | None:
    try:
        return json.loads((cell.dir / CELL_FILE).read_text())["key"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def is_finished(cell: Cell) -> bool:
    return started_key(cell) == cell.key and final_eval(read_history(cell.dir), cell.config.steps) is not None


@dataclass
class CellResult:
    env: str
    method: str
    seed: int
    history: list[dict[str, Any]]
    steps: int

    @property
    def success(self) -> float:
        return float(final_eval(self.history, self.steps)["eval/success"])

    @property
    def train(self) -> list[dict[str, Any]]:
        """One record per step, the last logged (a step repeated after a crash counts once)."""
        return list({r["step"]: r for r in self.history if r.get("phase") == "train"}.values())

    @property
    def curve(self) -> dict[int, float]:
        """Held-out success at every evaluated step (the last record of a step)."""
        return {int(r["step"]): float(r["eval/success"]) for r in self.history
                if r.get("phase") == "eval" and "eval/success" in r}

    @property
    def se(self) -> float | None:
        """Binomial SE of the final evaluation; None when it did not log its episodes."""
        final = final_eval(self.history, self.steps)
        n = final.get("eval/episodes") if final else None
        return stats.eval_se(float(final["eval/success"]), float(n)) if n else None


def collect(plan: Plan) -> tuple[list[CellResult], list[Cell]]:
    """Results of the finished cells, and the cells not finished."""
    done, pending = [], []
    for cell in plan.cells:
        if is_finished(cell):
            done.append(CellResult(cell.env, cell.method.row, cell.seed, read_history(cell.dir),
                                   cell.config.steps))
        else:
            pending.append(cell)
    return done, pending


# -- Table 1 ---------------------------------------------------------------------------------------

def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


@dataclass
class Entry:
    """One (method, env) entry of Table 1; env "avg" averages the envs per seed."""

    success: stats.Interval
    std: float | None  # sample std over seeds (n - 1); None below two
    diff: stats.Paired | None  # against the baseline; None for the baseline itself or without one
    auc: stats.Interval
    auc_diff: stats.Paired | None
    reach: stats.Reach | None  # None when reach is off, and for "avg"
    max_se: float | None
    tokens_vs_baseline: float | None


def per_seed(results: list[CellResult], method: str, envs: list[str],
             value: Callable[[CellResult], float | None]) -> dict[int, float]:
    """{seed: value(cell)} for one env, or, for several, the mean over them of seeds that have them all
    (a cell whose value is None leaves its seed out)."""
    by_seed: dict[int, dict[str, float]] = {}
    for r in results:
        if r.method == method and r.env in envs and (v := value(r)) is not None:
            by_seed.setdefault(r.seed, {})[r.env] = v
    return {s: statistics.fmean(vals.values()) for s, vals in by_seed.items() if len(vals) == len(envs)}


def _auc(r: CellResult) -> float | None:
    return stats.auc(r.curve, r.steps)


def entry(results: list[CellResult], m: str, envs: list[str], baseline: str | None,
          reach: float | None) -> Entry:
    """Table 1's numbers for method ``m`` on ``envs`` (one env, or every env for "avg")."""
    success = per_seed(results, m, envs, lambda r: r.success)
    areas = per_seed(results, m, envs, _auc)
    compare = baseline is not None and m != baseline and any(r.method == baseline for r in results)
    mine = [r for r in results if r.method == m and r.env in envs]
    one = len(envs) == 1
    ses = [se for r in mine if (se := r.se) is not None]
    values = list(success.values())
    return Entry(
        success=stats.bootstrap(values), std=statistics.stdev(values) if len(values) > 1 else None,
        diff=stats.paired(success, per_seed(results, baseline, envs, lambda r: r.success)) if compare else None,
        auc=stats.bootstrap(list(areas.values())),
        auc_diff=stats.paired(areas, per_seed(results, baseline, envs, _auc)) if compare else None,
        reach=stats.median_reach([stats.first_reach(r.curve, reach) for r in mine])
        if one and reach is not None else None,
        max_se=max(ses) if one and ses else None,
        tokens_vs_baseline=tokens_per_step_ratio(results, m, baseline, envs[0]) if one and baseline else None)


def table1(results: list[CellResult], methods: list[str], envs: list[str], baseline: str | None = "grpo",
           reach: float | None = None) -> list[dict[str, Any]]:
    """One row per method: {"method", env: Entry, ..., "avg": Entry}."""
    rows = []
    for m in methods:
        row: dict[str, Any] = {"method": m}
        for env in envs:
            row[env] = entry(results, m, [env], baseline, reach)
        row["avg"] = entry(results, m, envs, baseline, None)
        rows.append(row)
    return rows


# -- Table 2 ---------------------------------------------------------------------------------------

GENERATED = ("cost/rollout_tokens", "cost/branch_tokens")


def _per_step(r: CellResult, *keys: str) -> float | None:
    """Mean over the cell's train records of the sum of ``keys`` (a missing key counts 0)."""
    return _mean([sum(float(t.get(k, 0.0)) for k in keys) for t in r.train])


def total_generated(r: CellResult) -> float:
    """The cell's generated policy tokens over training: rollouts and continuations."""
    return sum(float(t.get(k, 0.0)) for t in r.train for k in GENERATED)


def token_ratio(results: list[CellResult], method: str, ref: str, env: str) -> float | None:
    """Mean over seeds of a cell's total generated tokens over its paired ``ref`` cell's (same env, seed)."""
    refs = {r.seed: total_generated(r) for r in results if r.method == ref and r.env == env}
    ratios = [total_generated(r) / refs[r.seed] for r in results
              if r.method == method and r.env == env and refs.get(r.seed)]
    return _mean(ratios)


def tokens_per_step(results: list[CellResult], method: str, env: str) -> float | None:
    """Generated policy tokens per step as Table 2 computes them: per-cell means over steps, then over seeds."""
    return _mean([_per_step(r, *GENERATED) for r in results if r.method == method and r.env == env and r.train])


def tokens_per_step_ratio(results: list[CellResult], method: str, ref: str, env: str) -> float | None:
    mine, theirs = tokens_per_step(results, method, env), tokens_per_step(results, ref, env)
    return mine / theirs if mine is not None and theirs else None


def table2(results: list[CellResult], methods: list[str], envs: list[str],
           budget_refs: dict[str, str] | None = None, baseline: str = "grpo") -> list[dict[str, Any]]:
    """One row per (method, env): per-step costs, means over seeds of the per-cell means; generated tokens
    against the baseline's and, for a budget-matched row, against the row it matches (paired by seed)."""
    budget_refs = budget_refs or {}
    rows = []
    for m in methods:
        for env in envs:
            cells = [r for r in results if r.method == m and r.env == env and r.train]
            if not cells:
                continue

            # called only within this iteration, so `cells` is always the current one
            def over_seeds(*keys: str, scale: float = 1.0) -> float:
                return statistics.fmean(_per_step(r, *keys) for r in cells) * scale  # noqa: B023

            rows.append({"method": m, "env": env, "n": len(cells),
                         "generated_tokens": over_seeds(*GENERATED),
                         "rollout_tokens": over_seeds("cost/rollout_tokens"),
                         "branch_tokens": over_seeds("cost/branch_tokens"),
                         "judge_tokens": over_seeds("cost/judge_tokens"),
                         "judge_cents": over_seeds("cost/judge_dollars", scale=100.0),
                         "judge_cached_cents": over_seeds("cost/judge_cached_dollars", scale=100.0),
                         "seconds": over_seeds("time/step"),
                         "vs_baseline": token_ratio(results, m, baseline, env),
                         "matched_to": budget_refs.get(m),
                         "vs_matched": token_ratio(results, m, budget_refs[m], env) if m in budget_refs else None})
    return rows


# -- Table 3 ---------------------------------------------------------------------------------------

def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def _weighted(recs: list[dict[str, Any]], key: str, weight: str) -> float | None:
    """Mean of ``key`` over records, each weighted by its ``weight`` count."""
    w = [(float(t[weight]), float(t[key])) for t in recs if key in t and float(t.get(weight, 0.0)) > 0]
    total = sum(n for n, _ in w)
    return sum(n * v for n, v in w) / total if total else None


def truth_stats(recs: list[dict[str, Any]]) -> dict[str, Any]:
    """Judge proposals against the pivotal turns, pooled over records; ``truth`` False when none logs any."""
    if not any("truth/proposals" in t for t in recs):
        return {"truth": False, "proposals": None, "hit_rate": None, "precision": None, "recall": None,
                "pivotal_share": None}
    p, h, a, ah = (sum(float(t.get(k, 0.0)) for t in recs) for k in TRUTH)
    return {"truth": True, "proposals": p, "hit_rate": _ratio(h, p), "precision": _ratio(ah, a),
            "recall": _ratio(ah, h),
            "pivotal_share": _weighted(recs, "truth/target_pivotal_share", "truth/proposals")}


def proposal_stats(results: list[CellResult]) -> dict[str, Any]:
    """Pooled over every train record: valid and accepted proposals, acceptance, weighted length and Delta,
    and the ground-truth ratios where the env logs them."""
    recs = [t for r in results for t in r.train]

    def total(key: str, among: Iterable[Mapping[str, float]] = recs) -> float:
        return sum(float(t.get(key, 0.0)) for t in among)

    valid, accepted = total("credit/valid_proposals"), total("credit/accepted")
    logged = [t for t in recs if "credit/eligible_groups" in t]  # the steps of a method that logs its groups
    return {"eligible_per_step": _ratio(total("credit/eligible_groups", logged), len(logged)),
            "valid_rate": _ratio(total("credit/valid_proposals", logged), total("credit/judged_groups", logged)),
            "valid": valid, "accepted": accepted, "acceptance": _ratio(accepted, valid),
            "segment_turns": _weighted(recs, "credit/segment_turns", "credit/valid_proposals"),
            "delta": _weighted(recs, "credit/delta", "credit/valid_proposals"), **truth_stats(recs)}


def table3(results: list[CellResult], methods: list[str], envs: list[str]) -> list[dict[str, Any]]:
    """One row per method with a judge and env, then one over all envs ("all"): success (Table 1's mean
    and CI; "all" averages the envs per seed) and the pooled proposal diagnostics."""
    rows = []
    for m in methods:
        mine = [r for r in results if r.method == m]
        for env in envs:
            rows.append({"method": m, "env": env, "success": stats.bootstrap(list(
                per_seed(results, m, [env], lambda r: r.success).values())),
                **proposal_stats([r for r in mine if r.env == env])})
        rows.append({"method": m, "env": "all", "success": stats.bootstrap(list(
            per_seed(results, m, envs, lambda r: r.success).values())), **proposal_stats(mine)})
    return rows
