"""Runs the cells of a plan one by one, then writes the tables and curves.

A cell is a normal run folder. Before it trains, ``cell.json`` records the hash of its settings; a cell
whose settings hash matches and whose metrics hold the final evaluation is finished and skipped. An
unfinished cell resumes from its last checkpoint, or restarts when it has none or its settings changed.
A finished cell is archived under ``<out>/cells`` at once, and a bench folder that lacks a cell takes the
archive's record when it is finished under the same settings (``archive.py``): cells committed on one machine
are not trained again on another.
Every method of one (env, seed) (or, with ``share_warmstart: env``, every cell of an env) starts from
one warm-started policy, built once under ``<dir>/shared/<env>/seed-<s>`` (``prover.policy`` names it
by a hash of the settings that shape it, so a method that changes one of them gets its own).
After every finished cell and warm start the measured time goes to ``<dir>/timings.json`` (``timing.py``),
and the time the remaining cells should take is printed.

Several bench processes may share one folder (two on disjoint seeds, one shared warm start): a lock per
cell (``<cell>/.bench.lock``) and per shared warm start (``<shared folder>/.bench.lock``), ``flock``s the
kernel drops when a process dies. A process skips a cell another one holds, saying so, and waits for a
shared warm start another one is building, then reuses it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from prover.bench import plots, stats, timing
from prover.bench.archive import archive_cell, archive_cells, restore_cell
from prover.bench.forest import forest_markdown, write_forest
from prover.bench.headline import headline_markdown
from prover.bench.matrix import BenchConfig, Cell, Plan, warmstart_folder
from prover.bench.report import markdown_tables, write_csvs
from prover.bench.tables import CELL_FILE, collect, final_eval, is_finished, read_history, started_key, token_ratio
from prover.config import TrainConfig
from prover.envs import make_configured_env
from prover.errors import ProverError
from prover.registry import CREDIT, JUDGES
from prover.rundir.run import FileLock, RunDir
from prover.system.files import write_atomic

if TYPE_CHECKING:
    from prover.progress import Reporter

Echo = Callable[[str], None]


@dataclass
class Outcome:
    trained: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # finished earlier
    busy: list[str] = field(default_factory=list)  # held by another bench process, which trains them
    failed: list[str] = field(default_factory=list)  # "<cell>: <one-line reason>"


LOCK_FILE = ".bench.lock"  # in a cell's folder and in a shared warm start's


def _built(models: Path) -> set[Path]:
    return {p for p in models.iterdir() if not p.name.startswith(".")}  # not the locks or temporary folders


def shared_policy(cell: Cell, bench: BenchConfig, verbose: bool, echo: Echo = print,
                  head: str = "") -> tuple[TrainConfig, bool]:
    """The cell's config, set to start from the warm-started policy it shares with other cells, and whether
    that policy was built now by this process (rather than found, or built by another one it waited for)."""
    # lazy: rich and the training stack load only when a cell trains, not for --regen-only
    from prover.policy import prepare_policy
    from prover.progress import Reporter

    cfg = cell.config
    where = warmstart_folder(bench, cell)
    if where is None:
        return cfg, False  # a given folder, or share_warmstart none: nothing shared to build
    shared = cfg.model_copy(deep=True)
    if bench.share_warmstart == "env":
        shared.seed = bench.shared_seed  # one starting policy for every seed of the env
    shared.run.dir = str(where)
    models = where / "models"
    lock = FileLock(where / LOCK_FILE)
    lock.acquire(lambda pid: echo(f"{head}: waiting for process {pid} (another prover bench) to finish the "
                                  f"shared warm start in {where}"))
    try:
        models.mkdir(parents=True, exist_ok=True)
        before = _built(models)  # a new folder after prepare_policy means this process built one
        folder = prepare_policy(shared, RunDir(shared), lambda: make_configured_env(cfg.env),
                                Reporter(quiet=not verbose))
        built = _built(models) != before
    finally:
        lock.release()
    out = cfg.model_copy(deep=True)
    out.model.path, out.warmstart.enabled = str(folder.resolve()), False
    if out.eval.cache_dir is None:  # every method of a seed evaluates the shared policy alike at step 0
        out.eval.cache_dir = str(Path(bench.dir) / "shared" / "evals")
    return out, built


def matched_budget(cell: Cell, cfg: TrainConfig) -> TrainConfig:
    """The config of a budget-matched cell, set to track its finished paired cell's generated tokens."""
    if cell.budget_ref is None:
        return cfg
    if final_eval(read_history(cell.budget_ref), cell.config.steps) is None:
        raise ProverError(f"its budget reference {cell.budget_ref} has not finished; it runs first, so see "
                          "why it failed above")
    out = cfg.model_copy(deep=True)
    out.credit.budget_from = str(cell.budget_ref / "metrics.jsonl")
    return out


