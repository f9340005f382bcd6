"""The bench's statistics on hand-written metrics.jsonl files in the bench's cell folders: bootstrap CIs (exact
and Monte-Carlo), paired differences and their verdicts, AUC, steps to reach, evaluation SE, the Table 3
ground-truth ratios, and the time estimate. Every expected number is worked out by hand in the comments."""

from __future__ import annotations

import csv
import json
import math
import shutil
from fractions import Fraction
from pathlib import Path

import pytest

from prover.bench import runner, stats, timing
from prover.bench.matrix import BenchConfig, Plan, load_bench_config, plan
from prover.bench.runner import precision_notes, write_reports
from prover.bench.tables import collect, table1, table3
from prover.errors import ConfigError

ENV = "alfworld-sim"


def _plan(tmp_path: Path, methods: list, seeds: list[int], envs: tuple[str, ...] = (ENV,), **fields) -> Plan:
    return plan(BenchConfig(dir=str(tmp_path / "bench"), out=str(tmp_path / "out"), envs=list(envs), seeds=seeds,
                            steps=4, methods=methods, **fields))


def _write_cell(p: Plan, method: str, seed: int, evals: dict[int, float], train: dict[int, dict] | None = None,
                env: str = ENV, episodes: int = 48, finished: bool = True) -> None:
    """A cell folder as the bench leaves it: cell.json with the settings hash, metrics.jsonl with eval records
    at ``evals``' steps and train records at ``train``'s."""
    cell = next(c for c in p.cells if (c.env, c.method.row, c.seed) == (env, method, seed))
    cell.dir.mkdir(parents=True, exist_ok=True)
    (cell.dir / "cell.json").write_text(json.dumps({"key": cell.key}) + "\n")
    recs = [(s, 1, {"step": s, "phase": "eval", "eval/success": v, "eval/episodes": float(episodes)})
            for s, v in evals.items() if finished or s < p.bench.steps]
    recs += [(s, 0, {"step": s, "phase": "train", **t}) for s, t in (train or {}).items()]
    lines = [json.dumps(r) for _, _, r in sorted(recs, key=lambda x: (x[0], x[1]))]
    (cell.dir / "metrics.jsonl").write_text("".join(ln + "\n" for ln in lines))


def _ends(ci: stats.Interval) -> tuple:
    return ci.lo, ci.hi


# -- the bootstrap --------------------------------------------------------------------------------------

def test_exact_bootstrap_of_two_values_spans_them():
    # resample means of a < b: a (1/4), (a + b) / 2 (1/2), b (1/4); P(M <= a) = 1/4 >= 2.5% and P(M >= b) = 1/4
    ci = stats.bootstrap([0.6, 0.4])
    assert (ci.mean, ci.lo, ci.hi, ci.n, ci.method) == (pytest.approx(0.5), 0.4, 0.6, 2, "exact")


def test_exact_bootstrap_of_three_values_enumerates_the_27_resamples():
    # values 0, 3, 9 (scaled by 0.1 below). The 27 ordered resamples by their counts (c0, c3, c9), weight 3!/prod c!:
    #   (3,0,0) mean 0 w1 | (2,1,0) 1 w3 | (1,2,0) 2 w3 | (0,3,0) 3 w1 | (2,0,1) 3 w3 | (1,1,1) 4 w6
    #   (0,2,1) 5 w3      | (1,0,2) 6 w3 | (0,1,2) 7 w3 | (0,0,3) 9 w1                    (sum of weights 27)
    # cumulative from below: 0:1, 1:4, 2:7, 3:11, 4:17, 5:20, 6:23, 7:26, 9:27; from above: 9:1, 7:4, 6:7, 5:10
    means, weights, total, how = stats.resample_means([0.0, 3.0, 9.0])
    dist: dict[float, int] = {}
    for m, w in zip(means, weights):
        dist[round(m, 9)] = dist.get(round(m, 9), 0) + w
    assert (total, how, sum(weights)) == (27, "exact", 27)
    assert dist == {0: 1, 1: 3, 2: 3, 3: 4, 4: 6, 5: 3, 6: 3, 7: 3, 9: 1}
    values = [0.0, 0.3, 0.9]
    # 95%: tail 27/40 = 0.675 -> the first step from either end already holds 1 -> [0, 0.9]
    assert _ends(stats.bootstrap(values)) == pytest.approx((0.0, 0.9))
    # 90%: tail 27/20 = 1.35 -> from below 0 (1) < 1.35, 1 (4) >= 1.35; from above 9 (1), 7 (4) -> [0.1, 0.7]
    assert _ends(stats.bootstrap(values, Fraction(9, 10))) == pytest.approx((0.1, 0.7))
    # 70%: tail 27 * 0.15 = 4.05 -> from below 4 < 4.05, 2 (7) >= 4.05; from above 4 < 4.05, 6 (7) -> [0.2, 0.6]
    assert _ends(stats.bootstrap(values, Fraction(7, 10))) == pytest.approx((0.2, 0.6))


