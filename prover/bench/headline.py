"""The headline comparison (the matrix's ``power.compare`` pair): its paired verdict on results.md, and how
many seeds it needs, planned from pilot cells before the reported seeds run.

- ``t_power``: the power of the two-sided paired t test at level alpha on n pairs whose differences have
  mean ``effect`` and standard deviation ``sd``: P(|T| > t_{1 - alpha/2, n - 1}) with T noncentral t,
  n - 1 degrees of freedom, noncentrality effect sqrt(n) / sd, integrated over T's chi-distributed
  denominator (scipy's ``nct`` gives NaN at large noncentralities). At effect / sd = 0.5 and alpha 0.05 it
  first reaches 80% at n = 34 (0.8078), as G*Power's one-sample table has it.
- ``seeds_for``: the fewest pairs (at least two) whose power reaches the target.
- ``detectable``: the other way round, the smallest difference ``n`` pairs find with that power (the root
  of t_power(effect) = power, which rises with the effect).
- The spread of a seed's difference has two parts: how differently the two trained policies come out
  (training), and the noise of measuring each on E held-out episodes. With both near success p, the
  second is 2 p (1 - p) / E, so the pilot's sample variance s^2 splits as var_train = max(0, s^2 - 2 p (1 -
  p) / E_pilot), and at E episodes the sd is sqrt(var_train + 2 p (1 - p) / E): more episodes shrink only
  the evaluation part.
- ``pilot``: the pilot's paired differences are read from the finished cells of ``power.compare``'s two
  rows on ``power.pilot_seeds``, under the matrix's own settings (the same cell folders and keys a run with
  ``seeds=<pilot seeds>`` trains), paired by seed.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import yaml
from scipy import integrate, optimize
from scipy import stats as scipy_stats

from prover.bench import stats
from prover.bench.matrix import BenchConfig, Plan, plan
from prover.bench.tables import CellResult, collect, final_eval, per_seed

MAX_SEEDS = 1000  # beyond this the answer is "not with this design"
EPISODE_SCALES = (1, 2, 4)  # the evaluation sizes the plan prices: today's, doubled, quadrupled


def t_power(effect: float, sd: float, n: int, alpha: float = 0.05) -> float:
    """Power of the two-sided paired t test on ``n`` pairs (1.0 for a spread of 0)."""
    if sd <= 0:
        return 1.0
    df, nc = n - 1, effect * math.sqrt(n) / sd
    return _t_power_integrated(nc, df, scipy_stats.t.ppf(1 - alpha / 2, df))


def _t_power_integrated(nc: float, df: int, crit: float) -> float:
    """P(|T| > crit) for T = (Z + nc) / (X / sqrt(df)), X ~ chi(df): given X, two normal tails, integrated
    over X; exact where scipy's ``nct`` returns NaN (large noncentralities, where the power is near 1)."""
    def given(x: float) -> float:
        s = crit * x / math.sqrt(df)
        return float(scipy_stats.norm.sf(s - nc) + scipy_stats.norm.cdf(-s - nc)) * scipy_stats.chi.pdf(x, df)
    # over X's bulk (all but 1e-15 of each tail): on [0, inf) quadrature can miss a narrow peak at many df
    lo, hi = scipy_stats.chi.ppf(1e-15, df), scipy_stats.chi.isf(1e-15, df)
    return float(min(1.0, integrate.quad(given, lo, hi, epsabs=1e-12, epsrel=1e-10, limit=200)[0]))


def seeds_for(effect: float, sd: float, power: float = 0.8, alpha: float = 0.05) -> int | None:
    """The fewest pairs (>= 2) whose test reaches ``power``; None past ``MAX_SEEDS``."""
    if t_power(effect, sd, MAX_SEEDS, alpha) < power:
        return None
    lo, hi = 1, MAX_SEEDS  # power rises with n: bisect for the first n that reaches it
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if t_power(effect, sd, mid, alpha) >= power else (mid, hi)
    return hi


def detectable(sd: float, n: int, power: float = 0.8, alpha: float = 0.05) -> float:
    """The smallest mean difference that ``n`` pairs with differences of spread ``sd`` detect with ``power``."""
    if sd <= 0:
        return 0.0
    hi = sd
    while t_power(hi, sd, n, alpha) < power:  # power tends to 1 as the effect grows, for any n >= 2
        hi *= 2
    return float(optimize.brentq(lambda e: t_power(e, sd, n, alpha) - power, 0.0, hi, xtol=1e-12 * sd))


def eval_variance(success: float, episodes: float) -> float:
    """Variance that two independent evaluations of ``episodes`` episodes add to a paired difference."""
    return 2.0 * success * (1.0 - success) / episodes


@dataclass(frozen=True)
class PowerPlan:
    pairs: int  # pilot pairs
    sd: float  # sample sd of the pilot's paired differences
    eval_sd: float  # the part of it the evaluation accounts for, sqrt(2 p (1 - p) / E)
    success: float  # p: mean final success of the two rows over the pilot
    episodes: int  # E of the pilot's evaluations
    options: list[tuple[int, float, int | None]]  # (episodes, sd at them, seeds needed)


def power_plan(diffs: list[float], success: float, episodes: int, effect: float, power: float = 0.8,
               alpha: float = 0.05) -> PowerPlan | None:
    """The seeds ``effect`` needs at ``power``, at today's evaluation size and larger ones; None below two pairs."""
    if len(diffs) < 2:
        return None
    sd = statistics.stdev(diffs)
    train_var = max(0.0, sd ** 2 - eval_variance(success, episodes))
    options = []
    for scale in EPISODE_SCALES:
        e = episodes * scale
        sd_e = math.sqrt(train_var + eval_variance(success, e))
        options.append((e, sd_e, seeds_for(effect, sd_e, power, alpha)))
    return PowerPlan(len(diffs), sd, math.sqrt(eval_variance(success, episodes)), success, episodes, options)