def _first_step_reporter(quiet: bool, on_first_step: Callable[[float], None] | None) -> Reporter:
    """The cell's Reporter; with ``on_first_step``, it is handed the seconds of the cell's first step."""
    from prover.progress import Reporter  # lazy: rich loads only when a cell trains

    class FirstStep(Reporter):
        def step_line(self, r: dict[str, Any], total: int) -> None:
            nonlocal on_first_step
            super().step_line(r, total)
            if on_first_step is not None and isinstance(r.get("time/step"), (int, float)):
                on_first_step, call = None, on_first_step
                call(float(r["time/step"]))
    return FirstStep(quiet=quiet)


def run_cell(cell: Cell, head: str, bench: BenchConfig, verbose: bool, echo: Echo,
             on_first_step: Callable[[float], None] | None = None) -> str:
    """Train one cell (resuming it when it can); return its closing progress line. ``on_first_step`` gets the
    seconds of its first step (an estimate of a bench with no timings yet need not wait for a whole cell)."""
    from prover.trainer import Trainer  # lazy: the training stack loads only when a cell trains

    same = started_key(cell) == cell.key
    resume = same and RunDir(cell.config).latest_checkpoint() is not None
    if not same and read_history(cell.dir):
        echo(f"{head}: its settings changed since it ran; restarting it")
    t0 = time.monotonic()
    cfg, built = shared_policy(cell, bench, verbose, echo, head)
    cfg = matched_budget(cell, cfg)
    if built:
        timing.record_warmstart(bench.dir, cell.env, time.monotonic() - t0)
    if time.monotonic() - t0 > 1.0:
        echo(f"{head}: starting policy ready in {time.monotonic() - t0:.0f} s")
    last = max((r["step"] for r in read_history(cell.dir) if r.get("phase") == "train"), default=0)
    echo(f"{head}: training {cell.config.steps} steps" + (f" (resuming after step {last})" if resume else ""))
    cell.dir.mkdir(parents=True, exist_ok=True)
    marker = {"key": cell.key, "env": cell.env, "method": cell.method.name, "label": cell.method.row,
              "seed": cell.seed}
    write_atomic(cell.dir / CELL_FILE, json.dumps(marker) + "\n")
    t1 = time.monotonic()
    Trainer(cfg, resume=resume, reporter=_first_step_reporter(not verbose, on_first_step)).train()
    timing.record_cell(bench.dir, cell.env, cell.method.row, cell.seed, time.monotonic() - t1,
                       cell.config.steps - (last if resume else 0))
    hist = read_history(cell.dir)
    evals = [r for r in hist if r.get("phase") == "eval"]
    final = final_eval(hist, cell.config.steps)
    return (f"{head}: done in {time.monotonic() - t1:.0f} s, held-out success {evals[0]['eval/success']:.3f} "
            f"after the warm start -> {final['eval/success']:.3f}")


