"""The documentation's figures are drawn from their data: forest plots (a bench's paired differences, the judges'
hit rate minus chance), the stacked bar of docs/perf.md's phases, the real-model learning curves and the
rendered notebook. Each test draws a small hand-made dataset and reads the positions back from the SVG against
its own axis; every expected number is worked out by hand in the comments."""

from __future__ import annotations

import base64
import itertools
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from benchmarks.figures import bench_forests, curves, judges
from benchmarks.figures import notebook as notebook_page
from benchmarks.perf import phases
from prover.bench.forest import forest_rows, forest_svg
from prover.bench.tables import CellResult
from prover.commands.svgchart import BETTER, NEITHER, WORSE, ForestRow, StackedBar, forest_chart, stacked_bars

SVG = "{http://www.w3.org/2000/svg}"


def _elements(svg: str, tag: str, cls: str | None = None) -> list[ET.Element]:
    return [e for e in ET.fromstring(svg).iter(f"{SVG}{tag}") if cls is None or e.get("class") == cls]


def _axis(svg: str):
    """The x position of a value, from two of the chart's own tick labels (so a test reads the axis as a
    reader does, not the chart's layout constants)."""
    ticks = [(float(t.text), float(t.get("x"))) for t in _elements(svg, "text", "chart-tick")]
    (v0, x0), (v1, x1) = ticks[0], ticks[-1]
    return lambda v: x0 + (v - v0) * (x1 - x0) / (v1 - v0)


def _rows(svg: str) -> dict[str, dict]:
    """Per forest row (by its label): the dot's x, the interval's ends (None without one) and the color."""
    out = {}
    for g in _elements(svg, "g", "forest-row"):
        dot = next(e for e in g.iter(f"{SVG}circle") if e.get("class") == "estimate")
        line = next((e for e in g.iter(f"{SVG}line") if e.get("class") == "interval"), None)
        label = next(e for e in g.iter(f"{SVG}text") if e.get("class") == "chart-label").text
        out[label] = {"dot": float(dot.get("cx")), "color": dot.get("fill"),
                      "ends": None if line is None else (float(line.get("x1")), float(line.get("x2")))}
    return out


# -- forest plots -----------------------------------------------------------------------------------------------

def test_forest_chart_puts_each_dot_and_interval_where_its_axis_says():
    rows = [ForestRow("env-a"), ForestRow("across", 2.0, -1.0, 5.0, "n"), ForestRow("below", -3.0, -4.0, -2.0),
            ForestRow("above", 1.0, 0.5, 1.5), ForestRow("one pair", 4.0)]
    svg = forest_chart("t", rows, "points")
    x, drawn = _axis(svg), _rows(svg)
    assert set(drawn) == {"across", "below", "above", "one pair"}  # the heading row draws no dot
    for row in rows[1:]:
        got = drawn[row.label]
        assert got["dot"] == pytest.approx(x(row.mean), abs=0.05)
        if row.lo is None:
            assert got["ends"] is None
        else:
            assert got["ends"] == pytest.approx((x(row.lo), x(row.hi)), abs=0.05)
    assert [drawn[k]["color"] for k in ("across", "below", "above", "one pair")] == [NEITHER, WORSE, BETTER, NEITHER]
    zero = next(e for e in _elements(svg, "line", "chart-zero"))
    assert float(zero.get("x1")) == pytest.approx(x(0.0), abs=0.05)


def _cell(env: str, method: str, seed: int, final: float, steps: int = 4) -> CellResult:
    history = [{"phase": "eval", "step": 0, "eval/success": 0.1},
               {"phase": "eval", "step": steps, "eval/success": final}]
    return CellResult(env, method, seed, history, steps)


