"""The tutorial notebook (examples/notebooks/): it runs top to bottom, its two files say the same thing, and the
committed .ipynb holds no outputs.

``tutorial.py`` (jupytext's percent format) is the source of truth and ``tutorial.ipynb`` its pairing, kept
for GitHub to render; after editing either, ``jupytext --sync examples/notebooks/tutorial.py`` brings the other
in line, and ``jupytext --to ipynb examples/notebooks/tutorial.py`` rewrites the .ipynb without outputs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.figures import notebook as notebook_page

NOTEBOOKS = Path(__file__).resolve().parents[1] / "examples" / "notebooks"
SOURCE, PAIRED = NOTEBOOKS / "tutorial.py", NOTEBOOKS / "tutorial.ipynb"
FIX = "run `jupytext --sync examples/notebooks/tutorial.py`"


def _cells(path: Path) -> list[tuple[str, str]]:
    jupytext = pytest.importorskip("jupytext")
    return [(c.cell_type, c.source) for c in jupytext.read(path).cells]


def test_the_ipynb_and_the_py_hold_the_same_cells():
    py, ipynb = _cells(SOURCE), _cells(PAIRED)
    assert len(py) == len(ipynb), f"{SOURCE.name} has {len(py)} cells, {PAIRED.name} {len(ipynb)}: {FIX}"
    for i, (a, b) in enumerate(zip(py, ipynb)):
        assert a == b, f"cell {i} differs between {SOURCE.name} and {PAIRED.name}: {FIX}"


def test_the_committed_ipynb_has_no_outputs():
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(PAIRED, as_version=4)
    nbformat.validate(nb)
    ran = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count)]
    assert not ran, (f"{PAIRED.name} keeps outputs in cells {ran}; strip them with "
                     "`jupytext --to ipynb examples/notebooks/tutorial.py`")


@pytest.mark.slow  # trains the tiny model several times (about a minute of one core in the small setting)
def test_the_notebook_runs_top_to_bottom(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    runs = tmp_path / "runs"
    monkeypatch.setenv("PROVER_TUTORIAL_DIR", str(runs))  # the kernel inherits it: runs go under tmp_path
    monkeypatch.setenv("PROVER_TUTORIAL_SMALL", "1")  # the same cells, shorter runs
    nb = nbformat.read(PAIRED, as_version=4)
    # a cell that raises fails the test with its traceback (nbclient's CellExecutionError)
    nbclient.NotebookClient(nb, timeout=900, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert (runs / "prover-contrast" / "groups.jsonl").is_file()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    # rendered as the site's page is (docs/tutorial.md): every code cell, and the learning curves as a PNG
    page = notebook_page.render(nb, "")
    assert notebook_page.code_blocks(page.markdown) == [c.source.strip() for c in nb.cells if c.cell_type == "code"]
    assert len(page.images) == 1 and next(iter(page.images.values())).startswith(b"\x89PNG")
    assert "judge proposals per step: [" in page.markdown and "prover - grpo over 3 seeds" in page.markdown


def test_the_site_shows_the_notebooks_current_code():
    """docs/tutorial.md, the notebook as it last ran, shows the code the notebook holds now (a notebook edited
    without `python -m benchmarks.figures.notebook --render` fails here)."""
    pytest.importorskip("nbformat")
    assert notebook_page.stale() is None
