"""The bench's paired statistics beyond the bootstrap (t interval, sign-flip p-value, probability of improvement)
and the power plan of the headline comparison, on hand-written metrics files. Every expected number is worked out
by hand in the comments or taken from a published table (G*Power 3.1's one-sample t test)."""

from __future__ import annotations

import json
import math
import shlex
import shutil
from pathlib import Path

import pytest
from scipy import stats as scipy_stats

from prover.bench import headline, stats
from prover.bench.archive import restore_pilot
from prover.bench.matrix import BenchConfig, Plan, load_bench_config, plan
from prover.bench.runner import write_reports
from prover.errors import ConfigError

ENV = "alfworld-sim"
POWER = {"compare": ["gigpo", "grpo"], "effect": 0.02, "pilot_seeds": [100, 101, 102, 103]}


def _plan(tmp_path: Path, seeds: list[int], power: dict | None = POWER) -> Plan:
    return plan(BenchConfig(dir=str(tmp_path / "bench"), out=str(tmp_path / "out"), envs=[ENV], seeds=seeds,
                            steps=4, methods=["grpo", "gigpo"], power=power))


def _write_cell(p: Plan, method: str, seed: int, final: float) -> None:
    cell = next(c for c in p.cells if (c.method.row, c.seed) == (method, seed))
    cell.dir.mkdir(parents=True, exist_ok=True)
    (cell.dir / "cell.json").write_text(json.dumps({"key": cell.key}) + "\n")
    recs = [{"step": 0, "phase": "eval", "eval/success": 0.25, "eval/episodes": 1000.0},
            {"step": 4, "phase": "eval", "eval/success": final, "eval/episodes": 1000.0}]
    (cell.dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


# -- the paired readings ---------------------------------------------------------------------------------

def test_t_interval_by_hand():
    # 0.1, 0.2, 0.3: mean 0.2, sd 0.1, SE 0.1 / sqrt(3) = 0.057735, t_{0.975, 2} = 4.302653 -> +- 0.248414
    ci = stats.t_interval([0.1, 0.2, 0.3])
    assert (ci.mean, ci.lo, ci.hi) == pytest.approx((0.2, -0.048414, 0.448414), abs=1e-6)
    assert (ci.n, ci.method) == (3, "t")
    assert stats.t_interval([0.25, 0.25, 0.25]) == stats.Interval(0.25, 0.25, 0.25, 3, "t")  # no spread
    assert stats.t_interval([0.4]) == stats.Interval(0.4, None, None, 1, "")


def test_sign_flip_p_value_enumerates_the_sign_patterns():
    # 1, 2, 3: of the 8 sign patterns only (+,+,+) and (-,-,-) reach |sum| >= 6 -> 2/8
    assert stats.sign_flip_p([1.0, 2.0, 3.0]) == pytest.approx(0.25)
    # 1, -2, 3, 4: sum 6. A pattern's sum is 10 - 2k, k the sum of the flipped values; |10 - 2k| >= 6 for k <= 2
    # ({}, {1}, {2}) or k >= 8 ({1,3,4}, {2,3,4}, {1,2,3,4}) -> 6/16
    assert stats.sign_flip_p([1.0, -2.0, 3.0, 4.0]) == pytest.approx(0.375)
    # the floor 2 / 2^n: 5 seeds that all agree still give only 0.0625; 10 give 2/1024
    assert stats.sign_flip_p([0.01, 0.02, 0.03, 0.04, 0.05]) == pytest.approx(0.0625)
    assert stats.sign_flip_p([0.01 * k for k in range(1, 11)]) == pytest.approx(2 / 1024)
    assert stats.sign_flip_p([0.0, 0.0]) == 1.0 and stats.sign_flip_p([0.3]) is None


def test_sign_flip_p_value_above_the_exact_range_is_seeded_monte_carlo():
    diffs = [0.01] * 17  # exact p would be 2 / 2^17; 9,999 draws put the observed sign pattern's share near 0
    p = stats.sign_flip_p(diffs)
    assert p == stats.sign_flip_p(diffs) and p < 0.001


def test_probability_of_improvement_counts_ties_half():
    assert stats.improvement([0.1, 0.0, -0.1, 0.2]) == pytest.approx((2 + 0.5) / 4)
    assert stats.improvement([]) is None


def test_paired_verdict_reads_the_t_interval_not_the_bootstrap():
    # differences 0.02, 0.01, 0.03 (method minus base per seed): bootstrap CI [0.01, 0.03] lies above 0; t interval
    # 0.02 +- 4.302653 * 0.01 / sqrt(3) = [-0.004841, 0.044841] holds 0
    p = stats.paired({0: 0.52, 1: 0.51, 2: 0.53}, {0: 0.5, 1: 0.5, 2: 0.5})
    assert (p.diff.lo, p.diff.hi) == pytest.approx((0.01, 0.03))
    assert (p.t.lo, p.t.hi) == pytest.approx((-0.004841, 0.044841), abs=1e-6)
    assert (p.verdict, p.p_value, p.improvement) == ("inconclusive", pytest.approx(0.25), 1.0)


# -- power -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("d", "n", "power"), [(0.5, 34, 0.8077775), (0.8, 15, 0.8213105), (1.0, 10, 0.8030969)])
def test_seeds_for_matches_g_power(d, n, power):
    # G*Power 3.1, t tests, difference from constant (one sample), a priori, two tails, alpha 0.05, power 0.80:
    # effect size d = 0.5 -> total sample size 34 (actual power 0.8077775); d = 0.8 -> 15; d = 1 -> 10
    assert headline.seeds_for(d * 0.01, 0.01) == n
    assert headline.t_power(d * 0.01, 0.01, n) == pytest.approx(power, abs=1e-6)
    assert headline.t_power(d * 0.01, 0.01, n - 1) < 0.8
    assert headline.seeds_for(0.02, 0.0) == 2 and headline.seeds_for(1e-6, 1.0) is None  # past MAX_SEEDS


@pytest.mark.parametrize(("d", "n", "power"), [(0.5, 34, 0.8077775), (0.8, 15, 0.8213105), (1.0, 10, 0.8030969)])
def test_the_integrated_power_matches_g_power_and_stays_finite_where_nct_does_not(d, n, power):
    crit = scipy_stats.t.ppf(0.975, n - 1)
    assert headline._t_power_integrated(d * math.sqrt(n), n - 1, crit) == pytest.approx(power, abs=1e-6)
    # 20 sds apart on 2 and 5 pairs: scipy's nct gives NaN there; the test finds such a difference almost surely
    for pairs in (2, 5):
        crit, nc = scipy_stats.t.ppf(0.975, pairs - 1), 20 * math.sqrt(pairs)
        assert math.isnan(scipy_stats.nct.cdf(-crit, pairs - 1, nc))
        assert 0.97 < headline.t_power(2.0, 0.1, pairs) <= 1.0


@pytest.mark.parametrize(("d", "n"), [(0.5, 34), (0.8, 15), (1.0, 10)])
def test_detectable_is_the_effect_whose_power_is_the_target(d, n):
    # G*Power's pairs above reach 80% at effect size d with power to spare, so the effect that n pairs detect
    # at exactly 80% lies below d, and above the normal approximation (z_0.975 + z_0.8) / sqrt(n), which the
    # t distribution's heavier tails exceed: 0.4805 (n 34), 0.7236 (n 15), 0.8860 (n 10)
    found = headline.detectable(0.01, n)
    normal = (1.959964 + 0.841621) / math.sqrt(n)
    assert normal * 0.01 < found < d * 0.01
    assert headline.t_power(found, 0.01, n) == pytest.approx(0.8, abs=1e-9)
    assert headline.detectable(0.0, n) == 0.0


def test_power_plan_splits_the_evaluation_noise_off_by_hand():
    # differences 0.02, 0.04, 0.00, 0.06: mean 0.03, squared deviations 1 + 1 + 9 + 9 (x 1e-4) -> s^2 = 0.002 / 3
    # = 6.6667e-4, s = 0.025820. Evaluation: 2 * 0.5 * 0.5 / 1000 = 5e-4, so training 1.6667e-4. At 2000 episodes
    # s^2 = 1.6667e-4 + 2.5e-4 = 4.1667e-4 (s 0.020412); at 4000, + 1.25e-4 = 2.9167e-4 (s 0.017078)
    pp = headline.power_plan([0.02, 0.04, 0.0, 0.06], 0.5, 1000, 0.02)
    assert (pp.pairs, pp.sd, pp.eval_sd) == pytest.approx((4, 0.025820, math.sqrt(5e-4)), abs=1e-6)
    assert [e for e, _, _ in pp.options] == [1000, 2000, 4000]
    assert [sd for _, sd, _ in pp.options] == pytest.approx([0.025820, 0.020412, 0.017078], abs=1e-6)
    assert [n for _, _, n in pp.options] == [headline.seeds_for(0.02, sd) for _, sd, _ in pp.options]
    # a spread smaller than the evaluation's own: training counts 0, the sd is the evaluation's
    small = headline.power_plan([0.01, 0.02], 0.5, 1000, 0.02)
    assert small.options[1][1] == pytest.approx(math.sqrt(2.5e-4))
    assert headline.power_plan([0.01], 0.5, 1000, 0.02) is None


def test_pilot_cells_plan_the_reported_seeds_and_the_headline_reads_them(tmp_path):
    pilot = _plan(tmp_path, POWER["pilot_seeds"])  # the run a user makes first: seeds=[100,101,102,103]
    for seed, diff in zip(POWER["pilot_seeds"], [0.02, 0.04, 0.0, 0.06]):
        _write_cell(pilot, "grpo", seed, 0.49)
        _write_cell(pilot, "gigpo", seed, 0.49 + diff)
    report = _plan(tmp_path, list(range(10)))
    # p = mean of grpo's 0.49 and gigpo's 0.52 on average = 0.505: 2 * 0.505 * 0.495 / 1000 = 4.9995e-4
    pp = headline.pilot(report)
    assert (pp.pairs, pp.episodes, pp.success) == (4, 1000, pytest.approx(0.505))
    assert pp.eval_sd == pytest.approx(math.sqrt(4.9995e-4))
    [line] = headline.power_lines(report)
    assert line.startswith("power (gigpo − grpo, 2 points at 80% power (α = 0.05)): from 4 pilot pairs, the sd")
    assert f"1000 episodes: sd 2.58 points, {pp.options[0][2]} seeds" in line and "this matrix has 10 seeds" in line
    finds = 100 * headline.detectable(pp.options[0][1], 10)
    assert f"which find a difference of {finds:.1f} points or more 80% of the time at 1000 episodes" in line
    # the reported seeds: gigpo ahead by 0.01 on 9 seeds, behind by 0.01 on one
    for seed in range(10):
        _write_cell(report, "grpo", seed, 0.5)
        _write_cell(report, "gigpo", seed, 0.49 if seed == 9 else 0.51)
    write_reports(report, "prover bench", echo=lambda s: None)
    text = (tmp_path / "out" / "results.md").read_text()
    # mean (9 * 0.01 - 0.01) / 10 = 0.008; sd sqrt((9 * 0.002^2 + 0.018^2) / 9) = 0.006325, SE 0.002,
    # t_{0.975, 9} = 2.262157 -> [0.003476, 0.012524], above 0: better. Sign flips: every |d| is 0.01, so a pattern
    # with m minus signs sums to 0.01 (10 - 2m); |10 - 2m| >= 8 for m in {0, 1, 9, 10}: 1 + 10 + 10 + 1 = 22 of
    # 1024 -> p = 0.021484. P(improvement) 9/10
    assert "## Headline: gigpo vs grpo" in text
    assert "| +0.8 | [+0.3, +1.3] | [" in text and "| 0.0215 | 0.90 | better |" in text
    assert "- power (gigpo − grpo" in text
    # the result first, its provenance under it, the method after the tables
    order = [text.index(s) for s in ("## Headline", "> **Provenance.** Written", "## Table 1", "## Method",
                                     "### The matrix")]
    assert order == sorted(order)


def test_power_compare_must_name_rows(tmp_path):
    with pytest.raises(ConfigError, match=r"^bench power.compare: 'spo-tree' is not a method \(row\)"):
        _plan(tmp_path, [0, 1], {**POWER, "compare": ["spo-tree", "grpo"]})
    with pytest.raises(ConfigError, match=r"^bench field 'power.pilot_seeds': .*at least 2") as err:
        load_bench_config(None, ["methods=[grpo,gigpo]", "power={compare: [gigpo, grpo], pilot_seeds: [100]}"])
    assert "\n" not in str(err.value)
    assert headline.power_lines(_plan(tmp_path, [0, 1], None)) == []
    [line] = headline.power_lines(_plan(tmp_path, [0, 1]))
    assert "no pilot yet" in line and "'seeds=[100,101,102,103]'" in line


def test_the_pilot_command_keeps_the_rows_settings_so_its_cells_are_the_matrix_own(tmp_path):
    methods = ["grpo", {"name": "gigpo", "overrides": {"credit.omega": 0.5}}]
    p = plan(BenchConfig(dir=str(tmp_path / "bench"), envs=[ENV], seeds=[0, 1], steps=4, methods=methods,
                         power=POWER))
    [line] = headline.power_lines(p)
    command = line.split("train it first: prover bench ... ")[1].removesuffix(" (or every row)")
    pilot = plan(load_bench_config(None, [f"dir={tmp_path / 'bench'}", f"envs=[{ENV}]", "steps=4",
                                          f"methods={json.dumps(methods)}", *shlex.split(command)]))
    full = plan(p.bench.model_copy(update={"seeds": [100, 101, 102, 103]}))
    assert {(c.method.row, c.seed): c.key for c in pilot.cells} == {(c.method.row, c.seed): c.key for c in full.cells}


def test_a_rebuild_from_the_archive_keeps_the_power_section(tmp_path):
    pilot = _plan(tmp_path, POWER["pilot_seeds"])
    for seed, diff in zip(POWER["pilot_seeds"], [0.02, 0.04, 0.0, 0.06]):
        _write_cell(pilot, "grpo", seed, 0.49)
        _write_cell(pilot, "gigpo", seed, 0.49 + diff)
    report = _plan(tmp_path, [0, 1])
    for seed in (0, 1):
        _write_cell(report, "grpo", seed, 0.5)
        _write_cell(report, "gigpo", seed, 0.51)
    write_reports(report, "prover bench", echo=lambda s: None)
    first = [ln for ln in (tmp_path / "out" / "results.md").read_text().splitlines() if ln.startswith("- power")]
    assert len(first) == 1 and "from 4 pilot pairs" in first[0]
    shutil.rmtree(tmp_path / "bench")  # a fresh clone has the archive only
    write_reports(plan(report.bench.model_copy(update={"dir": str(tmp_path / "out")})), "prover bench",
                  echo=lambda s: None)
    assert first[0] in (tmp_path / "out" / "results.md").read_text().splitlines()
    # a fresh bench folder that continues the committed matrix reads its pilot from the archive
    fresh = plan(report.bench.model_copy(update={"dir": str(tmp_path / "elsewhere")}))
    assert headline.power_lines(fresh)[0].startswith("power (gigpo − grpo, 2 points at 80% power (α = 0.05)): no pilot")
    assert restore_pilot(fresh) == 8 and restore_pilot(fresh) == 0  # taken once; then the folder has them
    assert "from 4 pilot pairs" in headline.power_lines(fresh)[0]
