"""`prover bench` without matplotlib: a note before any cell trains (with an install command that works from a
source checkout), and the tables are written all the same; a plot that fails costs only its curve."""

from __future__ import annotations

import sys

import pytest
import yaml

from conftest import TINY_RUN
from prover.cli import main


def _matrix(tmp_path):
    common = {k: yaml.safe_load(v) for k, v in (o.split("=", 1) for o in TINY_RUN)}
    tree = {"dir": str(tmp_path / "bench"), "out": str(tmp_path / "docs"), "envs": ["alfworld-sim"], "seeds": [0],
            "steps": 1, "methods": ["grpo"], "common": common}
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


@pytest.mark.slow
def test_bench_without_matplotlib_says_so_first_and_still_writes_the_tables(tmp_path, monkeypatch, capsys):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    assert main(["bench", "--config", str(_matrix(tmp_path))]) == 0
    out = capsys.readouterr().out.splitlines()
    notes = [i for i, line in enumerate(out) if line.startswith("note: learning curves skipped")]
    trains = [i for i, line in enumerate(out) if ": training " in line]
    assert notes and trains and notes[0] < trains[0], out  # told before the first cell trains
    assert "pip install -e '.[bench]'" in out[notes[0]]
    docs = tmp_path / "docs"
    assert (docs / "table1.csv").is_file() and not list(docs.glob("curves-*.png"))
    md = (docs / "results.md").read_text()
    assert "learning curves skipped: matplotlib is not installed" in md and "## Table 1" in md


def test_a_curve_that_fails_to_draw_costs_only_that_curve(tmp_path, monkeypatch):
    from prover.bench import plots
    from prover.bench.runner import draw_curves
    from prover.bench.tables import CellResult

    def broken(*args, **kwargs):
        raise RuntimeError("no usable backend\nsecond line")

    monkeypatch.setattr(plots, "plot_env", broken)
    result = CellResult("alfworld-sim", "grpo", 0, [{"step": 0, "phase": "eval", "eval/success": 0.5}], steps=0)
    paths, notes = draw_curves([result], ["grpo"], ["alfworld-sim"], tmp_path)
    assert paths == [] and notes == ["learning curve of alfworld-sim skipped: RuntimeError: no usable backend "
                                     "second line"]