def test_exact_bootstrap_of_four_values_is_a_binomial():
    # 0, 0, 0, 1: a resample's mean is k/4 with k ~ Binomial(4, 1/4): P(k) = 81, 108, 54, 12, 1 out of 256.
    # tail 256/40 = 6.4: from below k=0 already holds 81; from above k=4 holds 1 < 6.4, k=3 holds 13 -> [0, 0.75]
    ci = stats.bootstrap([0.0, 1.0, 0.0, 0.0])
    assert (ci.mean, ci.lo, ci.hi, ci.method) == (0.25, 0.0, 0.75, "exact")


def test_monte_carlo_bootstrap_above_eight_values_is_seeded():
    values = [float(v) for v in range(9)]  # 0..8: mean 4, population variance 60/9
    ci = stats.bootstrap(values)
    assert ci.method == "monte-carlo" and ci == stats.bootstrap(values)  # the same every time
    # normal approximation: SE of a resample mean sqrt(60/9 / 9) = 0.8607, 1.96 * 0.8607 = 1.687 -> [2.31, 5.69]
    assert ci.lo == pytest.approx(2.31, abs=0.3) and ci.hi == pytest.approx(5.69, abs=0.3)
    assert stats.bootstrap([0.7]) == stats.Interval(0.7, None, None, 1, "")  # one seed: no CI


def test_paired_difference_leaves_out_seeds_missing_from_either_side():
    # seeds 0, 1, 2 in both; 3 only in the method, 4 only in the baseline -> 3 pairs, each 0.1 apart
    p = stats.paired({0: 0.5, 1: 0.625, 2: 0.75, 3: 0.875}, {0: 0.375, 1: 0.5, 2: 0.625, 4: 0.125})
    assert (p.pairs, p.diff.mean, p.diff.lo, p.diff.hi, p.verdict) == (3, 0.125, 0.125, 0.125, "better")
    # -0.125 and +0.25: CI [-0.125, 0.25] holds 0
    assert stats.paired({0: 0.25, 1: 0.75}, {0: 0.375, 1: 0.5}).verdict == "inconclusive"
    assert stats.paired({0: 0.5}, {1: 0.5}) == stats.Paired(stats.NONE, "inconclusive")  # no pair at all


# -- per-seed numbers ------------------------------------------------------------------------------------