def test_a_bench_forest_row_is_the_paired_t_interval_by_hand():
    # grpo 0.25, 0.5, 0.25 and gigpo 0.375, 0.75, 0.625 on seeds 0-2: differences 0.125, 0.25, 0.375; mean 0.25,
    # sd 0.125, SE 0.125 / sqrt(3) = 0.0721688, t(0.975, 2) = 4.302653 -> 0.25 +- 0.310517 = [-0.060517, 0.560517]
    results = [_cell("e", "grpo", s, v) for s, v in enumerate([0.25, 0.5, 0.25])]
    results += [_cell("e", "gigpo", s, v) for s, v in enumerate([0.375, 0.75, 0.625])]
    # spo-tree finished seeds 0 and 1 only, -0.125 on both: two pairs, no spread -> the interval is the point
    results += [_cell("e", "spo-tree", s, v) for s, v in enumerate([0.125, 0.375])]
    results += [_cell("f", "grpo", 0, 0.5), _cell("f", "gigpo", 0, 0.75)]  # one pair: a dot, no interval
    rows = forest_rows(results, ["grpo", "gigpo", "spo-tree"], ["e", "f"], "grpo")
    assert [r.label for r in rows] == ["e", "gigpo", "spo-tree", "f", "gigpo"]
    gigpo, spo, lone = rows[1], rows[2], rows[4]
    assert (gigpo.mean, gigpo.lo, gigpo.hi) == pytest.approx((25.0, -6.0517, 56.0517), abs=1e-3)
    assert gigpo.note == "+25.0 [-6.1, +56.1], 3 pairs"
    assert (spo.mean, spo.lo, spo.hi, spo.note) == (pytest.approx(-12.5), pytest.approx(-12.5), pytest.approx(-12.5),
                                                     "-12.5 [-12.5, -12.5], 2 pairs")
    assert (lone.mean, lone.lo, lone.hi, lone.note) == (pytest.approx(25.0), None, None, "+25.0, 1 pair")
    svg = forest_svg(results, ["grpo", "gigpo", "spo-tree"], ["e"], "grpo")
    x, drawn = _axis(svg), _rows(svg)
    assert drawn["gigpo"]["ends"] == pytest.approx((x(-6.0517), x(56.0517)), abs=0.05)
    assert forest_svg(results, ["gigpo"], ["e"], "budget-matched-grpo") is None  # nothing to pair with


def test_prover_bench_writes_the_forest_into_results_md(tmp_path):
    from prover.bench.matrix import BenchConfig, plan
    from prover.bench.runner import write_reports

    p = plan(BenchConfig(dir=str(tmp_path / "bench"), out=str(tmp_path / "out"), envs=["alfworld-sim"],
                         seeds=[0, 1], steps=4, methods=["grpo", "gigpo"]))
    for cell in p.cells:
        cell.dir.mkdir(parents=True)
        (cell.dir / "cell.json").write_text(json.dumps({"key": cell.key}))
        final = {"grpo": 0.25, "gigpo": 0.5}[cell.method.row] + 0.125 * cell.seed * (cell.method.row == "gigpo")
        (cell.dir / "metrics.jsonl").write_text(json.dumps({"phase": "eval", "step": 4, "eval/success": final}) + "\n")
    write_reports(p, "prover bench", echo=lambda s: None)
    md = (tmp_path / "out" / "results.md").read_text()
    assert "## Paired differences against grpo\n\n![Forest plot: differences against grpo](forest.svg)" in md
    assert md.index("## Paired differences") < md.index("## Table 1")
    # gigpo - grpo: 0.25 and 0.375 -> mean 0.3125; sd 0.088388, SE 0.0625, t(0.975, 1) = 12.7062 -> +- 0.79414
    svg = (tmp_path / "out" / "forest.svg").read_text()
    x, drawn = _axis(svg), _rows(svg)
    assert drawn["gigpo"]["dot"] == pytest.approx(x(31.25), abs=0.05)
    assert drawn["gigpo"]["ends"] == pytest.approx((x(31.25 - 79.414), x(31.25 + 79.414)), abs=0.1)


def test_a_forest_from_a_table1_csv_reads_its_bootstrap_columns(tmp_path):
    table = tmp_path / "table1.csv"
    table.write_text("method,env,baseline,diff_mean,diff_lo,diff_hi,n_pairs\n"
                     "grpo,pivot-sim,grpo,,,,\n"
                     "gigpo,pivot-sim,grpo,0.02,-0.01,0.04,5\n"
                     "gigpo,avg,grpo,0.02,-0.01,0.04,5\n")
    rows, envs, baseline = bench_forests.table_rows(table)
    assert (envs, baseline) == (["pivot-sim"], "grpo")
    assert [(r.label, r.mean, r.lo, r.hi, r.note) for r in rows] == [
        ("gigpo", pytest.approx(2.0), pytest.approx(-1.0), pytest.approx(4.0), "+2.0 [-1.0, +4.0], 5 pairs")]


# -- the judges: hit rate minus chance ------------------------------------------------------------------------

JUDGE_TABLE = """### defaults: one setting

| judge | proposals | mean len. | hit - chance [95% t] |
|---|---|---|---|
| contrast | 5 of 5 | 1.00 | +50.0 [+1.0, +99.0] |

### pooled: 2 settings, each group counted once

10 judged groups; pivotal share 23.4%

| judge | proposals | mean len. | hit rate [95% Wilson] | hit - chance [95% t] |
|---|---|---|---|---|
| contrast | 10 of 10 | 1.10 | 50.0% [33.2, 66.8] | +23.2 [+5.5, +40.9] |
| some llm | 4 of 10 | 3.00 | 50.0% [33.2, 66.8] | -2.9 [-19.0, +13.2] |
| lone | 1 of 10 | 2.00 | 100.0% [20.7, 100.0] | - |
"""


