"""How long a bench will take: measured timings kept in ``<dir>/timings.json``, and the estimate from them.

The file holds, per env and method, each seed's last measured training (wall seconds and the train steps
it ran, evaluations included), and per env the seconds of its last warm start. It is rewritten atomically
after every finished cell and warm start, so a stopped bench keeps what it measured, under a lock, so two
benches on one folder keep both their entries.

The estimate: the steps every unfinished cell has left (a finished cell costs 0; a resumable one only its
remaining steps) times its (env, method)'s seconds per step, plus each warm start not yet built. An (env,
method) never measured borrows the mean rate of its env's measured methods, or else of every measured
one; a warm start never measured borrows the mean of the measured ones.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prover.bench.archive import in_archive
from prover.bench.matrix import Cell, Plan, warmstart_folder
from prover.bench.tables import is_finished, read_history, started_key
from prover.rundir.run import FileLock
from prover.system.files import write_atomic

FILE = "timings.json"


def path(bench_dir: str | Path) -> Path:
    return Path(bench_dir) / FILE


def load(bench_dir: str | Path) -> dict[str, Any]:
    """The timings so far; an unreadable file counts as nothing measured (it is only an estimate)."""
    try:
        data = json.loads(path(bench_dir).read_text())
    except (OSError, ValueError):
        return {"cells": {}, "warmstarts": {}}
    if not isinstance(data, dict):
        return {"cells": {}, "warmstarts": {}}
    return {"cells": data.get("cells") or {}, "warmstarts": data.get("warmstarts") or {}}


def _save(bench_dir: str | Path, data: dict[str, Any]) -> None:
    path(bench_dir).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path(bench_dir), json.dumps(data, indent=1, sort_keys=True) + "\n")


def _lock(bench_dir: str | Path) -> FileLock:
    """Held while the file is read and rewritten: two benches on one folder would drop each other's entries."""
    return FileLock(Path(bench_dir) / ".timings.lock")


def record_cell(bench_dir: str | Path, env: str, method: str, seed: int, seconds: float, steps: int) -> None:
    """One cell's training: ``steps`` train steps (with their evaluations) in ``seconds``."""
    if steps <= 0:
        return  # nothing per step to learn from
    with _lock(bench_dir):
        data = load(bench_dir)
        data["cells"].setdefault(env, {}).setdefault(method, {})[str(seed)] = {"seconds": seconds, "steps": steps}
        _save(bench_dir, data)


def record_warmstart(bench_dir: str | Path, env: str, seconds: float) -> None:
    with _lock(bench_dir):
        data = load(bench_dir)
        data["warmstarts"][env] = seconds
        _save(bench_dir, data)


def rates(data: dict[str, Any]) -> dict[tuple[str, str], float]:
    """Seconds per train step of every measured (env, method), over its seeds' steps."""
    out = {}
    for env, methods in data["cells"].items():
        for method, seeds in methods.items():
            secs = sum(float(s.get("seconds", 0.0)) for s in seeds.values())
            steps = sum(int(s.get("steps", 0)) for s in seeds.values())
            if steps > 0:
                out[env, method] = secs / steps
    return out


@dataclass
class Estimate:
    seconds: float = 0.0
    cells: int = 0  # cells left to train
    steps: int = 0  # train steps they have left
    finished: int = 0  # cells finished earlier: cost 0
    warmstarts: int = 0  # warm starts still to build
    measured: bool = False  # some cell's seconds per step stood behind the number
    borrowed: list[str] = field(default_factory=list)  # what no timing of its own priced


def steps_left(cell: Cell) -> int:
    """A cell's train steps still to run: all of them, or after its last logged step when it will resume."""
    if started_key(cell) != cell.key:
        return cell.config.steps
    done = max((r["step"] for r in read_history(cell.dir) if r.get("phase") == "train"), default=0)
    return max(0, cell.config.steps - done)


def _price(rate: dict[tuple[str, str], float], env: str, method: str) -> float | None:
    if (env, method) in rate:
        return rate[env, method]
    same_env = [v for (e, _), v in rate.items() if e == env]
    return statistics.fmean(same_env or rate.values()) if rate else None


def estimate(plan: Plan, cells: list[Cell] | None = None) -> Estimate:
    """The time ``cells`` (default: every cell of the plan) still need, from the bench's timings."""
    data = load(plan.bench.dir)
    rate, est = rates(data), Estimate()
    builds: dict[Path, str] = {}
    for cell in plan.cells if cells is None else cells:
        if is_finished(cell) or in_archive(cell, plan.bench):  # an archived record is taken, not trained
            est.finished += 1
            continue
        left = steps_left(cell)
        est.cells, est.steps = est.cells + 1, est.steps + left
        folder = warmstart_folder(plan.bench, cell)
        if folder is not None and not any((folder / "models").glob("warmstart-*")):
            builds[folder] = cell.env
        per_step = _price(rate, cell.env, cell.method.row)
        if per_step is not None:
            est.seconds += left * per_step
            if (cell.env, cell.method.row) not in rate and f"{cell.env} · {cell.method.row}" not in est.borrowed:
                est.borrowed.append(f"{cell.env} · {cell.method.row}")
    warm = {e: float(s) for e, s in data["warmstarts"].items()}
    for env in builds.values():
        price = warm.get(env, statistics.fmean(warm.values()) if warm else None)
        est.seconds += price or 0.0
        if env not in warm and f"warm start of {env}" not in est.borrowed:
            est.borrowed.append(f"warm start of {env}")
    est.warmstarts, est.measured = len(builds), bool(rate)  # warm starts alone say nothing of the cells
    return est


def duration(seconds: float) -> str:
    if seconds < 60:
        return "under a minute"
    minutes = round(seconds / 60)
    return "about " + (f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min")


def plan_line(plan: Plan) -> str:
    """Before any work: what is left to do and how long it should take."""
    est, where = estimate(plan), path(plan.bench.dir)
    work = (f"{est.cells} cells to train ({est.steps} steps; {est.finished} already done cost nothing) "
            f"and {est.warmstarts} warm start(s)")
    if est.cells == 0 and est.warmstarts == 0:
        return f"bench: nothing to train ({est.finished} cells already done)"
    if not est.measured:
        return (f"bench: {work}; no cell's seconds per step measured yet ({where}): an estimate follows after the "
                "first finished cell")
    text = f"bench: {work}: {duration(est.seconds)} from the timings in {where}"
    borrowed = f" (not measured yet, priced like the others: {', '.join(est.borrowed)})" if est.borrowed else ""
    return text + borrowed


def first_step_line(plan: Plan, cells: list[Cell], step_s: float) -> str:
    """With no timings yet, after the first step of the first cell: every step left priced like that one."""
    est = estimate(plan, cells)
    return (f"bench: {duration(est.steps * step_s)} for {est.cells} cells ({est.steps} steps at "
            f"{step_s:.1f} s, the first step's time; warm starts and evaluations come on top); "
            "refined after each cell")


def left_line(plan: Plan, cells: list[Cell]) -> str | None:
    """After a finished cell: the time the remaining ``cells`` should take; None when none is left."""
    est = estimate(plan, cells)
    if est.cells == 0:
        return None
    if not est.measured:  # e.g. the cell that finished had no steps left to time
        return f"bench: {est.cells} cells left; no cell's seconds per step measured yet"
    text = f"bench: {duration(est.seconds)} left ({est.cells} cells, {est.warmstarts} warm start(s))"
    return text + (f"; priced like the others: {', '.join(est.borrowed)}" if est.borrowed else "")