def test_auc_and_steps_to_reach_by_hand():
    # trapezoid over (0, 0.2), (2, 0.4), (4, 0.8): 2 * 0.3 + 2 * 0.6 = 1.8, over 4 steps -> 0.45
    assert stats.auc({0: 0.2, 2: 0.4, 4: 0.8}, 4) == pytest.approx(0.45)
    assert stats.auc({0: 0.2, 4: 0.6}, 4) == pytest.approx(0.4)  # 4 * 0.4 / 4
    assert stats.auc({0: 0.3}, 0) == 0.3 and stats.auc({0: 0.2, 2: 0.4}, 4) is None  # no final point
    # first step with success >= 0.5: 4; 24/48 = 0.5 counts at step 2; never
    steps = [stats.first_reach({0: 0.2, 2: 0.4, 4: 0.8}, 0.5), stats.first_reach({0: 0.2, 2: 24 / 48, 4: 0.6}, 0.5),
             stats.first_reach({0: 0.2, 2: 0.3, 4: 0.4}, 0.5)]
    assert steps == [4, 2, None]
    assert stats.median_reach(steps) == stats.Reach(4.0, 2, 3)  # sorted 2, 4, inf -> 4
    assert stats.median_reach([2, None]) == stats.Reach(None, 1, 2)  # (2 + inf) / 2: not reached
    assert stats.median_reach([2, 4]) == stats.Reach(3.0, 2, 2)


def test_evaluation_standard_error_and_the_warning():
    # sqrt(0.25 * 0.75 / 48) = sqrt(0.00390625) = 0.0625
    assert stats.eval_se(0.25, 48) == pytest.approx(0.0625)
    assert stats.episodes_for_se() == 278  # ceil(0.25 / 0.03^2) = ceil(277.8)
    warn = stats.se_warning(48)  # sqrt(0.25 / 48) = 0.0722
    assert "up to 7.2 points" in warn and "eval.episodes=278 or more" in warn and "\n" not in warn
    assert stats.se_warning(278) is None and stats.se_warning(277) is not None  # sqrt(0.25 / 277) = 0.03004


# -- Table 1 from cell folders ---------------------------------------------------------------------------

