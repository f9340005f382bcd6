"""The paper's three tables from the bench cells' metrics.jsonl files, as Markdown and CSV.

- Table 1: final held-out success (``eval/success`` at the last step), mean and sample std over seeds,
  per env; the average over envs is taken per seed first (seeds with every env finished), then its
  mean and sample std over seeds.
- Table 2: per step, means over a cell's train records, then over seeds: generated policy tokens
  (``cost/rollout_tokens + cost/branch_tokens``), judge or critic tokens and cents
  (``cost/judge_tokens``, ``cost/judge_dollars``; 0 when a method logs none), and ``time/step``.
- Table 3: per method with a judge: success per env and averaged (as Table 1), and the proposal
  diagnostics pooled over every train step of every env and seed: acceptance = accepted / valid
  proposals; mean segment length and mean Delta weighted by each step's valid proposals.

Only finished cells (their settings unchanged, the final eval record present) enter the tables.
"""

from __future__ import annotations

import csv
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prover.bench.matrix import Cell, Plan
from prover.run import read_jsonl

CELL_FILE = "cell.json"  # the settings hash a cell's run was started with


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
        return [r for r in self.history if r.get("phase") == "train"]


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


# -- numbers ---------------------------------------------------------------------------------------

@dataclass
class Stat:
    mean: float | None
    std: float | None  # sample std (n - 1); None below two values
    n: int


def mean_std(values: list[float]) -> Stat:
    if not values:
        return Stat(None, None, 0)
    return Stat(statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None, len(values))


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def table1(results: list[CellResult], methods: list[str], envs: list[str]) -> list[dict[str, Any]]:
    """One row per method: {"method", env: Stat, ..., "avg": Stat}."""
    rows = []
    for m in methods:
        mine = [r for r in results if r.method == m]
        row: dict[str, Any] = {"method": m}
        for env in envs:
            row[env] = mean_std([r.success for r in mine if r.env == env])
        by_seed: dict[int, dict[str, float]] = {}
        for r in mine:
            by_seed.setdefault(r.seed, {})[r.env] = r.success
        row["avg"] = mean_std([statistics.fmean(s[e] for e in envs) for s in by_seed.values()
                               if set(envs) <= set(s)])
        rows.append(row)
    return rows


def _per_step(r: CellResult, *keys: str) -> float | None:
    """Mean over the cell's train records of the sum of ``keys`` (a missing key counts 0)."""
    return _mean([sum(float(t.get(k, 0.0)) for k in keys) for t in r.train])


def _total(r: CellResult) -> float:
    return sum(float(t.get("cost/rollout_tokens", 0.0)) + float(t.get("cost/branch_tokens", 0.0)) for t in r.train)


def token_ratio(results: list[CellResult], method: str, ref: str, env: str) -> float | None:
    """Mean over seeds of a cell's total generated tokens over its paired ``ref`` cell's (same env, seed)."""
    refs = {r.seed: _total(r) for r in results if r.method == ref and r.env == env}
    ratios = [_total(r) / refs[r.seed] for r in results
              if r.method == method and r.env == env and refs.get(r.seed)]
    return _mean(ratios)