def pilot_plan(bench: BenchConfig) -> Plan:
    """The matrix's cells on its ``power.pilot_seeds``: the folders and keys a run with ``seeds=<pilot seeds>``
    trains (the matrix must have a power section)."""
    return plan(bench.model_copy(update={"seeds": list(bench.power.pilot_seeds)}))


def pilot(p: Plan) -> PowerPlan | None:
    """The power plan from the finished pilot cells of the matrix's ``power`` section; None without one or
    with fewer than two finished pairs."""
    spec = p.bench.power
    if spec is None:
        return None
    cells = pilot_plan(p.bench)
    results, _ = collect(cells)
    method, ref = spec.compare
    envs = p.bench.envs
    mine, theirs = (per_seed(results, row, envs, lambda r: r.success) for row in (method, ref))
    seeds = sorted(set(mine) & set(theirs))
    if len(seeds) < 2:
        return None
    configured = min(c.config.eval.episodes for c in cells.cells if c.method.row in spec.compare)
    logged = [int(final_eval(r.history, r.steps).get("eval/episodes") or configured) for r in results
              if r.method in spec.compare and r.seed in seeds]  # what the evaluations measured
    episodes = min(logged)
    success = statistics.fmean([*(mine[s] for s in seeds), *(theirs[s] for s in seeds)])
    return power_plan([mine[s] - theirs[s] for s in seeds], success, episodes, spec.effect, spec.power,
                      spec.alpha)


def power_lines(p: Plan) -> list[str]:
    """What the pilot says the headline comparison needs, and what this matrix gives it."""
    spec = p.bench.power
    if spec is None:
        return []
    method, ref = spec.compare
    what = f"{method} − {ref}, {100 * spec.effect:g} points at {100 * spec.power:g}% power (α = {spec.alpha:g})"
    plan_ = pilot(p)
    if plan_ is None:
        seeds = ",".join(str(s) for s in spec.pilot_seeds)
        return [f"power ({what}): no pilot yet; train it first: prover bench ... 'seeds=[{seeds}]' "
                f"'methods=[{_specs(p, (ref, method))}]' baseline={ref} (or every row)"]
    have = len(p.bench.seeds)
    needs = "; ".join(f"{e} episodes: sd {100 * sd:.2f} points, {'over ' + str(MAX_SEEDS) if n is None else n} seeds"
                      for e, sd, n in plan_.options)
    overlap = " (the pilot seeds overlap this matrix's: the plan is not independent of its results)" \
        if set(spec.pilot_seeds) & set(p.bench.seeds) else ""
    finds = 100 * detectable(plan_.options[0][1], have, spec.power, spec.alpha) if have >= 2 else None
    reach = "" if finds is None else (f", which find a difference of {finds:.1f} points or more "
                                      f"{100 * spec.power:g}% of the time at {plan_.episodes} episodes")
    return [f"power ({what}): from {plan_.pairs} pilot pairs, the sd of the difference is {100 * plan_.sd:.2f} "
            f"points ({100 * plan_.eval_sd:.2f} of it from {plan_.episodes}-episode evaluations at p = "
            f"{100 * plan_.success:.0f}%); needed: {needs}; this matrix has {have} seeds{reach}{overlap}"]


def _specs(p: Plan, rows: tuple[str, ...]) -> str:
    """The matrix's own specs of ``rows``, as a ``methods=`` override that keeps their cells' settings."""
    specs = [m.model_dump(exclude_defaults=True) for m in p.bench.methods if m.row in rows]
    return ", ".join(s["name"] if list(s) == ["name"] else yaml.safe_dump(s, default_flow_style=True).strip()
                     for s in specs)


def _points(v: float | None, fmt: str = "+.1f") -> str:
    return "–" if v is None else format(100 * v, fmt)


def headline_markdown(p: Plan, results: list[CellResult]) -> list[str]:
    """results.md's first section: the headline pair's final-success difference over the reported seeds,
    read three ways, and the power plan it was sized by."""
    spec = p.bench.power
    if spec is None:
        return []
    method, ref = spec.compare
    envs = p.bench.envs
    d = stats.paired(*(per_seed(results, row, envs, lambda r: r.success) for row in (method, ref)))
    p_text = "–" if d.p_value is None else f"{d.p_value:.4f}"
    win = "–" if d.improvement is None else f"{d.improvement:.2f}"
    where = "envs averaged per seed" if len(envs) > 1 else envs[0]
    out = [f"## Headline: {method} vs {ref}", "",
           f"Final held-out success, {method} minus {ref} on the same seed ({where}), {d.pairs} paired seeds:", "",
           "| Δ (points) | 95% t interval | 95% bootstrap CI | sign-flip p | P(improvement) | verdict |",
           "|---|---|---|---|---|---|",
           f"| {_points(d.diff.mean)} | [{_points(d.t.lo)}, {_points(d.t.hi)}] | [{_points(d.diff.lo)}, "
           f"{_points(d.diff.hi)}] | {p_text} | {win} | {d.verdict} |", "",
           "The verdict reads the t interval (better: above 0; worse: below 0). The sign-flip p-value is exact "
           f"up to {stats.EXACT_FLIPS} pairs; its floor is 2 / 2^n. P(improvement) is the share of seeds where "
           f"{method} came out ahead (a tie counts half).", ""]
    return [*out, *(f"- {line}" for line in power_lines(p)), ""]