def test_table1_paired_differences_verdicts_auc_reach_se_and_budget(tmp_path):
    p = _plan(tmp_path, ["grpo", "gigpo", "spo-tree"], [0, 1, 2], reach=0.5)
    tok = {1: {"cost/rollout_tokens": 100.0}, 2: {"cost/rollout_tokens": 300.0}}  # 200 per step
    for seed, (g, gi, spo) in enumerate([(0.25, 0.5, 0.125), (0.5, 0.625, 0.375), (0.375, 0.5, 0.25)]):
        _write_cell(p, "grpo", seed, {0: 0.25, 2: 0.5 if seed == 1 else 0.25, 4: g}, tok)
        if seed != 2:  # gigpo's seed 2 never finished: two pairs
            _write_cell(p, "gigpo", seed, {0: 0.25, 2: 0.5, 4: gi},
                        {1: {"cost/rollout_tokens": 250.0, "cost/branch_tokens": 50.0}})
        _write_cell(p, "spo-tree", seed, {0: 0.25, 2: 0.25, 4: spo}, tok)
    _write_cell(p, "gigpo", 2, {0: 0.25, 2: 0.5, 4: 0.5}, finished=False)
    results, pending = collect(p)
    assert [c.name for c in pending] == [f"{ENV} · gigpo · seed 2"]
    [grpo, gigpo, spo] = [r[ENV] for r in table1(results, ["grpo", "gigpo", "spo-tree"], [ENV], "grpo", 0.5)]
    # grpo: 0.25, 0.5, 0.375 -> mean 0.375; three values: CI [min, max] (1/27 of the weight sits on each end)
    assert (grpo.success.mean, grpo.success.lo, grpo.success.hi) == pytest.approx((0.375, 0.25, 0.5))
    # gigpo - grpo on seeds 0, 1: 0.25, 0.125 -> mean 0.1875, bootstrap CI [0.125, 0.25] above 0; but the verdict
    # reads the t interval: sd |0.25 - 0.125| / sqrt(2) = 0.088388, SE sd / sqrt(2) = 0.0625, t_{0.975, 1} = 12.7062
    # -> 0.1875 +- 0.79414 = [-0.60664, 0.98164]: two pairs cannot tell
    assert (gigpo.diff.diff.mean, gigpo.diff.diff.lo, gigpo.diff.diff.hi) == pytest.approx((0.1875, 0.125, 0.25))
    assert (gigpo.diff.t.lo, gigpo.diff.t.hi) == pytest.approx((-0.60664, 0.98164), abs=1e-5)
    assert (gigpo.diff.pairs, gigpo.diff.verdict) == (2, "inconclusive")
    # both differences positive: probability of improvement 1; sign flips of (0.25, 0.125): |mean| >= 0.1875 for
    # (+, +) and (-, -) only -> p = 2 / 4
    assert (gigpo.diff.improvement, gigpo.diff.p_value) == pytest.approx((1.0, 0.5))
    # spo-tree - grpo: -0.125 on every seed -> every interval [-0.125, -0.125] below 0; 3 pairs: p = 2 / 8
    assert (spo.diff.diff.mean, spo.diff.verdict, spo.diff.pairs) == (pytest.approx(-0.125), "worse", 3)
    assert (spo.diff.t.lo, spo.diff.t.hi, spo.diff.improvement, spo.diff.p_value) == pytest.approx(
        (-0.125, -0.125, 0.0, 0.25))
    # AUC: grpo seed 0 (2 * 0.25 + 2 * 0.25) / 4 = 0.25; seed 1 (2 * 0.375 + 2 * 0.5) / 4 = 0.4375;
    # seed 2 (2 * 0.25 + 2 * 0.3125) / 4 = 0.28125 -> mean 0.322917
    assert grpo.auc.mean == pytest.approx((0.25 + 0.4375 + 0.28125) / 3)
    # gigpo seed 0 (2 * 0.375 + 2 * 0.5) / 4 = 0.4375 vs 0.25; seed 1 (0.75 + 1.125) / 4 = 0.46875 vs 0.4375
    # differences 0.1875 and 0.03125: t interval 0.109375 +- 12.7062 * 0.078125 = [-0.883, 1.102]: inconclusive
    assert gigpo.auc_diff.diff.mean == pytest.approx((0.1875 + 0.03125) / 2)
    assert gigpo.auc_diff.verdict == "inconclusive"
    # reach 0.5: grpo seed 0 never, seed 1 at step 2, seed 2 never -> sorted 2, inf, inf: median inf
    assert grpo.reach == stats.Reach(None, 1, 3)
    assert gigpo.reach == stats.Reach(2.0, 2, 2)  # both finished seeds at step 2 (seed 2 unfinished: left out)
    # largest SE: gigpo 0.5 on 48 episodes sqrt(0.25 / 48) = 0.0722; its 0.625: sqrt(0.234375 / 48) = 0.0699
    assert gigpo.max_se == pytest.approx(math.sqrt(0.25 / 48))
    # generated tokens per step: gigpo 250 + 50 = 300, grpo (100 + 300) / 2 = 200 -> 1.5
    assert (gigpo.tokens_vs_baseline, grpo.tokens_vs_baseline) == pytest.approx((1.5, 1.0))
    assert grpo.diff is None