def test_the_judges_figure_reads_the_pooled_table(tmp_path):
    source = tmp_path / "judge_truth_llm.md"
    source.write_text(JUDGE_TABLE)
    rows = judges.judge_rows(judges.section_table(source.read_text(), "pooled"))
    assert [(r.label, r.mean, r.lo, r.hi) for r in rows] == [("contrast", 23.2, 5.5, 40.9),
                                                             ("some llm", -2.9, -19.0, 13.2)]
    assert rows[1].note == "-2.9 [-19.0, +13.2] (4 of 10, len. 3.00)"
    svg = judges.figure(source)
    x, drawn = _axis(svg), _rows(svg)
    assert drawn["contrast"]["ends"] == pytest.approx((x(5.5), x(40.9)), abs=0.05)
    assert drawn["contrast"]["color"] == BETTER and drawn["some llm"]["color"] == NEITHER
    with pytest.raises(SystemExit, match="no '### nowhere:' section"):
        judges.section_table(JUDGE_TABLE, "nowhere")
    source.write_text(JUDGE_TABLE.replace("+23.2 [+5.5, +40.9]", "about 23"))
    with pytest.raises(SystemExit, match="'contrast': 'hit - chance' cell 'about 23'"):
        judges.figure(source)


# -- docs/perf.md: the phases as stacked bars ------------------------------------------------------------------

def test_the_phase_bars_are_each_phases_share_of_the_wall_time():
    main = {"runs": [{"wall_s": 999.0, "phases": {"RL: learner": 1.0}},  # an earlier run: not drawn
                     {"wall_s": 100.0, "phases": {"build tiny policy": 10.0, "warm start: SFT": 50.0,
                                                  "RL: rollout": 30.0}}]}
    # the phases leave 100 - 90 = 10 s: "other"
    assert phases.main_bar(main).parts == {"other": 10.0, "build the policy": 10.0, "warm start: SFT": 50.0,
                                           "rollout": 30.0}
    # two steps: rollout 6 s, learner 2 s, step 10 s -> per step 3, 1, and 5 - 4 = 1 s of other
    step = phases.step_bar("s", {"rollout": 6.0, "credit": 0.0, "learner": 2.0, "sync": 0.0, "step": 10.0}, 2)
    assert step.parts == {"rollout": 3.0, "credit": 0.0, "learner": 1.0, "sync": 0.0, "other": 1.0}
    assert step.note == "5 s"
    svg = stacked_bars("t", [phases.main_bar(main), step], phases.PARTS, "share")
    parts = _elements(svg, "rect", "part")
    label = "main job (tiny model), whole run, "
    first = [p for p in parts if p.find(f"{SVG}title").text.startswith(label)]  # "<bar>, <part>: <value> (<share>)"
    widths = {p.find(f"{SVG}title").text[len(label):].rsplit(": ", 1)[0]: float(p.get("width")) for p in first}
    plot = sum(widths.values())
    assert {k: w / plot for k, w in widths.items()} == pytest.approx(
        {"build the policy": 0.1, "warm start: SFT": 0.5, "rollout": 0.3, "other": 0.1}, abs=1e-3)
    # drawn left to right in the order of PARTS, each starting where the one before ended
    xs = [(float(p.get("x")), float(p.get("width"))) for p in first]
    assert all(abs(a + w - b) < 0.02 for (a, w), (b, _) in itertools.pairwise(xs))
    ticks = {t.text: float(t.get("x")) for t in _elements(svg, "text", "chart-tick")}
    assert xs[0][0] == pytest.approx(ticks["0%"], abs=0.05) and plot == pytest.approx(ticks["100%"] - ticks["0%"])
    assert [b.label for b in phases.bars({"main": main})] == ["main job (tiny model), whole run"]


def test_stacked_bars_leave_out_empty_parts():
    svg = stacked_bars("t", [StackedBar("b", {"x": 1.0, "y": 0.0})], ["x", "y"], "share")
    assert len(_elements(svg, "rect", "part")) == 1


# -- docs/pretrained-policy.md: learning curves ----------------------------------------------------------------

