"""Tables 1-3 as Markdown (for results.md, each column explained in one line) and as CSV files."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from prover.bench import stats
from prover.bench.tables import CellResult, Entry, table1, table2, table3
from prover.system.files import write_atomic

# -- cells of text ---------------------------------------------------------------------------------


def _num(v: float | None, fmt: str) -> str:
    return "–" if v is None else format(v, fmt)


def pct_ci(iv: stats.Interval, sign: str = "") -> str:
    """Percent, with its CI when there is one: 38.5 [25.0, 52.1]; ``sign="+"`` for a difference: +2.1 [-4.7, +8.9]."""
    if iv.mean is None:
        return "–"
    text = format(100 * iv.mean, f"{sign}.1f")
    return text if iv.lo is None else f"{text} [{100 * iv.lo:{sign}.1f}, {100 * iv.hi:{sign}.1f}]"


def diff_ci(p: stats.Paired | None, baseline_row: bool) -> str:
    """A paired difference in points with its t interval (the verdict's): +9.4 [-1.0, +20.0]."""
    if p is None or p.diff.mean is None:
        return "baseline" if baseline_row else "–"
    text = f"{100 * p.diff.mean:+.1f}"
    return text if p.t.lo is None else f"{text} [{100 * p.t.lo:+.1f}, {100 * p.t.hi:+.1f}]"


def paired_extras(p: stats.Paired | None) -> list[str]:
    """The bootstrap CI, sign-flip p-value and probability of improvement of a paired difference."""
    if p is None or p.diff.lo is None:
        return ["–", "–", "–"]
    return [f"[{100 * p.diff.lo:+.1f}, {100 * p.diff.hi:+.1f}]", f"{p.p_value:.3f}", f"{p.improvement:.2f}"]


def _verdict(p: stats.Paired | None) -> str:
    return "–" if p is None or p.pairs == 0 else f"{p.verdict} ({p.pairs})"


def reach_text(r: stats.Reach | None) -> str:
    if r is None or r.n == 0:
        return "–"
    return f"{'not reached' if r.median is None else format(r.median, 'g')} ({r.reached}/{r.n})"


def _truth(d: dict[str, Any], key: str, scale: float = 100.0, fmt: str = ".1f") -> str:
    """'–' where the env logs no ground truth, 'n/a' where the ratio's denominator is 0."""
    if not d["truth"]:
        return "–"
    return "n/a" if d[key] is None else format(scale * d[key], fmt)


# -- Markdown ----------------------------------------------------------------------------------------

T1_COLUMNS = [
    "**success**: final `eval/success` (%), mean over seeds [95% bootstrap CI over seeds].",
    "**Δ vs {b}**: per seed, this method minus {b} on the same env and seed, in points: mean [95% paired t "
    "interval].",
    "**boot. CI / p / P(better)**: the same differences' 95% percentile bootstrap CI, two-sided sign-flip "
    "permutation p-value (exact up to 16 pairs; never below 2 / 2^pairs), and the share of seeds where this "
    "method came out ahead (a tie counts half).",
    "**verdict (pairs)**: better when the t interval of Δ lies above 0, worse when below, else inconclusive; "
    "pairs = seeds both rows finished (a seed missing from either side is left out).",
    "**AUC**: area under the held-out curve (every evaluation, steps 0..N, trapezoid) divided by N, i.e. the mean "
    "held-out success over training (%) [95% CI].",
    "**Δ AUC**: the paired difference of AUC against {b}, in points [95% t interval], with its verdict.",
    "**steps to {r}**: median over seeds of the first evaluated step with success ≥ {r} (a seed that never got there "
    "counts as infinitely late), and how many seeds got there; evaluations every eval.every steps bound it.",
    "**max SE**: the largest binomial SE sqrt(p(1-p)/n) of the method's final evaluations (points; n = eval/episodes).",
    "**tokens × {b}**: generated policy tokens per step (rollout + branch, as Table 2) over {b}'s: 1.00 is an "
    "equal budget.",
]


def _ci_note(t1: list[dict[str, Any]], envs: list[str]) -> list[str]:
    seeds = [r[e].success.n for r in t1 for e in envs if r[e].success.n]
    lines = [f"CIs of a mean: percentile bootstrap over seeds, exact up to {stats.EXACT_MAX} seeds (every resample, "
             f"weighted by its multinomial count), else {stats.RESAMPLES:,} Monte-Carlo resamples (seed "
             f"{stats.MC_SEED}). Paired differences add the t interval, which the verdicts read: the percentile "
             "bootstrap covers well under 95% at 5-10 seeds."]
    if seeds and min(seeds) < stats.RECOMMENDED_SEEDS:
        lines.append(f"Some rows have fewer than {stats.RECOMMENDED_SEEDS} seeds: a bootstrap CI over so few values "
                     "spans little more than the values themselves and is too narrow; read verdicts as indicative.")
    return lines


def _detail(rows: list[tuple[str, Entry]], baseline: str | None, reach: float | None, per_env: bool) -> list[str]:
    b = baseline or "baseline"
    head = ["method", "success (%)", f"Δ vs {b} (points)", "boot. CI", "p", "P(better)", "verdict (pairs)",
            "AUC (%)", "Δ AUC (points)"]
    if per_env:
        head += ([f"steps to {reach:g}"] if reach is not None else []) + ["max SE", f"tokens × {b}"]
    out = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for m, e in rows:
        auc_d = diff_ci(e.auc_diff, m == baseline)
        if e.auc_diff is not None and e.auc_diff.pairs:
            auc_d += f" {e.auc_diff.verdict}"
        cells = [m, pct_ci(e.success), diff_ci(e.diff, m == baseline), *paired_extras(e.diff), _verdict(e.diff),
                 pct_ci(e.auc), auc_d]
        if per_env:
            cells += ([reach_text(e.reach)] if reach is not None else []) + [
                _num(None if e.max_se is None else 100 * e.max_se, ".1f"), _num(e.tokens_vs_baseline, ".2f")]
        out.append("| " + " | ".join(cells) + " |")
    return out


def table1_markdown(results: list[CellResult], methods: list[str], envs: list[str], baseline: str | None,
                    reach: float | None) -> list[str]:
    t1 = table1(results, methods, envs, baseline, reach)
    out = ["## Table 1: final held-out success (%)", "",
           "`eval/success` after the last step: mean over seeds [95% bootstrap CI]; Avg. averages the envs per "
           "seed first (seeds with every env finished).", "", *_ci_note(t1, envs), "",
           "| method | " + " | ".join(envs) + " | Avg. |", "|---" * (len(envs) + 2) + "|"]
    out += ["| " + " | ".join([r["method"], *(pct_ci(r[e].success) for e in envs), pct_ci(r["avg"].success)]) + " |"
            for r in t1]
    ses = [f"{e} {100 * s:.1f}" for e in envs if (s := max((r[e].max_se or 0.0 for r in t1), default=0.0))]
    out += ["", "Largest evaluation SE of any cell, sqrt(p(1-p)/n) of its final evaluation, in points: "
            f"{', '.join(ses) or '–'}.", ""]
    if baseline is None or not any(r.method == baseline for r in results):
        out += [f"No finished {baseline or 'baseline'!r} row: no paired differences.", ""]
    out += [f"### Table 1 by env: against {baseline}, sample efficiency, budget", ""]
    out += [f"- {c.format(b=baseline, r='–' if reach is None else format(reach, 'g'))}"
            for c in T1_COLUMNS if reach is not None or "steps to" not in c]
    for env in envs:
        out += ["", f"#### {env}", "", *_detail([(r["method"], r[env]) for r in t1], baseline, reach, True)]
    out += ["", "#### Avg. over envs (per seed)", "", *_detail([(r["method"], r["avg"]) for r in t1],
                                                               baseline, reach, False), ""]
    return out


def table2_markdown(results: list[CellResult], methods: list[str], envs: list[str],
                    budget_refs: dict[str, str] | None, baseline: str) -> list[str]:
    out = ["## Table 2: cost per step", "",
           f"Means over steps, then over seeds. Generated tokens = rollout + branch (continuations); × {baseline} "
           f"and × matched divide a cell's total generated tokens by its paired {baseline} cell's, or by the cell "
           "its budget is matched to (same env and seed), averaged over seeds. Judge tokens and cents count "
           "the judge or critic; cached ¢ is what its cached replies cost when first paid.", "",
           f"| method | env | generated tokens | × {baseline} | × matched | rollout | branch | judge tokens "
           "| judge ¢ | cached ¢ | seconds |", "|---" * 11 + "|"]
    out += [f"| {r['method']} | {r['env']} | {r['generated_tokens']:.0f} | {_num(r['vs_baseline'], '.3f')} | "
            f"{_matched(r)} | {r['rollout_tokens']:.0f} | {r['branch_tokens']:.0f} | {r['judge_tokens']:.0f} | "
            f"{r['judge_cents']:.2f} | {r['judge_cached_cents']:.2f} | {r['seconds']:.1f} |"
            for r in table2(results, methods, envs, budget_refs, baseline)]
    return out


T3_COLUMNS = [
    "**success**: final held-out success (%) [95% CI] as in Table 1 (all: envs averaged per seed).",
    "**eligible / step**: groups per train step whose win count made them eligible for the judge "
    "(`credit/eligible_groups`), pooled over steps and seeds.",
    "**valid rate**: proposals that passed the segment rules per judged group (`credit/valid_proposals` / "
    "`credit/judged_groups`); – where a method logs no groups.",
    "**valid / accepted / accept**: verified proposals, those with Delta > 0, and their share, pooled over every "
    "train step and seed.",
    "**mean len. / mean Delta**: segment length in turns and Delta, weighted by each step's valid proposals.",
    "**judged**: proposals scored against the env's pivotal turns (`truth/proposals`); – where the env knows none.",
    "**hit rate**: share of them whose segment contains a pivotal turn (hits / proposals).",
    "**pivotal share**: share of the judged trajectories' turns that are pivotal, weighted by proposals: what a "
    "random one-turn segment would hit.",
    "**precision**: accepted segments that contain a pivotal turn / accepted; **recall**: the same / hits "
    "(n/a: a denominator of 0).",
]


def table3_markdown(results: list[CellResult], judged: list[str], envs: list[str]) -> list[str]:
    head = ["method", "env", "success (%)", "eligible / step", "valid rate (%)", "valid", "accepted", "accept (%)",
            "mean len.", "mean Delta", "judged", "hit rate (%)", "pivotal share (%)", "precision (%)", "recall (%)"]
    out = ["## Table 3: judges", "", "Per env, and pooled over all envs:", "", *(f"- {c}" for c in T3_COLUMNS), "",
           "| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for r in table3(results, judged, envs):
        accept = None if r["acceptance"] is None else 100 * r["acceptance"]
        rate = None if r["valid_rate"] is None else 100 * r["valid_rate"]
        cells = [r["method"], r["env"], pct_ci(r["success"]), _num(r["eligible_per_step"], ".2f"),
                 _num(rate, ".1f"), f"{r['valid']:.0f}", f"{r['accepted']:.0f}",
                 _num(accept, ".1f"), _num(r["segment_turns"], ".2f"), _num(r["delta"], "+.3f"),
                 _truth(r, "proposals", 1.0, ".0f"), _truth(r, "hit_rate"), _truth(r, "pivotal_share"),
                 _truth(r, "precision"), _truth(r, "recall")]
        out.append("| " + " | ".join(cells) + " |")
    if not judged:
        out.append("| (no method with a judge finished) |" + " |" * (len(head) - 1))
    return out


def markdown_tables(results: list[CellResult], methods: list[str], judged: list[str], envs: list[str],
                    budget_refs: dict[str, str] | None = None, baseline: str = "grpo",
                    reach: float | None = None) -> str:
    out = [*table1_markdown(results, methods, envs, baseline, reach),
           *table2_markdown(results, methods, envs, budget_refs, baseline), "",
           *table3_markdown(results, judged, envs)]
    return "\n".join(out) + "\n"


def _matched(r: dict[str, Any]) -> str:
    return "–" if r["vs_matched"] is None else f"{r['vs_matched']:.3f} ({r['matched_to']})"


# -- CSV ---------------------------------------------------------------------------------------------

T1_CSV = ["method", "env", "n_seeds", "success_mean", "success_std", "success_lo", "success_hi", "ci",
          "baseline", "diff_mean", "diff_lo", "diff_hi", "n_pairs", "verdict", "auc_mean", "auc_lo", "auc_hi",
          "auc_diff_mean", "auc_diff_lo", "auc_diff_hi", "auc_verdict", "reach", "reach_median_step",
          "reached_seeds", "max_eval_se", "tokens_vs_baseline", "diff_t_lo", "diff_t_hi", "diff_p_value",
          "diff_improvement"]


def _paired_cells(p: stats.Paired | None) -> list[str]:
    if p is None:
        return ["", "", "", ""]
    return [_cell(p.diff.mean), _cell(p.diff.lo), _cell(p.diff.hi), p.verdict if p.pairs else ""]


def _t1_row(m: str, env: str, e: Entry, baseline: str | None, reach: float | None) -> list[object]:
    s = e.success
    diff, auc_diff = _paired_cells(e.diff), _paired_cells(e.auc_diff)
    r = e.reach
    return [m, env, s.n, _cell(s.mean), _cell(e.std), _cell(s.lo), _cell(s.hi), s.method, baseline or "",
            *diff[:3], e.diff.pairs if e.diff else "", diff[3], _cell(e.auc.mean), _cell(e.auc.lo),
            _cell(e.auc.hi), *auc_diff, "" if r is None else reach, "" if r is None else _cell(r.median),
            "" if r is None else r.reached, _cell(e.max_se), _cell(e.tokens_vs_baseline),
            *(["", "", "", ""] if e.diff is None else [_cell(e.diff.t.lo), _cell(e.diff.t.hi), _cell(e.diff.p_value),
                                                       _cell(e.diff.improvement)])]


def _write_csv(path: Path, header: list[str], rows: list[list[object]]) -> None:
    """Written whole or not at all: two bench processes on one folder may write the tables at once."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(header)
    w.writerows(rows)
    write_atomic(path, buf.getvalue())


def write_csvs(results: list[CellResult], methods: list[str], judged: list[str], envs: list[str],
               out: Path, budget_refs: dict[str, str] | None = None, baseline: str = "grpo",
               reach: float | None = None) -> list[Path]:
    paths = [out / "table1.csv", out / "table2.csv", out / "table3.csv"]
    _write_csv(paths[0], T1_CSV, [_t1_row(r["method"], env, r[env], baseline, reach)
                                  for r in table1(results, methods, envs, baseline, reach) for env in [*envs, "avg"]])
    keys = ["generated_tokens", "rollout_tokens", "branch_tokens", "judge_tokens", "judge_cents",
            "judge_cached_cents", "seconds"]
    _write_csv(paths[1], ["method", "env", *(f"{k}_per_step" for k in keys), "baseline", "tokens_vs_baseline",
                          "matched_to", "tokens_vs_matched", "n_seeds"],
               [[r["method"], r["env"], *(_cell(r[k]) for k in keys), baseline, _cell(r["vs_baseline"]),
                 r["matched_to"] or "", _cell(r["vs_matched"]), r["n"]]
                for r in table2(results, methods, envs, budget_refs, baseline)])
    diag = ["eligible_per_step", "valid_rate", "valid", "accepted", "acceptance", "segment_turns", "delta"]
    truth = ["proposals", "hit_rate", "precision", "recall", "pivotal_share"]
    _write_csv(paths[2], ["method", "env", "success_mean", "success_lo", "success_hi", "n_seeds", *diag, "truth",
                          *(f"truth_{k}" for k in truth)],
               [[r["method"], r["env"], _cell(r["success"].mean), _cell(r["success"].lo), _cell(r["success"].hi),
                 r["success"].n, *(_cell(r[k]) for k in diag), int(r["truth"]), *(_cell(r[k]) for k in truth)]
                for r in table3(results, judged, envs)])
    return paths


def _cell(v: float | None) -> str:
    return "" if v is None else repr(float(v))