def test_reports_carry_the_new_columns(tmp_path):
    p = _plan(tmp_path, ["grpo", "gigpo"], [0, 1], reach=0.5)
    for seed, (g, gi) in enumerate([(0.25, 0.5), (0.5, 0.5)]):
        _write_cell(p, "grpo", seed, {0: 0.25, 4: g}, {1: {"cost/rollout_tokens": 100.0}})
        _write_cell(p, "gigpo", seed, {0: 0.25, 4: gi}, {1: {"cost/rollout_tokens": 100.0}})
    write_reports(p, "prover bench", echo=lambda s: None)
    rows = {(r["method"], r["env"]): r for r in csv.DictReader((tmp_path / "out" / "table1.csv").open())}
    g = rows["gigpo", ENV]
    # gigpo - grpo: 0.25, 0 -> mean 0.125, CI [0, 0.25] touches 0: inconclusive
    assert (float(g["diff_mean"]), float(g["diff_lo"]), float(g["diff_hi"])) == (0.125, 0.0, 0.25)
    assert (g["n_pairs"], g["verdict"], g["ci"], g["baseline"]) == ("2", "inconclusive", "exact", "grpo")
    # AUC gigpo: (0.25 + 0.5) / 2 = 0.375 and 0.375; reach 0.5 at step 4 on both seeds
    assert (float(g["auc_mean"]), float(g["reach_median_step"]), g["reached_seeds"]) == (0.375, 4.0, "2")
    assert rows["grpo", "avg"]["verdict"] == "" and float(rows["grpo", ENV]["tokens_vs_baseline"]) == 1.0
    md = (tmp_path / "out" / "results.md").read_text()
    # Δ's t interval: sd 0.25 / sqrt(2) = 0.176777, SE 0.125, t_{0.975, 1} 12.7062 -> 0.125 +- 1.588278; the
    # bootstrap [0, 0.25] beside it; sign flips of (0.25, 0): all 4 reach |mean| >= 0.125 -> p 1; P(better) 1.5 / 2
    assert ("| gigpo | 50.0 [50.0, 50.0] | +12.5 [-146.3, +171.3] | [+0.0, +25.0] | 1.000 | 0.75 | inconclusive (2) "
            "| 37.5 [37.5, 37.5] |") in md
    assert (float(g["diff_t_lo"]), float(g["diff_t_hi"])) == pytest.approx((-1.463278, 1.713278), abs=1e-5)
    assert (float(g["diff_p_value"]), float(g["diff_improvement"])) == (1.0, 0.75)
    assert "Seeds are paired" in md and "fewer than 5 seeds" in md and "eval.episodes=96" in md


def test_the_tables_rebuild_from_the_archived_cells_alone(tmp_path):
    p = _plan(tmp_path, ["grpo", "gigpo"], [0, 1])
    for seed, (g, gi) in enumerate([(0.25, 0.5), (0.5, 0.75)]):
        _write_cell(p, "grpo", seed, {0: 0.25, 4: g}, {1: {"cost/rollout_tokens": 100.0}})
        _write_cell(p, "gigpo", seed, {0: 0.25, 4: gi}, {1: {"cost/rollout_tokens": 100.0}})
    _write_cell(p, "gigpo", 1, {0: 0.25}, finished=False)  # unfinished: not archived
    (p.cells[0].dir / "groups.jsonl").write_text("{}\n")  # bulky records stay behind
    write_reports(p, "prover bench", echo=lambda s: None)
    archive = tmp_path / "out" / "cells" / ENV
    assert sorted(str(f.relative_to(archive)) for f in archive.rglob("*") if f.is_file()) == [
        "gigpo/seed-0/cell.json", "gigpo/seed-0/metrics.jsonl",
        "grpo/seed-0/cell.json", "grpo/seed-0/metrics.jsonl", "grpo/seed-1/cell.json", "grpo/seed-1/metrics.jsonl"]
    first = (tmp_path / "out" / "table1.csv").read_text()
    shutil.rmtree(tmp_path / "bench")  # a fresh clone has the out folder only
    again = plan(p.bench.model_copy(update={"dir": str(tmp_path / "out")}))
    write_reports(again, "prover bench", echo=lambda s: None)
    assert (tmp_path / "out" / "table1.csv").read_text() == first
    assert sum(1 for f in archive.rglob("*") if f.is_file()) == 6  # nothing copied onto itself