def _finished_line(cell: Cell, head: str) -> str | None:
    if not is_finished(cell):
        return None
    success = final_eval(read_history(cell.dir), cell.config.steps)["eval/success"]
    return f"{head}: finished earlier, skipped (held-out success {success:.3f})"


def run_plan(plan: Plan, echo: Echo = print, verbose: bool = False) -> Outcome:
    """Train every unfinished cell, one progress line (or more) per cell; a cell that fails with a
    ProverError is reported and the others still run. A cell another process holds is skipped."""
    outcome, total = Outcome(), len(plan.cells)
    for i, cell in enumerate(plan.cells, 1):
        head = f"[{i}/{total}] {cell.name}"
        if (line := _finished_line(cell, head)) is not None:
            echo(line)
            outcome.skipped.append(cell.name)
            continue
        lock = FileLock(cell.dir / LOCK_FILE)
        if (holder := lock.try_acquire()) is not None:
            echo(f"{head}: in use by process {holder} (another prover bench, which trains it); skipped")
            outcome.busy.append(cell.name)
            continue
        try:
            # finished by the process that held it a moment ago, or by anyone who committed its record
            restored = restore_cell(cell, plan.bench)
            if (line := _finished_line(cell, head)) is not None:
                echo(line + (f" (its record taken from {plan.bench.out_dir / 'cells'})" if restored else ""))
                outcome.skipped.append(cell.name)
                continue
            guess = None if timing.estimate(plan).measured else (
                lambda seconds, rest=plan.cells[i - 1:]: echo(timing.first_step_line(plan, rest, seconds)))
            echo(run_cell(cell, head, plan.bench, verbose, echo, guess))
            archive_cell(cell, plan.bench)  # committable now, while the other cells train
            outcome.trained.append(cell.name)
        except ProverError as exc:
            echo(f"{head}: failed: {exc}")
            outcome.failed.append(f"{cell.name}: {exc}")
            continue
        finally:
            lock.release()
        if (left := timing.left_line(plan, plan.cells[i:])) is not None:
            echo(left)
    return outcome


def precision_notes(plan: Plan) -> list[str]:
    """Said before any work: evaluations too small for a 3-point SE, and too few seeds for the CIs."""
    by_episodes: dict[int, list[str]] = {}
    for cell in plan.cells:
        envs = by_episodes.setdefault(cell.config.eval.episodes, [])
        if cell.env not in envs:
            envs.append(cell.env)
    lines = [stats.se_warning(n, f" ({', '.join(envs)})" if len(by_episodes) > 1 else "")
             for n, envs in sorted(by_episodes.items())]
    return [line for line in [*lines, stats.seeds_warning(len(plan.bench.seeds))] if line]


def comparison_notes(plan: Plan, results: list) -> list[str]:
    """What a reader must know to trust a comparison: the GRPO base each method uses, the budget matching
    achieved, and which judges read state the agent never sees."""
    norms: dict[str, set[str]] = {}
    for cell in plan.cells:
        norm = getattr(CREDIT.get(cell.method.credit).parse_config(cell.config), "norm", None)
        if norm is not None:
            norms.setdefault(norm, set()).add(cell.method.row)
    base = "; ".join(f"norm={n} ({'centre only' if n == 'mean' else 'divided by the group std'}): "
                     f"{', '.join(sorted(rows))}" for n, rows in sorted(norms.items()))
    lines = ["Comparison settings:", "", f"- GRPO base of every GRPO-based method: {base or 'none in this matrix'}."]
    for row, ref in plan.budget_refs.items():
        ratios = [f"{env} {r:.3f}" for env in plan.bench.envs
                  if (r := token_ratio(results, row, ref, env)) is not None]
        lines.append(f"- {row} matches {ref}'s generated tokens per (env, seed), step by step; realised "
                     f"total-token ratio: {', '.join(ratios) or 'no finished pair yet'}.")
    hidden = sorted({c.method.row for c in plan.cells if c.method.judge is not None and (judge := JUDGES.get(
        c.method.judge)).reads_hidden_state(judge.parse_config(c.config))})
    lines.append(f"- Judges that read the simulator's hidden state (Turn.state_key), which neither the agent "
                 f"nor an LLM judge sees: {', '.join(hidden) or 'none'}.")
    return [*lines, ""]


