"""The finished cells' records beside the tables they made, so a fresh clone can rebuild the tables.

Every report also copies each finished cell's ``cell.json`` (its settings key) and ``metrics.jsonl`` (every
number the tables read), the pilot's cells included (the power section reads them, ``headline.py``), to
``<out>/cells/<env>/<row>/seed-<s>/``, the layout of the bench folder itself; checkpoints and groups.jsonl stay
behind (megabytes per cell, and nothing in a table reads them), as does ``timings.json`` (it prices cells not
yet run, on the machine that ran the others). So

    prover bench --config <matrix> --regen-only dir=<out>

rebuilds results.md and the CSVs from the archive alone, on any machine. A cell is archived as soon as it
finishes (``archive_cell``), so it can be committed while the others train; and a bench folder that lacks a cell
the archive holds finished under the same settings takes the archive's record (``restore_cell``; the pilot's
cells too, ``restore_pilot``, for the power plan): the same command on a fresh clone, or on another machine,
trains only what nobody has committed.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from prover.bench.headline import pilot_plan
from prover.bench.matrix import BenchConfig, Cell, Plan, cell_folder
from prover.bench.tables import CELL_FILE, is_finished

ARCHIVED = (CELL_FILE, "metrics.jsonl")  # the settings key, and every number a table reads


def _archived(cell: Cell, bench: BenchConfig) -> Path:
    into = bench.model_copy(update={"dir": str(bench.out_dir)})
    return cell_folder(into, cell.env, cell.method.row, cell.seed)


def _in_place(bench: BenchConfig) -> bool:
    """The bench folder is the out folder (a rebuild from the archive): nothing to copy either way."""
    return Path(bench.dir).resolve() == bench.out_dir.resolve()


def _copy_records(source: Path, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    for name in ARCHIVED:
        shutil.copyfile(source / name, dest / name)
    return dest


def archive_cell(cell: Cell, bench: BenchConfig) -> Path | None:
    """Copy a finished cell's records into ``<out>/cells``; the folder written, or None."""
    if _in_place(bench) or not is_finished(cell):
        return None
    return _copy_records(cell.dir, _archived(cell, bench))


def in_archive(cell: Cell, bench: BenchConfig) -> bool:
    """Whether ``<out>/cells`` holds ``cell`` finished under the same settings (and is not the bench folder)."""
    return not _in_place(bench) and is_finished(replace(cell, dir=_archived(cell, bench)))


def restore_cell(cell: Cell, bench: BenchConfig) -> bool:
    """Copy the archive's record of ``cell`` into the bench folder when the folder has no history of it and the
    archive holds it finished under the same settings; True when it did."""
    if any((cell.dir / name).exists() for name in ARCHIVED) or not in_archive(cell, bench):
        return False
    _copy_records(_archived(cell, bench), cell.dir)
    return True


def restore_pilot(plan: Plan) -> int:
    """``restore_cell`` for the matrix's pilot cells (its ``power`` section's), which no run of the reported seeds
    trains but whose records the power plan reads from the bench folder: a fresh folder that continues a
    committed matrix knows its pilot. How many it took."""
    pilot = pilot_plan(plan.bench).cells if plan.bench.power else []
    return sum(restore_cell(cell, plan.bench) for cell in pilot)


def archive_cells(plan: Plan) -> list[Path]:
    """Copy the finished cells' records into ``<out>/cells``; the folders written (none when the bench folder
    is the out folder, as in a rebuild from the archive)."""
    # the pilot cells too: the power section of a rebuild reads them
    pilot = pilot_plan(plan.bench).cells if plan.bench.power else []
    return [dest for cell in [*plan.cells, *pilot] if (dest := archive_cell(cell, plan.bench)) is not None]