def test_a_fresh_bench_folder_takes_committed_cells_and_archives_new_ones_as_they_finish(tmp_path, monkeypatch):
    """On another machine (an empty bench folder) a cell the archive holds finished under the same settings is
    taken from it, not trained; a stale or unfinished archived record is not; a cell trained here is archived as
    soon as it finishes, before any report."""
    p = _plan(tmp_path, ["grpo", "gigpo", "spo-chain"], [0])
    archive = plan(p.bench.model_copy(update={"dir": str(tmp_path / "out")}))
    _write_cell(archive, "grpo", 0, {0: 0.25, 4: 0.5})
    _write_cell(archive, "gigpo", 0, {0: 0.25, 4: 0.75})
    stale = next(c for c in archive.cells if c.method.row == "gigpo")
    (stale.dir / "cell.json").write_text(json.dumps({"key": "other-settings"}) + "\n")
    _write_cell(archive, "spo-chain", 0, {0: 0.25}, finished=False)
    trained = []

    def fake_train(cell, head, bench, verbose, echo, on_first_step=None):
        trained.append(cell.method.row)
        _write_cell(p, cell.method.row, cell.seed, {0: 0.25, 4: 1.0})
        return f"{head}: done"
    monkeypatch.setattr(runner, "run_cell", fake_train)
    assert timing.plan_line(p).startswith("bench: 2 cells to train (8 steps; 1 already done cost nothing)")
    lines: list[str] = []
    outcome = runner.run_plan(p, echo=lines.append)
    assert trained == ["gigpo", "spo-chain"] and outcome.skipped == [f"{ENV} · grpo · seed 0"]
    assert any("grpo · seed 0: finished earlier" in ln and "its record taken from" in ln for ln in lines)
    mine = next(c for c in p.cells if c.method.row == "grpo").dir
    assert (mine / "metrics.jsonl").read_text() == (tmp_path / "out" / "cells" / ENV / "grpo" / "seed-0" /
                                                    "metrics.jsonl").read_text()
    for row in ("gigpo", "spo-chain"):  # archived at once: the trained record replaced the stale and unfinished ones
        assert json.loads((tmp_path / "out" / "cells" / ENV / row / "seed-0" / "metrics.jsonl").read_text()
                          .splitlines()[-1])["eval/success"] == 1.0
    # a second run finds everything finished and trains nothing
    assert runner.run_plan(p, echo=lines.append).trained == [] and trained == ["gigpo", "spo-chain"]


# -- Table 3: the judges against the ground truth -----------------------------------------------------------

def _truth(p: int, h: int, a: int, ah: int, share: float) -> dict:
    return {"credit/valid_proposals": float(p), "credit/accepted": float(a), "truth/proposals": float(p),
            "truth/hits": float(h), "truth/accepted": float(a), "truth/accepted_hits": float(ah),
            "truth/target_pivotal_share": share}


def test_table3_pools_truth_counts_over_steps_and_seeds(tmp_path):
    p = _plan(tmp_path, ["prover+random"], [0, 1], envs=(ENV, "webshop-sim"))
    row = "prover+random"
    _write_cell(p, row, 0, {0: 0.2, 4: 0.5}, {1: _truth(3, 2, 2, 1, 0.2), 2: _truth(1, 0, 1, 0, 0.5)})
    _write_cell(p, row, 1, {0: 0.2, 4: 0.5}, {1: _truth(2, 2, 0, 0, 0.25), 2: _truth(0, 0, 0, 0, 0.0)})
    for seed in (0, 1):  # webshop-sim knows no pivotal turns: no truth/* keys
        _write_cell(p, row, seed, {0: 0.1, 4: 0.1}, {1: {"credit/valid_proposals": 1.0, "credit/accepted": 0.0}},
                    env="webshop-sim")
    results, _ = collect(p)
    alf, ws, pooled = table3(results, [row], [ENV, "webshop-sim"])
    # proposals 3 + 1 + 2 + 0 = 6, hits 2 + 0 + 2 = 4, accepted 2 + 1 + 0 = 3, accepted hits 1
    # hit rate 4/6, precision 1/3, recall 1/4; pivotal share (3 * 0.2 + 1 * 0.5 + 2 * 0.25) / 6 = 1.6 / 6
    assert ((alf["proposals"], alf["hit_rate"], alf["precision"], alf["recall"])
            == pytest.approx((6, 4 / 6, 1 / 3, 0.25)))
    assert alf["pivotal_share"] == pytest.approx(1.6 / 6)
    assert ws["truth"] is False and pooled["truth"] is True and pooled["hit_rate"] == pytest.approx(4 / 6)
    # seed 1 alone: 2 proposals, 2 hits, none accepted -> precision n/a (0 accepted), recall 0 / 2 = 0
    [one] = [r for r in table3([r for r in results if r.seed == 1], [row], [ENV]) if r["env"] == ENV]
    assert (one["precision"], one["recall"], one["hit_rate"]) == (None, 0.0, 1.0)
    write_reports(p, "prover bench", echo=lambda s: None)
    md = (tmp_path / "out" / "results.md").read_text()
    assert f"| {row} | {ENV} | 50.0 [50.0, 50.0] | – | – | 6 | 3 | 50.0 | – | – | 6 | 66.7 | 26.7 | 33.3 | 25.0 |" in md
    assert f"| {row} | webshop-sim | 10.0 [10.0, 10.0] | – | – | 2 | 0 | 0.0 | – | – | – | – | – | – | – |" in md
    csv_rows = list(csv.DictReader((tmp_path / "out" / "table3.csv").open()))
    assert [(r["env"], r["truth"]) for r in csv_rows] == [(ENV, "1"), ("webshop-sim", "0"), ("all", "1")]
    assert float(csv_rows[0]["truth_recall"]) == 0.25 and csv_rows[1]["truth_hit_rate"] == ""


