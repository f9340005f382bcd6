"""``prover bench``: names checked before any work, unconfigured judges skipped with a note, a tiny
2-method bench writing the tables, CSV and curves, finished cells skipped on rerun and an unfinished one
resumed; and the three tables' numbers on hand-written metrics, computed by hand."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import yaml

from prover.bench.matrix import BenchConfig, load_bench_config, plan
from prover.bench.report import markdown_tables, write_csvs
from prover.bench.tables import CellResult, table1, table2, table3
from prover.cli import main
from prover.errors import ConfigError


@pytest.fixture
def tiny_common(tiny_run_overrides) -> dict:
    """conftest's seconds-long run settings as the matrix's common settings (the matrix sets run.dir)."""
    return {k: yaml.safe_load(v) for k, v in (o.split("=", 1) for o in tiny_run_overrides) if k != "run.dir"}


def _write(tmp_path: Path, common: dict, **fields) -> Path:
    tree = {"dir": str(tmp_path / "bench"), "envs": ["alfworld-sim"], "seeds": [0], "steps": 1,
            "methods": ["grpo"], "common": common, **fields}
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


# -- checks before any work ----------------------------------------------------------------------------

@pytest.mark.parametrize("override, named", [
    ("methods=[grpo,spo-treee]", "spo-treee"),
    ("envs=[alfworld-sim,webshop-simm]", "webshop-simm"),
    ("methods=[grpo,prover+contrastt]", "contrastt"),
    ("methods=[grpo+contrast]", "uses no judge"),
    ("methods=[prover]", "needs a judge"),
    ("common.rollout.group_size=0", "rollout.group_size"),
    ("common.steps=3", "'steps' is set by the matrix"),
    ("stepz=3", "stepz"),
])
def test_bad_matrix_fails_before_any_work_naming_the_problem(override, named, tiny_common, tmp_path, capsys):
    rc = main(["bench", "--config", str(_write(tmp_path, tiny_common)), override])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and named in err and "\n" not in err and "Traceback" not in err
    assert not (tmp_path / "bench").exists()  # nothing was built or written


def test_unconfigured_api_judges_and_critics_are_skipped_with_a_note(monkeypatch, tmp_path):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("PROVER_TEST_UNSET_KEY", raising=False)
    methods = ["grpo", "prover+litellm", "criticsearch",
               {"name": "prover+litellm", "label": "keyless", "overrides": {"judge.model": "gpt-5.4-mini"}},
               {"name": "prover+litellm", "label": "named-key",
                "overrides": {"judge.model": "gpt-5.4-mini", "judge.api_key_env": "PROVER_TEST_UNSET_KEY"}},
               {"name": "prover+local", "label": "no-folder"},
               {"name": "prover+litellm", "label": "local-server",
                "overrides": {"judge.model": "openai/qwen", "judge.api_base": "http://127.0.0.1:9/v1"}}]
    p = plan(BenchConfig(dir=str(tmp_path / "b"), envs=["alfworld-sim"], seeds=[0, 1], methods=methods))
    assert sorted({c.method.row for c in p.cells}) == ["grpo", "local-server"]
    assert len(p.skipped) == 5 and all(n.startswith("skipped '") for n in p.skipped)
    notes = "\n".join(p.skipped)
    assert "'prover+litellm': judge.model is not set" in notes
    assert "'criticsearch': credit.critic.litellm.model is not set" in notes
    assert "'keyless': model 'gpt-5.4-mini' needs the environment variable(s) ['OPENAI_API_KEY']" in notes
    assert "'named-key': environment variable 'PROVER_TEST_UNSET_KEY'" in notes
    assert "'no-folder': judge.model_path is not set" in notes
    monkeypatch.setenv("PROVER_TEST_UNSET_KEY", "sk-test-not-a-real-key")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    p = plan(BenchConfig(dir=str(tmp_path / "b"), envs=["alfworld-sim"], seeds=[0], methods=methods[3:5]))
    assert [c.method.row for c in p.cells] == ["keyless", "named-key"] and p.skipped == []
    assert not (tmp_path / "b").exists()


def test_overrides_reach_the_cells_in_order_common_env_method(tiny_common, tmp_path):
    bench = load_bench_config(_write(tmp_path, tiny_common, envs=["alfworld-sim", "webshop-sim"], seeds=[3],
                                     env_overrides={"webshop-sim": {"rollout.max_turns": 5}},
                                     methods=[{"name": "prover+random", "overrides": {"rollout": {"max_turns": 4},
                                                                                      "credit.samples": 2}}]),
                              ["steps=2", "common.rollout.group_size=5"])
    [alf, ws] = plan(bench).cells
    assert (alf.config.steps, alf.config.seed, alf.config.rollout.group_size) == (2, 3, 5)
    assert alf.config.rollout.max_turns == ws.config.rollout.max_turns == 4  # the method's setting wins
    assert (ws.config.env.name, ws.config.credit.name, ws.config.judge.name) == ("webshop-sim", "prover", "random")
    assert ws.dir == tmp_path / "bench" / "cells" / "webshop-sim" / "prover+random" / "seed-3"
    assert ws.config.run.dir == str(ws.dir) and alf.key != ws.key


def test_methods_named_on_the_command_line_keep_the_files_settings_for_them(tiny_common, tmp_path):
    """``methods=[...]`` picks rows of the file by label (else name), each with its overrides; a name the file
    does not list is a plain row."""
    path = _write(tmp_path, tiny_common, methods=[
        "grpo", {"name": "prover+random", "overrides": {"credit.samples": 2}},
        {"name": "prover+random", "label": "prover+random-k3", "overrides": {"credit.samples": 3}}])
    bench = load_bench_config(path, ["methods=[prover+random-k3,prover+random,gigpo]"])
    assert [(m.name, m.label, m.overrides) for m in bench.methods] == [
        ("prover+random", "prover+random-k3", {"credit.samples": 3}), ("prover+random", None, {"credit.samples": 2}),
        ("gigpo", None, {})]
    assert [c.config.credit.samples for c in plan(bench).cells[:2]] == [3, 2]


# -- a tiny bench ----------------------------------------------------------------------------------------

def _mtimes(root: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def _check_estimates(out: str, bench: Path) -> None:
    """Before any work: eval.episodes=4 is far from a 3-point SE, and nothing is timed yet; after the first cell
    an estimate of what is left follows, from the timings file both cells and the warm start wrote."""
    assert out.index("note: eval.episodes=4 measures") < out.index(": training ")
    assert "bench: 2 cells to train (2 steps; 0 already done cost nothing) and 1 warm start(s); no cell's" in out
    assert out.index("[1/2] alfworld-sim · grpo · seed 0: done in") \
        < out.index(" left (1 cells, 0 warm start(s))") < out.index("[2/2]")
    timings = json.loads((bench / "timings.json").read_text())
    assert set(timings["cells"]["alfworld-sim"]) == {"grpo", "prover+contrast"}
    assert timings["warmstarts"]["alfworld-sim"] > 0


@pytest.mark.slow
def test_tiny_bench_writes_tables_skips_finished_cells_and_resumes(tiny_common, tmp_path, capsys):
    prover = {"name": "prover+contrast", "overrides": {"credit.samples": 2}}
    cfg = _write(tmp_path, tiny_common, methods=["grpo", prover, "prover+litellm"], out=str(tmp_path / "docs"))
    assert main(["bench", "--config", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "note: skipped 'prover+litellm': judge.model is not set" in out
    assert out.count(": done in ") == 2 and "[2/2] alfworld-sim · prover+contrast · seed 0" in out
    bench, docs = tmp_path / "bench", tmp_path / "docs"
    _check_estimates(out, bench)
    # one warm start for the (env, seed), shared: the cells built no model of their own
    assert len(list((bench / "shared" / "alfworld-sim" / "seed-0" / "models").glob("warmstart-*"))) == 1
    cells = {m: bench / "cells" / "alfworld-sim" / m / "seed-0" for m in ("grpo", "prover+contrast")}
    for cell in cells.values():
        assert not (cell / "models").exists()
        assert "/shared/alfworld-sim/seed-0/models/warmstart-" in yaml.safe_load((cell / "config.yaml").read_text())[
            "model"]["path"]
    histories = {m: [json.loads(ln) for ln in (c / "metrics.jsonl").read_text().splitlines()]
                 for m, c in cells.items()}
    finals = {m: h[-1] for m, h in histories.items()}
    # both cells start from the shared warm start: the second read the first's step-0 evaluation
    first, second = histories["grpo"][0], histories["prover+contrast"][0]
    assert "eval/cached" not in first and second["eval/cached"] == 1.0
    assert second["eval/success"] == first["eval/success"]
    assert len(list((bench / "shared" / "evals").glob("eval-*.json"))) == 1
    assert all(r["phase"] == "eval" and r["step"] == 1 for r in finals.values())
    rows = list(csv.DictReader((docs / "table1.csv").open()))
    assert [(r["method"], r["env"]) for r in rows] == [("grpo", "alfworld-sim"), ("grpo", "avg"),
                                                      ("prover+contrast", "alfworld-sim"), ("prover+contrast", "avg")]
    assert float(rows[0]["success_mean"]) == finals["grpo"]["eval/success"] and rows[0]["success_std"] == ""
    t2 = list(csv.DictReader((docs / "table2.csv").open()))
    assert [r["method"] for r in t2] == ["grpo", "prover+contrast"] and float(t2[0]["generated_tokens_per_step"]) > 0
    assert [r["method"] for r in csv.DictReader((docs / "table3.csv").open())] == ["prover+contrast"] * 2
    md = (docs / "results.md").read_text()
    assert "2 of 2 cells finished" in md and "skipped 'prover+litellm'" in md and "| grpo | " in md
    assert "![curves-alfworld-sim](curves-alfworld-sim.png)" in md
    png = (docs / "curves-alfworld-sim.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000

    before = _mtimes(bench)  # a rerun trains nothing and touches no cell
    assert main(["bench", "--config", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert out.count("finished earlier, skipped") == 2 and "done in" not in out
    assert "bench: nothing to train (2 cells already done)" in out
    assert _mtimes(bench) == before

    (docs / "results.md").unlink()  # the tables come back from the cells alone
    assert main(["bench", "--config", str(cfg), "--regen-only"]) == 0
    assert (docs / "results.md").read_text().split("## Table 1", 1)[1] == md.split("## Table 1", 1)[1]
    assert _mtimes(bench) == before

    # a cell stopped before its final evaluation resumes from its checkpoint; the other stays skipped
    metrics = cells["grpo"] / "metrics.jsonl"
    metrics.write_text("".join(ln + "\n" for ln in metrics.read_text().splitlines()[:-1]))
    assert main(["bench", "--config", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "grpo · seed 0: training 1 steps (resuming after step 1)" in out and out.count("finished earlier") == 1
    hist = [json.loads(ln) for ln in metrics.read_text().splitlines()]
    assert [(r["phase"], r["step"]) for r in hist] == [("eval", 0), ("train", 1), ("eval", 1)]

    # changed settings make a finished cell run again
    assert main(["bench", "--config", str(cfg), "methods=[grpo]", "common.learner.lr=0.002"]) == 0
    assert "settings changed since it ran; restarting it" in capsys.readouterr().out


@pytest.mark.slow
def test_budget_matched_cells_run_after_and_track_their_prover_cell(tiny_common, tmp_path, capsys):
    prover = {"name": "prover+contrast", "overrides": {"credit.samples": 2}}
    cfg = _write(tmp_path, tiny_common, methods=["budget-matched-grpo", prover], steps=2)
    assert main(["bench", "--config", str(cfg)]) == 0
    out = capsys.readouterr().out
    # the reference runs first although the matrix lists it second
    assert out.index("prover+contrast · seed 0: training") < out.index("budget-matched-grpo · seed 0: training")
    cells = tmp_path / "bench" / "cells" / "alfworld-sim"
    used = yaml.safe_load((cells / "budget-matched-grpo" / "seed-0" / "config.yaml").read_text())["credit"]
    assert used["budget_from"] == str(cells / "prover+contrast" / "seed-0" / "metrics.jsonl")
    lines = (cells / "budget-matched-grpo" / "seed-0" / "metrics.jsonl").read_text().splitlines()
    train = [json.loads(ln) for ln in lines if json.loads(ln)["phase"] == "train"]
    assert all(r["rollout/group_size"] >= 3 for r in train)  # never below the configured G (3 here)
    md = (tmp_path / "bench" / "results.md").read_text()
    assert "'budget-matched-grpo' matches the generated tokens of 'prover+contrast'" in md
    assert "budget-matched-grpo matches prover+contrast's generated tokens" in md and "(prover+contrast) |" in md
    assert ("- GRPO base of every GRPO-based method: norm=mean (centre only): budget-matched-grpo, prover+contrast."
            in md)
    assert "hidden state (Turn.state_key), which neither the agent nor an LLM judge sees: prover+contrast." in md


def test_a_budget_reference_must_be_a_method_of_the_matrix(tmp_path):
    bad = [{"name": "budget-matched-grpo", "match_budget_of": "prover+randum"}, "prover+random"]
    with pytest.raises(ConfigError, match="match_budget_of 'prover\\+randum' is not another method"):
        plan(BenchConfig(dir=str(tmp_path), envs=["alfworld-sim"], seeds=[0], methods=bad))
    # a method that names its own budget is not matched
    own = [{"name": "budget-matched-grpo", "overrides": {"credit.overhead": 0.5}}, "prover+random"]
    assert plan(BenchConfig(dir=str(tmp_path), envs=["alfworld-sim"], seeds=[0], methods=own)).budget_refs == {}


# -- the tables' numbers -----------------------------------------------------------------------------------

def _cell(method: str, env: str, seed: int, success: float, train: list[dict] = ()) -> CellResult:
    hist = [{"step": 0, "phase": "eval", "eval/success": 0.0}]
    hist += [{"step": k + 1, "phase": "train", **t} for k, t in enumerate(train)]
    hist.append({"step": 2, "phase": "eval", "eval/success": success})
    return CellResult(env, method, seed, hist, steps=2)


def test_table_numbers_from_hand_written_metrics(tmp_path):
    results = [
        _cell("grpo", "alf", 0, 0.4, [{"cost/rollout_tokens": 100, "cost/branch_tokens": 0, "time/step": 2.0},
                                      {"cost/rollout_tokens": 300, "time/step": 4.0}]),
        _cell("grpo", "alf", 1, 0.6, [{"cost/rollout_tokens": 200, "time/step": 6.0}]),
        _cell("grpo", "ws", 0, 0.2), _cell("grpo", "ws", 1, 0.8),
        _cell("prover+x", "alf", 0, 0.5, [
            {"cost/rollout_tokens": 100, "cost/branch_tokens": 20, "cost/judge_tokens": 50, "cost/judge_dollars": 0.01,
             "time/step": 1.0, "credit/valid_proposals": 2, "credit/accepted": 1, "credit/segment_turns": 1.5,
             "credit/delta": 0.1},
            {"cost/rollout_tokens": 300, "cost/branch_tokens": 40, "cost/judge_tokens": 150,
             "cost/judge_dollars": 0.03, "time/step": 3.0, "credit/valid_proposals": 1, "credit/accepted": 1,
             "credit/segment_turns": 3.0, "credit/delta": 0.4},
            {"cost/rollout_tokens": 200, "time/step": 2.0, "credit/valid_proposals": 0, "credit/accepted": 0}]),
    ]
    envs, methods = ["alf", "ws"], ["grpo", "prover+x"]
    t1 = {r["method"]: r for r in table1(results, methods, envs)}
    # grpo alf: 0.4, 0.6 -> mean 0.5, sample std sqrt((0.01 + 0.01) / 1) = 0.141421; the exact bootstrap of two
    # values a < b puts 1/4 on a, 1/2 on (a + b) / 2, 1/4 on b, so the 95% percentile CI is [a, b] = [0.4, 0.6]
    alf = t1["grpo"]["alf"]
    assert (alf.success.mean, alf.std, alf.success.n) == pytest.approx((0.5, 0.1414214, 2))
    assert (alf.success.lo, alf.success.hi, alf.success.method) == (0.4, 0.6, "exact")
    assert t1["grpo"]["ws"].std == pytest.approx(math.sqrt(0.09 + 0.09))  # 0.2, 0.8 around 0.5
    # per-seed averages (0.4 + 0.2) / 2 = 0.3 and (0.6 + 0.8) / 2 = 0.7 -> 0.5 ± sqrt(0.04 + 0.04), CI [0.3, 0.7]
    avg = t1["grpo"]["avg"]
    assert ((avg.success.mean, avg.std, avg.success.lo, avg.success.hi)
            == pytest.approx((0.5, math.sqrt(0.08), 0.3, 0.7)))
    px = t1["prover+x"]["alf"]
    assert (px.success.mean, px.std, px.success.lo) == (0.5, None, None)  # one seed: no CI
    # paired with grpo on seed 0 only: 0.5 - 0.4 = 0.1, one pair, no CI -> inconclusive
    assert (px.diff.diff.mean, px.diff.pairs, px.diff.verdict) == (pytest.approx(0.1), 1, "inconclusive")
    assert t1["grpo"]["alf"].diff is None  # the baseline is not compared with itself
    # tokens per step: prover+x (120 + 340 + 200) / 3 = 220, grpo ((100 + 300) / 2 + 200) / 2 = 200 -> 1.1
    assert px.tokens_vs_baseline == pytest.approx(1.1)
    assert t1["prover+x"]["avg"].success.n == 0  # no seed has both envs
    t2 = {(r["method"], r["env"]): r for r in table2(results, methods, envs)}
    assert set(t2) == {("grpo", "alf"), ("prover+x", "alf")}  # cells without train records have no costs
    # grpo alf: seed 0 (100 + 300) / 2 = 200 tokens and 3 s; seed 1: 200 and 6 s -> 200 tokens, 4.5 s
    assert (t2["grpo", "alf"]["generated_tokens"], t2["grpo", "alf"]["seconds"]) == pytest.approx((200.0, 4.5))
    p = t2["prover+x", "alf"]  # (120 + 340 + 200) / 3 generated; judge (50 + 150 + 0) / 3; (1 + 3 + 0) / 3 cents
    assert (p["generated_tokens"], p["branch_tokens"], p["judge_tokens"], p["judge_cents"], p["seconds"]) == \
        pytest.approx((220.0, 20.0, 200 / 3, 4 / 3, 2.0))
    t3_alf, t3_ws, t3 = table3(results, ["prover+x"], envs)
    assert (t3_alf["env"], t3_ws["env"], t3["env"], t3_ws["valid"]) == ("alf", "ws", "all", 0)
    assert t3["truth"] is False and t3["hit_rate"] is None  # no truth/* metrics in these cells
    # pooled: 2 of 3 valid accepted; length (2 * 1.5 + 1 * 3) / 3 = 2; Delta (2 * 0.1 + 1 * 0.4) / 3 = 0.2
    assert (t3["valid"], t3["accepted"], t3["acceptance"]) == pytest.approx((3, 2, 2 / 3))
    assert (t3["segment_turns"], t3["delta"]) == pytest.approx((2.0, 0.2))
    md = markdown_tables(results, methods, ["prover+x"], envs)
    assert "| grpo | 50.0 [40.0, 60.0] | 50.0 [20.0, 80.0] | 50.0 [30.0, 70.0] |" in md
    assert "| prover+x | 50.0 | – | – |" in md
    # x grpo: prover seed 0 generated 120 + 340 + 200 = 660 in all, grpo seed 0 100 + 300 = 400 -> 1.650
    assert "| prover+x | alf | 220 | 1.650 | – | 200 | 20 | 67 | 1.33 | 0.00 | 2.0 |" in md
    assert "| prover+x | alf | 50.0 | – | – | 3 | 2 | 66.7 | 2.00 | +0.200 | – | – | – | – | – |" in md
    assert "| prover+x | 50.0 | +10.0 | – | – | – | inconclusive (1) |" in md  # Table 1 by env, alf: one pair, no CI
    write_csvs(results, methods, ["prover+x"], envs, tmp_path)
    rows = list(csv.DictReader((tmp_path / "table3.csv").open()))
    assert [(r["method"], r["env"]) for r in rows] == [("prover+x", "alf"), ("prover+x", "ws"), ("prover+x", "all")]
    assert float(rows[2]["acceptance"]) == pytest.approx(2 / 3) and rows[1]["valid"] == "0.0"


def test_budget_matched_ratio_pairs_cells_by_seed():
    results = [_cell("prover+x", "alf", 0, 0.5, [{"cost/rollout_tokens": 100, "cost/branch_tokens": 20},
                                                 {"cost/rollout_tokens": 300, "cost/branch_tokens": 40}]),
               _cell("prover+x", "alf", 1, 0.5, [{"cost/rollout_tokens": 200, "cost/branch_tokens": 50}]),
               _cell("bm", "alf", 0, 0.5, [{"cost/rollout_tokens": 230}, {"cost/rollout_tokens": 200}]),
               _cell("bm", "alf", 1, 0.5, [{"cost/rollout_tokens": 275}])]
    [row] = [r for r in table2(results, ["prover+x", "bm"], ["alf"], {"bm": "prover+x"}) if r["method"] == "bm"]
    # seed 0: 430 / 460; seed 1: 275 / 250 -> mean (0.934783 + 1.1) / 2 = 1.017391
    assert row["matched_to"] == "prover+x"
    assert row["vs_matched"] == pytest.approx((430 / 460 + 275 / 250) / 2)
    md = markdown_tables(results, ["prover+x", "bm"], [], ["alf"], {"bm": "prover+x"})
    assert "| bm | alf | 245 | – | 1.017 (prover+x) |" in md  # per step: ((230 + 200) / 2 + 275) / 2 = 245


def test_bench_config_errors_are_one_line(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_bench_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="bench field 'seeds'"):
        load_bench_config(None, ["seeds=[]", "methods=[grpo]"])
    with pytest.raises(ConfigError, match="appears twice"):
        plan(load_bench_config(None, ["methods=[grpo,grpo]", f"dir={tmp_path}"]))


def test_processes_that_split_the_seeds_share_one_warm_start_and_one_cell_key(tmp_path):
    # two processes on seeds [0,1,2] and [3,4] (warmstart_seed=0) must plan the same cells as one on [0..4]:
    # the same shared warm start (seed 0) and the same settings keys, so a final run reuses every cell
    def keyed(**kw):
        bench = BenchConfig(dir=str(tmp_path), envs=["alfworld-sim"], methods=["grpo"], share_warmstart="env", **kw)
        return bench.shared_seed, {c.seed: c.key for c in plan(bench).cells}

    whole_seed, whole = keyed(seeds=[0, 1, 2, 3, 4])
    part_seed, part = keyed(seeds=[3, 4], warmstart_seed=0)
    assert whole_seed == part_seed == 0 and part == {s: whole[s] for s in (3, 4)}
    assert keyed(seeds=[3, 4])[0] == 3  # without it, the subset would build a warm start of its own
    # the seeds reversed (a second process working from the other end) keep the smallest seed's warm start
    assert keyed(seeds=[4, 3, 2, 1, 0]) == (whole_seed, whole)


def test_a_config_field_added_with_its_default_keeps_every_cell_key():
    # archived cells are matched by key on a fresh clone (--regen-only): a release that adds a setting whose
    # default keeps today's behaviour must not turn every finished cell stale; a value set off it must
    from pydantic import Field, create_model

    from prover.bench.matrix import settings_hash
    from prover.config import TrainConfig

    grown = create_model("GrownConfig", __base__=TrainConfig,
                         added=(int, Field(0, description="a setting a later release adds")))
    tree = {"learner": {"lr": 2e-5}, "rollout": {"group_size": 4}}
    today = settings_hash(TrainConfig.model_validate(tree), "env/0")
    assert settings_hash(grown.model_validate(tree), "env/0") == today
    assert settings_hash(grown.model_validate({**tree, "added": 1}), "env/0") != today
    assert settings_hash(TrainConfig.model_validate(tree), "env/1") != today


def test_a_default_that_resolves_by_model_kind_keys_cells_by_its_value(tmp_path):
    # warmstart.lr unset means 1e-3 for the tiny model (config.TINY_WARMSTART_LR's documented value): a cell
    # finished with lr written out as 1e-3 is the same cell; another lr is not
    def key(*extra):
        bench = load_bench_config(None, ["methods=[grpo]", "seeds=[0]", f"dir={tmp_path}", *extra])
        return plan(bench).cells[0].key

    unset = key()
    assert key("common={warmstart.lr: 0.001}") == unset
    assert key("common={warmstart.lr: 0.002}") != unset