def table2(results: list[CellResult], methods: list[str], envs: list[str],
           budget_refs: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """One row per (method, env): per-step costs, means over seeds of the per-cell means; generated tokens
    against grpo's and, for a budget-matched row, against the row it matches (paired by seed)."""
    budget_refs = budget_refs or {}
    rows = []
    for m in methods:
        for env in envs:
            cells = [r for r in results if r.method == m and r.env == env and r.train]
            if not cells:
                continue

            def over_seeds(*keys: str, scale: float = 1.0) -> float:
                return statistics.fmean(_per_step(r, *keys) for r in cells) * scale

            rows.append({"method": m, "env": env, "n": len(cells),
                         "generated_tokens": over_seeds("cost/rollout_tokens", "cost/branch_tokens"),
                         "rollout_tokens": over_seeds("cost/rollout_tokens"),
                         "branch_tokens": over_seeds("cost/branch_tokens"),
                         "judge_tokens": over_seeds("cost/judge_tokens"),
                         "judge_cents": over_seeds("cost/judge_dollars", scale=100.0),
                         "judge_cached_cents": over_seeds("cost/judge_cached_dollars", scale=100.0),
                         "seconds": over_seeds("time/step"),
                         "vs_grpo": token_ratio(results, m, "grpo", env),
                         "matched_to": budget_refs.get(m),
                         "vs_matched": token_ratio(results, m, budget_refs[m], env) if m in budget_refs else None})
    return rows


def proposal_stats(results: list[CellResult]) -> dict[str, float | None]:
    """Pooled over every train record: valid and accepted proposals, acceptance, weighted length and Delta."""
    recs = [t for r in results for t in r.train]
    valid = sum(float(t.get("credit/valid_proposals", 0.0)) for t in recs)
    accepted = sum(float(t.get("credit/accepted", 0.0)) for t in recs)

    def weighted(key: str) -> float | None:
        w = [(float(t["credit/valid_proposals"]), float(t[key])) for t in recs
             if key in t and t.get("credit/valid_proposals", 0.0) > 0]
        total = sum(n for n, _ in w)
        return sum(n * v for n, v in w) / total if total else None

    return {"valid": valid, "accepted": accepted, "acceptance": accepted / valid if valid else None,
            "segment_turns": weighted("credit/segment_turns"), "delta": weighted("credit/delta")}


def table3(results: list[CellResult], methods: list[str], envs: list[str]) -> list[dict[str, Any]]:
    """One row per method with a judge: success per env and averaged, and pooled proposal diagnostics."""
    rows = []
    for t1 in table1(results, methods, envs):
        mine = [r for r in results if r.method == t1["method"]]
        per_env = {e: proposal_stats([r for r in mine if r.env == e]) for e in envs}
        rows.append({**t1, **proposal_stats(mine), "per_env": per_env})
    return rows


# -- text ------------------------------------------------------------------------------------------

def pct(s: Stat) -> str:
    if s.mean is None:
        return "–"
    return f"{100 * s.mean:.1f}" + (f" ± {100 * s.std:.1f}" if s.std is not None else "")


def _num(v: float | None, fmt: str) -> str:
    return "–" if v is None else format(v, fmt)


def markdown_tables(results: list[CellResult], methods: list[str], judged: list[str], envs: list[str],
                    budget_refs: dict[str, str] | None = None) -> str:
    t1, t2 = table1(results, methods, envs), table2(results, methods, envs, budget_refs)
    t3 = table3(results, judged, envs)
    out = ["## Table 1: final held-out success (%)", "",
           "Mean ± sample std over seeds of `eval/success` after the last step; Avg. averages the envs per "
           "seed first.", "", "| method | " + " | ".join(envs) + " | Avg. |", "|---" * (len(envs) + 2) + "|"]
    out += ["| " + " | ".join([r["method"], *(pct(r[e]) for e in envs), pct(r["avg"])]) + " |" for r in t1]
    out += ["", "## Table 2: cost per step", "",
            "Means over steps, then over seeds. Generated tokens = rollout + branch (continuations); × grpo "
            "and × matched divide a cell's total generated tokens by its paired grpo cell's, or by the cell "
            "its budget is matched to (same env and seed), averaged over seeds. Judge tokens and cents count "
            "the judge or critic; cached ¢ is what its cached replies cost when first paid.", "",
            "| method | env | generated tokens | × grpo | × matched | rollout | branch | judge tokens | judge ¢ "
            "| cached ¢ | seconds |", "|---" * 11 + "|"]
    out += [f"| {r['method']} | {r['env']} | {r['generated_tokens']:.0f} | {_num(r['vs_grpo'], '.3f')} | "
            f"{_matched(r)} | {r['rollout_tokens']:.0f} | {r['branch_tokens']:.0f} | {r['judge_tokens']:.0f} | "
            f"{r['judge_cents']:.2f} | {r['judge_cached_cents']:.2f} | {r['seconds']:.1f} |" for r in t2]
    out += ["", "## Table 3: judges", "",
            "Success (%) as in Table 1; proposal diagnostics pooled over every step, env and seed: "
            "acceptance = accepted / valid proposals (Delta > 0), mean segment length in turns and mean "
            "Delta weighted by valid proposals.", "",
            "| method | " + " | ".join(envs) + " | Avg. | valid | accepted | accept (%) | mean len. "
            "| mean Delta |", "|---" * (len(envs) + 7) + "|"]
    for r in t3:
        accept = None if r["acceptance"] is None else 100 * r["acceptance"]
        cells = [r["method"], *(pct(r[e]) for e in envs), pct(r["avg"]), f"{r['valid']:.0f}",
                 f"{r['accepted']:.0f}", _num(accept, ".1f"), _num(r["segment_turns"], ".2f"),
                 _num(r["delta"], "+.3f")]
        out.append("| " + " | ".join(cells) + " |")
    if not t3:
        out.append("| (no method with a judge finished) |" + " |" * (len(envs) + 6))
    return "\n".join(out) + "\n"


def _matched(r: dict[str, Any]) -> str:
    return "–" if r["vs_matched"] is None else f"{r['vs_matched']:.3f} ({r['matched_to']})"


def write_csvs(results: list[CellResult], methods: list[str], judged: list[str], envs: list[str],
               out: Path, budget_refs: dict[str, str] | None = None) -> list[Path]:
    paths = [out / "table1.csv", out / "table2.csv", out / "table3.csv"]
    with paths[0].open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["method", "env", "success_mean", "success_std", "n_seeds"])
        for r in table1(results, methods, envs):
            for env in [*envs, "avg"]:
                s = r[env]
                w.writerow([r["method"], env, _cell(s.mean), _cell(s.std), s.n])
    keys = ["generated_tokens", "rollout_tokens", "branch_tokens", "judge_tokens", "judge_cents",
            "judge_cached_cents", "seconds"]
    with paths[1].open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["method", "env", *(f"{k}_per_step" for k in keys), "tokens_vs_grpo", "matched_to",
                    "tokens_vs_matched", "n_seeds"])
        for r in table2(results, methods, envs, budget_refs):
            w.writerow([r["method"], r["env"], *(_cell(r[k]) for k in keys), _cell(r["vs_grpo"]),
                        r["matched_to"] or "", _cell(r["vs_matched"]), r["n"]])
    diag = ["valid", "accepted", "acceptance", "segment_turns", "delta"]
    with paths[2].open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["method", "env", "success_mean", "success_std", "n_seeds", *diag])
        for r in table3(results, judged, envs):
            for env in envs:
                s, d = r[env], r["per_env"][env]
                w.writerow([r["method"], env, _cell(s.mean), _cell(s.std), s.n, *(_cell(d[k]) for k in diag)])
            s = r["avg"]
            w.writerow([r["method"], "all", _cell(s.mean), _cell(s.std), s.n, *(_cell(r[k]) for k in diag)])
    return paths


def _cell(v: float | None) -> str:
    return "" if v is None else repr(float(v))
