"""The finished cells' records beside the tables they made, so a fresh clone can rebuild the tables.

Every report also copies each finished cell's ``cell.json`` (its settings key) and ``metrics.jsonl`` (every
number the tables read), the pilot's cells included (the power section reads them, ``headline.py``), to
``<out>/cells/<env>/<row>/seed-<s>/``, the layout of the bench folder itself; checkpoints and groups.jsonl stay
behind (megabytes per cell, and nothing in a table reads them), as does ``timings.json`` (it prices cells not
yet run, on the machine that ran the others). So

    prover bench --config <matrix> --regen-only dir=<out>

rebuilds results.md and the CSVs from the archive alone, on any machine.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from prover.bench.headline import pilot_plan
from prover.bench.matrix import Plan, cell_folder
from prover.bench.tables import CELL_FILE, is_finished

ARCHIVED = (CELL_FILE, "metrics.jsonl")  # the settings key, and every number a table reads


def archive_cells(plan: Plan) -> list[Path]:
    """Copy the finished cells' records into ``<out>/cells``; the folders written (none when the bench folder
    is the out folder, as in a rebuild from the archive)."""
    bench = plan.bench
    if Path(bench.dir).resolve() == bench.out_dir.resolve():
        return []
    into = bench.model_copy(update={"dir": str(bench.out_dir)})
    # the pilot cells too: the power section of a rebuild reads them
    pilot = pilot_plan(bench).cells if bench.power else []
    written = []
    for cell in [*plan.cells, *pilot]:
        if not is_finished(cell):
            continue
        dest = cell_folder(into, cell.env, cell.method.row, cell.seed)
        dest.mkdir(parents=True, exist_ok=True)
        for name in ARCHIVED:
            shutil.copyfile(cell.dir / name, dest / name)
        written.append(dest)
    return written