def test_table3_says_n_a_when_a_denominator_is_zero(tmp_path):
    p = _plan(tmp_path, ["prover+random"], [0])
    _write_cell(p, "prover+random", 0, {0: 0.2, 4: 0.5}, {1: _truth(0, 0, 0, 0, 0.0)})
    write_reports(p, "prover bench", echo=lambda s: None)
    md = (tmp_path / "out" / "results.md").read_text()
    assert f"| prover+random | {ENV} | 50.0 | – | – | 0 | 0 | – | – | – | 0 | n/a | n/a | n/a | n/a |" in md


# -- config ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("override, named", [("reach=0", "reach"), ("reach=1.5", "reach"), ("seeds=[0,0]", "repeat")])
def test_bad_stats_fields_are_one_line_errors(override, named):
    with pytest.raises(ConfigError, match=named) as err:
        load_bench_config(None, ["methods=[grpo]", override])
    assert "\n" not in str(err.value)


def test_baseline_field(tmp_path):
    assert load_bench_config(None, ["methods=[grpo]", "reach=null"]).reach is None
    with pytest.raises(ConfigError, match="baseline 'gigpoo' is not a method"):
        _plan(tmp_path, ["grpo", "gigpo"], [0], baseline="gigpoo")
    _plan(tmp_path, ["gigpo"], [0])  # the default baseline may be absent: no paired differences then
    p = _plan(tmp_path, ["grpo", "gigpo"], [0, 1], baseline="gigpo")
    for seed in (0, 1):
        _write_cell(p, "grpo", seed, {0: 0.2, 4: 0.25})
        _write_cell(p, "gigpo", seed, {0: 0.2, 4: 0.5})
    [grpo] = [r[ENV] for r in table1(collect(p)[0], ["grpo"], [ENV], "gigpo")]
    assert grpo.diff.verdict == "worse" and grpo.diff.diff.mean == pytest.approx(-0.25)


def test_precision_notes_before_any_work(tmp_path):
    p = _plan(tmp_path, ["grpo"], [0, 1, 2, 3, 4], common={"eval.episodes": 300})
    assert precision_notes(p) == []
    p = _plan(tmp_path, ["grpo"], [0], env_overrides={ENV: {"eval.episodes": 48}}, envs=(ENV, "webshop-sim"))
    [se48, se96, seeds] = precision_notes(p)
    assert se48.startswith(f"eval.episodes=48 ({ENV}) ") and "7.2 points" in se48
    assert "(webshop-sim)" in se96 and "5.1 points" in se96  # sqrt(0.25 / 96) = 0.051
    assert seeds.startswith("1 seed(s)")


# -- the time estimate ------------------------------------------------------------------------------------