def draw_curves(results: list, methods: list[str], envs: list[str], out: Path) -> tuple[list[Path], list[str]]:
    """The curve PNGs that could be drawn, and a note for each that could not: the tables never wait on
    (or fail with) matplotlib."""
    missing = plots.curves_unavailable()
    if missing is not None:
        return [], [missing]
    drawn, notes = [], []
    for env in envs:
        try:
            if (path := plots.plot_env(results, methods, env, out)) is not None:
                drawn.append(path)
        except Exception as exc:  # noqa: BLE001 - a broken matplotlib install or backend costs that curve only
            notes.append(f"learning curve of {env} skipped: {' '.join(f'{type(exc).__name__}: {exc}'.split())}")
    return drawn, notes


def provenance(plan: Plan, command: str, methods: int) -> list[str]:
    """The block under the result: when the tables were written, from which command's cells, and the design."""
    bench = plan.bench
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return [f"> **Provenance.** Written {when} from the cells of `{command}`: {len(bench.envs)} env(s) × "
            f"{methods} method(s) × {len(bench.seeds)} seed(s), {bench.steps} RL steps per cell. Seeds are paired: "
            "every method of an env trains seed s on the same task stream from the same starting policy, so "
            "Table 1 compares methods seed by seed.", ""]


def write_reports(plan: Plan, command: str, failed: list[str] = (), echo: Echo = print) -> list[Path]:
    """results.md, table1-3.csv, forest.svg and curves-<env>.png in the bench's out folder, from the finished
    cells."""
    bench, out = plan.bench, plan.bench.out_dir
    out.mkdir(parents=True, exist_ok=True)
    results, pending = collect(plan)
    methods = [m.row for m in bench.methods if any(c.method.row == m.row for c in plan.cells)]
    judged = [m.row for m in bench.methods if m.judge is not None and m.row in methods]
    files = write_csvs(results, methods, judged, bench.envs, out, plan.budget_refs, bench.baseline, bench.reach)
    plots, curve_notes = draw_curves(results, methods, bench.envs, out)
    forest = write_forest(results, methods, bench.envs, bench.baseline, out) if bench.baseline else None
    for note in curve_notes:
        echo(f"note: {note}")
    notes = [*plan.skipped, *precision_notes(plan), *(f"failed: {f}" for f in failed), *curve_notes,
             *(f"not finished: {c.name}" for c in pending if all(c.name not in f for f in failed))]
    text = [f"# prover bench: {len(results)} of {len(plan.cells)} cells finished", ""]
    # the result first (the headline's table, then the curves), its provenance under it, the method after,
    # and last what the numbers cannot show
    text += headline_markdown(plan, results)
    if forest is not None:
        text += forest_markdown(forest, bench.baseline)
    if plots:
        text += ["## Learning curves", "", *(f"![{p.stem}]({p.name})" for p in plots), ""]
    text += provenance(plan, command, len(methods))
    text.append(markdown_tables(results, methods, judged, bench.envs, plan.budget_refs, bench.baseline,
                                bench.reach))
    matrix = yaml.safe_dump(bench.model_dump(mode="json"), sort_keys=False).rstrip()
    text += ["## Method", "", *comparison_notes(plan, results), "### The matrix", "", "```yaml", matrix, "```", ""]
    if notes:
        text += ["## What these numbers do not show", "", *(f"- {n}" for n in notes), ""]
    write_atomic(out / "results.md", "\n".join(text))
    archived = archive_cells(plan)
    files = [out / "results.md", *files, *([forest] if forest else []), *plots, *([out / "cells"] if archived else [])]
    echo(f"wrote {', '.join(str(p) for p in files)}")
    return files
