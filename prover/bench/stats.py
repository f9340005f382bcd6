"""Statistics over seeds that can tell two methods apart, and the precision of one evaluation.

- ``bootstrap``: the mean of per-seed values with a 95% percentile bootstrap CI. Up to ``EXACT_MAX``
  values the bootstrap distribution is exact: every multiset of n draws from the n values, weighted by
  its multinomial count n! / prod(c_i!) out of n^n (the same distribution as enumerating all n^n ordered
  resamples, in C(2n-1, n) terms). Above it, ``RESAMPLES`` Monte-Carlo resamples from a generator seeded
  with ``MC_SEED``, so a table is the same every time it is written. The interval's ends, on that
  distribution of resample means M: lo = the smallest m with P(M <= m) >= 2.5%, hi = the largest m with
  P(M >= m) >= 2.5% (compared in exact fractions on the exact path).
- ``paired``: per seed, method minus baseline on the same seed (seeds missing from either side are left
  out), with three readings of the differences d_1..d_n (scipy does the work of the last two):
  the bootstrap CI above; the paired t interval mean(d) +- t_{0.975, n-1} sd(d) / sqrt(n); and the two-sided
  sign-flip permutation p-value, P(|mean of the d_i with random signs| >= |mean(d)|), exact (all 2^n sign
  patterns) up to ``EXACT_FLIPS`` pairs, else ``RESAMPLES`` seeded draws. Note the floor of that p-value:
  2 / 2^n, 0.0625 at 5 pairs, so 5 seeds can never reach p < 0.05. The verdict reads the t interval
  ("better" when it lies above 0, "worse" below 0, else "inconclusive"): the percentile bootstrap covers
  well under 95% at 5-10 values, the t interval keeps its level when the differences are roughly normal.
- ``improvement``: the probability of improvement over paired seeds, P(d > 0) + P(d = 0) / 2.
- ``auc``: area under the held-out curve (every eval record, steps 0..N, trapezoid) divided by N: the
  mean held-out success over training.
- ``first_reach`` / ``median_reach``: the first evaluated step with success >= a level, per seed; the
  median over seeds counts a seed that never reached it as infinitely late.
- ``eval_se``: the binomial standard error sqrt(p(1-p)/n) of one evaluation of n episodes.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations_with_replacement

import numpy as np
from scipy import stats as scipy_stats

EXACT_MAX = 8  # C(15, 8) = 6435 multisets at n = 8; n = 9 would already be 24310
RESAMPLES = 10_000
MC_SEED = 0
EXACT_FLIPS = 16  # 2^16 = 65,536 sign patterns, a fraction of a second
LEVEL = Fraction(19, 20)  # 95%
SE_TARGET = 0.03  # an evaluation's worst-case SE above 3 points is warned about before any work
RECOMMENDED_SEEDS = 5
REACH_TOLERANCE = 1e-9  # 24 / 48 must count as reaching 0.5 whatever the float rounding


@dataclass(frozen=True)
class Interval:
    """Mean of ``n`` values and its bootstrap CI (None below two values)."""

    mean: float | None
    lo: float | None
    hi: float | None
    n: int
    method: str  # "exact", "monte-carlo", or "" without a CI


NONE = Interval(None, None, None, 0, "")


def resample_means(values: list[float]) -> tuple[list[float], list[int], int, str]:
    """The bootstrap distribution of the mean: resample means, their weights, the total weight, and how."""
    n = len(values)
    if n <= EXACT_MAX:
        means, weights, fact = [], [], math.factorial(n)
        for combo in combinations_with_replacement(range(n), n):
            counts = Counter(combo).values()
            weights.append(fact // math.prod(math.factorial(c) for c in counts))  # orderings of this multiset
            means.append(math.fsum(values[i] for i in combo) / n)
        return means, weights, n ** n, "exact"  # the weights sum to n^n (multinomial theorem)
    rng = np.random.default_rng(MC_SEED)
    draws = np.asarray(values, dtype=float)[rng.integers(0, n, size=(RESAMPLES, n))]
    return draws.mean(axis=1).tolist(), [1] * RESAMPLES, RESAMPLES, "monte-carlo"


def percentile_interval(means: list[float], weights: list[int], total: int,
                        level: Fraction = LEVEL) -> tuple[float, float]:
    """lo: the smallest m with P(M <= m) >= tail; hi: the largest m with P(M >= m) >= tail, tail = (1 -
    level) / 2. Both ends read the same way, so a symmetric distribution gives a symmetric interval."""
    need = (1 - Fraction(level)) / 2 * total
    order = sorted(range(len(means)), key=means.__getitem__)
    ends = []
    for walk in (order, order[::-1]):
        seen = 0
        for i in walk:
            seen += weights[i]
            if seen >= need:
                ends.append(means[i])
                break
    return ends[0], ends[1]


def bootstrap(values: list[float], level: Fraction = LEVEL) -> Interval:
    """Mean and percentile bootstrap CI of ``values``; no CI for fewer than two."""
    values = [float(v) for v in values]
    if not values:
        return NONE
    if len(values) < 2:
        return Interval(values[0], None, None, 1, "")
    means, weights, total, how = resample_means(values)
    lo, hi = percentile_interval(means, weights, total, level)
    return Interval(statistics.fmean(values), lo, hi, len(values), how)


def t_interval(values: list[float], level: Fraction = LEVEL) -> Interval:
    """Mean and t interval mean +- t_{(1 + level) / 2, n - 1} sd / sqrt(n); no interval below two values,
    the mean itself when every value is the same (sd 0)."""
    values = [float(v) for v in values]
    if len(values) < 2:
        return bootstrap(values)  # the mean alone, or nothing
    mean = statistics.fmean(values)
    if len(set(values)) == 1:  # scipy answers nan for a zero spread
        return Interval(mean, mean, mean, len(values), "t")
    ci = scipy_stats.ttest_1samp(values, 0.0).confidence_interval(float(level))
    return Interval(mean, float(ci.low), float(ci.high), len(values), "t")


def sign_flip_p(diffs: list[float]) -> float | None:
    """Two-sided permutation p-value of mean(diffs) = 0 by flipping signs (None below two pairs)."""
    if len(diffs) < 2:
        return None
    if not any(diffs):
        return 1.0
    exact = len(diffs) <= EXACT_FLIPS
    res = scipy_stats.permutation_test((np.asarray(diffs, dtype=float),), np.mean, vectorized=True,
                                       permutation_type="samples", n_resamples=np.inf if exact else RESAMPLES,
                                       rng=None if exact else np.random.default_rng(MC_SEED))
    return float(res.pvalue)


def improvement(diffs: list[float]) -> float | None:
    """The probability of improvement over paired seeds: the share with d > 0, a tie counting half."""
    if not diffs:
        return None
    return (sum(d > 0 for d in diffs) + 0.5 * sum(d == 0 for d in diffs)) / len(diffs)


@dataclass(frozen=True)
class Paired:
    """Method minus baseline over the seeds both have: bootstrap CI, t interval (the verdict's), sign-flip
    p-value and probability of improvement."""

    diff: Interval  # mean and bootstrap CI
    verdict: str  # "better", "worse" or "inconclusive", from the t interval
    t: Interval = NONE
    p_value: float | None = None
    improvement: float | None = None

    @property
    def pairs(self) -> int:
        return self.diff.n


def verdict(ci: Interval) -> str:
    if ci.lo is not None and ci.lo > 0:
        return "better"
    if ci.hi is not None and ci.hi < 0:
        return "worse"
    return "inconclusive"


def paired(method: dict[int, float], base: dict[int, float]) -> Paired:
    """Per seed (keys), method minus base; seeds missing from either side are left out."""
    seeds = sorted(set(method) & set(base))
    diffs = [method[s] - base[s] for s in seeds]
    t = t_interval(diffs)
    return Paired(bootstrap(diffs), verdict(t), t, sign_flip_p(diffs), improvement(diffs))


def auc(curve: dict[int, float], steps: int) -> float | None:
    """Trapezoid area under {step: eval/success} over steps 0..``steps``, divided by ``steps`` (the mean
    success over training); the step-0 value when ``steps`` is 0; None without both end points."""
    if 0 not in curve or steps not in curve:
        return None
    if steps == 0:
        return float(curve[0])
    pts = sorted((s, float(v)) for s, v in curve.items() if 0 <= s <= steps)
    area = sum((s1 - s0) * (v0 + v1) / 2 for (s0, v0), (s1, v1) in itertools.pairwise(pts))
    return area / steps


def first_reach(curve: dict[int, float], level: float) -> int | None:
    """The first evaluated step whose success is at least ``level`` (step 0 counts), or None."""
    return next((s for s in sorted(curve) if curve[s] >= level - REACH_TOLERANCE), None)


@dataclass(frozen=True)
class Reach:
    median: float | None  # None: not reached by the median seed
    reached: int
    n: int


def median_reach(steps: list[int | None]) -> Reach:
    """Median over seeds of the first step reaching the level, a seed that never did counting as
    infinitely late (so the median is "not reached" when half the seeds or more never got there, the
    upper of the two middle seeds included)."""
    if not steps:
        return Reach(None, 0, 0)
    med = statistics.median(math.inf if s is None else float(s) for s in steps)
    return Reach(None if math.isinf(med) else med, sum(s is not None for s in steps), len(steps))


def eval_se(success: float, episodes: float) -> float:
    """Binomial SE of a success rate measured on ``episodes`` episodes."""
    return math.sqrt(success * (1.0 - success) / episodes)


def episodes_for_se(target: float = SE_TARGET) -> int:
    """Episodes that keep the worst-case SE (p = 0.5) at or below ``target``: ceil(0.25 / target^2)."""
    return math.ceil(0.25 / target ** 2)


def se_warning(episodes: int, where: str = "") -> str | None:
    """One line when ``episodes`` leave a worst-case SE above ``SE_TARGET``, else None."""
    worst = eval_se(0.5, episodes)
    if worst <= SE_TARGET:
        return None
    return (f"eval.episodes={episodes}{where} measures each held-out success with a standard error of up to "
            f"{100 * worst:.1f} points (p = 0.5); eval.episodes={episodes_for_se()} or more keeps it under "
            f"{100 * SE_TARGET:.0f} points")


def seeds_warning(n: int) -> str | None:
    if n >= RECOMMENDED_SEEDS:
        return None
    return (f"{n} seed(s): a bootstrap CI over fewer than {RECOMMENDED_SEEDS} seeds is too narrow to tell "
            f"methods apart (use seeds=[0,1,2,3,4] or more)")