def test_estimate_prices_cells_left_from_timings(tmp_path):
    p = _plan(tmp_path, ["grpo", "prover+random"], [0, 1])
    assert "no cell's seconds per step measured yet" in timing.plan_line(p)
    timing.record_cell(p.bench.dir, ENV, "grpo", 0, 40.0, 4)  # 10 s per step
    timing.record_warmstart(p.bench.dir, ENV, 300.0)
    data = json.loads((tmp_path / "bench" / "timings.json").read_text())
    assert data["cells"][ENV]["grpo"]["0"] == {"seconds": 40.0, "steps": 4} and data["warmstarts"][ENV] == 300.0
    _write_cell(p, "grpo", 0, {0: 0.2, 4: 0.5})  # finished: costs 0
    # prover+random seed 1 stopped after step 2 under the same settings: 2 steps left
    _write_cell(p, "prover+random", 1, {0: 0.2}, {1: {}, 2: {}}, finished=False)
    (tmp_path / "bench" / "shared" / ENV / "seed-0" / "models" / "warmstart-abc").mkdir(parents=True)
    est = timing.estimate(p)
    # grpo seed 1: 4 steps; prover+random seed 0: 4, seed 1: 2 -> 10 steps at 10 s (prover+random borrows grpo's
    # rate, the only one of the env) = 100 s; one warm start to build (seed 1's; seed 0's exists) 300 s -> 400 s
    assert (est.cells, est.steps, est.finished, est.warmstarts) == (3, 10, 1, 1)
    assert est.seconds == pytest.approx(400.0) and est.borrowed == [f"{ENV} · prover+random"]
    line = timing.plan_line(p)
    assert "3 cells to train (10 steps; 1 already done cost nothing)" in line and "about 7 min" in line
    # the last cell alone: 2 steps * 10 s + its warm start 300 s = 320 s, 5.3 min
    assert timing.left_line(p, p.cells[-1:]).startswith("bench: about 5 min left (1 cells, 1 warm start(s))")
    assert timing.duration(59) == "under a minute" and timing.duration(3 * 3600 + 5 * 60) == "about 3 h 05 min"
    timing.record_cell(p.bench.dir, ENV, "grpo", 1, 80.0, 4)  # seed 1 at 20 s per step: (40 + 80) / 8 = 15
    assert timing.rates(timing.load(p.bench.dir)) == {(ENV, "grpo"): 15.0}


def test_table3_gives_eligible_groups_per_step_and_the_valid_proposal_rate(tmp_path):
    p = _plan(tmp_path, ["prover+random"], [0, 1])
    row = "prover+random"

    def groups(eligible: int, judged: int, valid: int) -> dict:
        return {"credit/eligible_groups": float(eligible), "credit/judged_groups": float(judged),
                "credit/valid_proposals": float(valid), "credit/accepted": 0.0}

    _write_cell(p, row, 0, {0: 0.2, 4: 0.5}, {1: groups(2, 2, 1), 2: groups(0, 0, 0), 3: groups(3, 3, 3)})
    _write_cell(p, row, 1, {0: 0.2, 4: 0.5}, {1: groups(1, 1, 0)})
    results, _ = collect(p)
    [cell] = [r for r in table3(results, [row], [ENV]) if r["env"] == ENV]
    # 2 + 0 + 3 + 1 = 6 eligible groups over 4 train steps; 1 + 0 + 3 + 0 = 4 valid of 2 + 0 + 3 + 1 = 6 judged
    assert (cell["eligible_per_step"], cell["valid_rate"]) == pytest.approx((1.5, 4 / 6))
    write_reports(p, "prover bench", echo=lambda s: None)
    md = (tmp_path / "out" / "results.md").read_text()
    assert f"| {row} | {ENV} | 50.0 [50.0, 50.0] | 1.50 | 66.7 | 4 | 0 | 0.0 |" in md
    csv_rows = list(csv.DictReader((tmp_path / "out" / "table3.csv").open()))
    assert float(csv_rows[0]["eligible_per_step"]) == 1.5