def test_the_learning_curves_plot_each_seeds_records(tmp_path):
    for seed, values in ((0, (0.25, 0.5, 0.75)), (1, (0.0, 0.5, 1.0))):
        cell = tmp_path / f"seed-{seed}"
        cell.mkdir()
        records = [{"phase": "eval", "step": 0, "eval/success": values[0]},
                   {"phase": "train", "step": 1, "rollout/success": 0.125},  # logged again on resume: the last counts
                   {"phase": "train", "step": 1, "rollout/success": values[1]},
                   {"phase": "train", "step": 2, "rollout/success": values[2]},
                   {"phase": "eval", "step": 2, "eval/success": values[2]}]
        (cell / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert curves.seed_curves(tmp_path / "seed-0") == ([(1, 0.5), (2, 0.75)], [(0, 0.25), (2, 0.75)])
    svg = curves.figure(tmp_path)
    dots = {c.find(f"{SVG}title").text: float(c.get("cy")) for c in _elements(svg, "circle")}
    assert set(dots) == {"seed 0: step 1, 0.5", "seed 0: step 2, 0.75", "seed 1: step 1, 0.5", "seed 1: step 2, 1",
                         "seed 0: step 0, 0.25", "seed 1: step 0, 0"}
    # y runs from 0 (bottom) to 1 (top) in both panels: 0.5 halfway between 0 and 1, 0.25 a quarter up
    zero, one = dots["seed 1: step 0, 0"], dots["seed 1: step 2, 1"]
    assert dots["seed 0: step 0, 0.25"] == pytest.approx(zero + 0.25 * (one - zero), abs=0.1)
    assert dots["seed 1: step 1, 0.5"] == pytest.approx(zero + 0.5 * (one - zero), abs=0.1)
    with pytest.raises(SystemExit, match="no seed"):
        curves.figure(tmp_path / "nothing")


# -- the notebook's page -----------------------------------------------------------------------------------------

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n a plot").decode()


def _notebook(*cells: dict) -> dict:
    return {"cells": list(cells), "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def test_the_notebook_page_shows_code_outputs_and_images():
    nb = _notebook(
        {"cell_type": "markdown", "source": "# Title\n\nSee [plugins](../../docs/plugins.md) and [web](https://x.y)."},
        {"cell_type": "code", "source": "print(1)\nplot()", "outputs": [
            {"output_type": "stream", "name": "stdout",
             "text": "\x1b[1mone\x1b[0m\n[2026-12-06 02:23:26,710] [WARNING] [a.py:1:f] noise\n"},
            {"output_type": "stream", "name": "stderr", "text": "a warning\n"},
            {"output_type": "display_data", "data": {"text/plain": "progress 3/3"}, "metadata": {}},
            {"output_type": "display_data", "data": {"image/png": PNG, "text/plain": "<Figure>"}, "metadata": {}},
            {"output_type": "stream", "name": "stdout", "text": "two\n"}]},
        {"cell_type": "code", "source": "x = 1", "outputs": []})
    page = notebook_page.render(nb, "_ran once_")
    assert page.markdown == (
        "# Title\n\nSee [plugins](plugins.md) and [web](https://x.y).\n\n_ran once_\n\n"
        "```python\nprint(1)\nplot()\n```\n\n```text\none\nprogress 3/3\n```\n\n"
        "![output of cell 2](img/tutorial-cell-2-1.png)\n\n```text\ntwo\n```\n\n```python\nx = 1\n```\n")
    assert page.images == {"tutorial-cell-2-1.png": base64.b64decode(PNG)}
    assert notebook_page.code_blocks(page.markdown) == ["print(1)\nplot()", "x = 1"]


def test_the_notebook_page_refuses_a_failed_cell_and_a_link_out_of_the_site():
    failed = {"cell_type": "code", "source": "1 / 0", "outputs": [
        {"output_type": "error", "ename": "ZeroDivisionError", "evalue": "division by zero", "traceback": []}]}
    with pytest.raises(SystemExit, match="a cell raised ZeroDivisionError"):
        notebook_page.render(_notebook(failed), "")
    with pytest.raises(SystemExit, match="markdown cell 1 links to '../../README.md', outside docs/"):
        notebook_page.render(_notebook({"cell_type": "markdown", "source": "[r](../../README.md)"}), "")


def test_the_notebook_page_check_compares_the_code(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    notebook = tmp_path / "t.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("a = 1"), nbformat.v4.new_code_cell("b = 2")])
    nbformat.write(nb, notebook)
    page = tmp_path / "tutorial.md"
    page.write_text(notebook_page.render(nb, "").markdown)
    assert notebook_page.stale(page, notebook) is None
    nb.cells[1].source = "b = 3"
    nbformat.write(nb, notebook)
    assert notebook_page.stale(page, notebook).endswith("code cell 2 is not the notebook's")


def test_the_committed_figures_are_small_and_current():
    from benchmarks.figures.docs import figures, stale

    drawn = {path: draw() for path, draw in figures().items()}
    assert not stale(drawn), "run `python -m benchmarks.figures.docs --render`"
    pngs = sorted(Path(notebook_page.IMAGES).glob(f"{notebook_page.IMAGE_PREFIX}*.png"))
    for path in [*drawn, phases.FIGURE, *pngs]:
        assert path.stat().st_size < 150_000, f"{path} is over 150 KB"
