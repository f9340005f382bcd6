"""``prover view RUN_DIR``: one self-contained HTML file about a run.

It shows the run's learning curves (inline SVG, from metrics.jsonl) and the rollout groups the trainer
kept (groups.jsonl, ``run.save_groups`` per step): each group's trajectories side by side, turn by
turn (observation excerpt, action, reward, advantage), with the judge's proposed segment outlined in
its trajectory and labelled with its verified Delta and whether it was accepted. No script, no external
file: the page opens anywhere. All run text is HTML-escaped (env text holds <, > and &).
"""

from __future__ import annotations

import argparse
import json
import re
from html import escape
from pathlib import Path
from typing import Any

from prover.commands.svgchart import line_chart
from prover.errors import ConfigError, ProverError
from prover.system.environment import ENVIRONMENT_FILE, summary_lines
from prover.system.files import read_jsonl

OBS_EXCERPT = 240  # characters of an observation shown before "more"
CHARTS = [  # (title, [(series name, phase, metric)], fixed y range or None)
    ("Success", [("held-out", "eval", "eval/success"), ("training rollouts", "train", "rollout/success")],
     (0.0, 1.0)),
    ("Generated tokens per step", [("rollout", "train", "cost/rollout_tokens"),
                                   ("branch", "train", "cost/branch_tokens")], None),
    ("Seconds per step", [("step", "train", "time/step"), ("rollout", "train", "time/rollout"),
                          ("credit", "train", "time/credit"), ("learner", "train", "time/learner")], None),
    ("Policy loss and entropy", [("learner/pg_loss", "train", "learner/pg_loss"),
                                 ("learner/entropy", "train", "learner/entropy")], None),
    ("Judge proposals", [("acceptance rate", "train", "credit/acceptance_rate"),
                         ("mean Delta", "train", "credit/delta")], None),
]
CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5rem; color: #222; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
h3 { font-size: 1rem; margin: 0 0 .4rem; }
.summary td { padding: 0 1rem 0 0; } .charts { display: flex; flex-wrap: wrap; gap: 1rem; }
.chart-title { font-size: 13px; font-weight: 600; }
.chart-tick, .chart-legend { font-size: 11px; fill: #444; }
.chart-frame { fill: none; stroke: #999; } .chart-grid { stroke: #e4e4e4; } .chart-empty { fill: #999; }
.group { border: 1px solid #ccc; border-radius: 6px; padding: .8rem; margin: 1rem 0; background: #fcfcfc; }
.proposals { margin: .2rem 0 .6rem; padding-left: 1.2rem; } .proposals li { margin: .15rem 0; }
.replies pre { white-space: pre-wrap; margin: .1rem 0; font-size: .85em; }
.scroll { overflow-x: auto; }
.grid { display: grid; gap: 4px; align-items: stretch; }
.thead { font-weight: 600; padding: .3rem; border-radius: 4px; }
.thead.won { background: #dff3df; } .thead.lost { background: #f6e0e0; }
.tnum { color: #777; font-size: 12px; text-align: right; padding-top: .3rem; }
.turn { border: 1px solid #ddd; border-radius: 4px; padding: .3rem; background: #fff; font-size: 12.5px;
        overflow-wrap: anywhere; }
.obs { color: #555; white-space: pre-wrap; } .obs details { display: inline; }
.act { font-family: ui-monospace, monospace; margin-top: .2rem; } .act.invalid { color: #b00; }
.meta { color: #777; font-size: 11.5px; margin-top: .15rem; }
.segment { border: 3px solid #1a7f37; border-radius: 6px; background: rgba(26, 127, 55, .07);
           pointer-events: none; position: relative; z-index: 1; }
.segment.rejected { border-color: #bf8700; background: rgba(191, 135, 0, .07); }
.segment.dropped { border-style: dashed; border-color: #888; background: none; }
.seg-label { position: absolute; top: -.75rem; right: .4rem; background: #1a7f37; color: #fff;
             font-size: 11.5px; padding: 0 .4rem; border-radius: 3px; }
.segment.rejected .seg-label { background: #bf8700; } .segment.dropped .seg-label { background: #888; }
"""
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def esc(value: object) -> str:
    """Text for HTML: escaped, control characters (invalid in HTML) shown as U+FFFD."""
    return escape(_CONTROL.sub("\ufffd", str(value)), quote=True)


# -- curves ------------------------------------------------------------------------------------------

def charts_html(history: list[dict[str, Any]]) -> str:
    figs = []
    for title, spec, y_range in CHARTS:
        series = [(name, [(r["step"], r[key]) for r in history if r.get("phase") == phase and
                          isinstance(r.get(key), (int, float))]) for name, phase, key in spec]
        if any(pts for _, pts in series):
            figs.append(f"<figure>{line_chart(title, series, y_range=y_range)}</figure>")
    return f'<div class="charts">{"".join(figs)}</div>' if figs else "<p>No metrics to plot.</p>"


# -- groups ------------------------------------------------------------------------------------------

def _segment_label(seg: dict[str, Any]) -> tuple[str, str]:
    """(css class, label text) of a checked proposal."""
    if seg.get("delta") is None:
        return "dropped", f"dropped: {seg.get('problem') or 'not verified'}"
    verdict = "accepted" if seg.get("accepted") else "rejected"
    return verdict, f"Δ = {seg['delta']:+.3f} · {verdict}"


def _obs_html(text: str) -> str:
    if len(text) <= OBS_EXCERPT:
        return esc(text)
    return (f"{esc(text[:OBS_EXCERPT])}<details><summary>more</summary>{esc(text[OBS_EXCERPT:])}</details>")


def _turn_html(turn: dict[str, Any], traj_id: str, t: int, col: int) -> str:
    valid = turn.get("format_valid", True) and turn.get("action_valid", True)
    shown = turn.get("action", "") if turn.get("format_valid", True) else turn.get("completion", "")
    adv = turn.get("advantage")
    meta = f"reward {turn.get('reward', 0.0):g}" + ("" if adv is None else f" · advantage {adv:+.3f}")
    if not turn.get("format_valid", True):
        meta += " · malformed output"
    elif not turn.get("action_valid", True):
        meta += " · action rejected"
    return (f'<div class="turn" data-traj="{esc(traj_id)}" data-turn="{t}" '
            f'style="grid-row:{t + 2};grid-column:{col}">'
            f'<div class="obs">{_obs_html(str(turn.get("observation", "")))}</div>'
            f'<div class="act{"" if valid else " invalid"}">▶ {esc(shown)}</div>'
            f'<div class="meta">{esc(meta)}</div></div>')


def replies_html(replies: list[object]) -> str:
    """What the judge said, folded: each reply of its conversation, in order."""
    if not replies:
        return ""
    items = "".join(f"<li><pre>{esc(r)}</pre></li>" for r in replies)
    return f'<details class="replies"><summary>Judge replies ({len(replies)})</summary><ol>{items}</ol></details>'


def group_html(rec: dict[str, Any]) -> str:
    trajs = rec.get("trajectories", [])
    column = {t.get("traj_id"): k + 2 for k, t in enumerate(trajs)}  # grid column of each trajectory
    items, notes = [], []
    for k, tr in enumerate(trajs):
        won = bool(tr.get("won"))
        items.append(f'<div class="thead {"won" if won else "lost"}" style="grid-row:1;grid-column:{k + 2}">'
                     f'{esc(tr.get("traj_id", ""))}<br>{"won" if won else "failed"} · return '
                     f'{float(tr.get("return", 0.0)):g} · {len(tr.get("turns", []))} turns</div>')
        items += [_turn_html(turn, tr.get("traj_id", ""), t, k + 2)
                  for t, turn in enumerate(tr.get("turns", []))]
    n_rows = max((len(t.get("turns", [])) for t in trajs), default=0)
    items += [f'<div class="tnum" style="grid-row:{t + 2};grid-column:1">turn {t}</div>'
              for t in range(n_rows)]
    for seg in rec.get("segments", []):
        kind, label = _segment_label(seg)
        s, e, tid = seg.get("start_turn"), seg.get("end_turn"), seg.get("traj_id")
        where = f"turns {s}–{e} of {tid}"
        why = f'<br><small>Rationale: {esc(seg["rationale"])}</small>' if seg.get("rationale") else ""
        notes.append(f'<li class="proposal {kind}">Judge proposed {esc(where)}: {esc(label)}{why}</li>')
        n_turns = len(trajs[column[tid] - 2].get("turns", [])) if tid in column else 0
        if isinstance(s, int) and isinstance(e, int) and 0 <= s <= e < n_turns:
            delta = "" if seg.get("delta") is None else f"{seg['delta']:.6g}"
            items.append(f'<div class="segment {kind}" data-delta="{delta}" data-start="{s}" data-end="{e}" '
                         f'style="grid-column:{column[tid]};grid-row:{s + 2} / {e + 3}">'
                         f'<span class="seg-label">{esc(label)}</span></div>')
    cols = f"4.5rem repeat({len(trajs)}, minmax(15rem, 1fr))"
    step, gi = esc(rec.get("step")), esc(rec.get("group"))
    head = (f'<h3>Step {step} · group {gi} · {esc(rec.get("task_id", ""))}</h3>'
            f'<div>Task: {esc(rec.get("task_text", ""))}</div>')
    failure = rec.get("judge_failure")
    props = (f'<ul class="proposals">{"".join(notes)}</ul>' if notes
             else f"<p><small>No judge proposal{': ' + esc(failure) if failure else '.'}</small></p>")
    props += replies_html(rec.get("judge_replies") or [])
    grid = f'<div class="grid" style="grid-template-columns:{cols}">{"".join(items)}</div>'
    return (f'<article class="group" id="step-{step}-group-{gi}">{head}{props}'
            f'<div class="scroll">{grid}</div></article>')


def pick_groups(groups: list[dict[str, Any]], most: int) -> list[dict[str, Any]]:
    """At most ``most`` groups, those with a judge's proposal first, shown in step order."""
    order = sorted(range(len(groups)), key=lambda i: (not groups[i].get("segments"), i))[:most]
    return [groups[i] for i in sorted(order)]


# -- the page ----------------------------------------------------------------------------------------

def _summary(run: Path, history: list[dict[str, Any]], notes: list[str]) -> str:
    # lazy: every command builds this module's parser; yaml loads only when a page is made
    import yaml

    from prover.settings.yaml_files import load_yaml_text

    rows: list[tuple[str, str]] = []
    cfg_path = run / "config.yaml"
    if cfg_path.is_file():
        try:
            cfg = load_yaml_text(cfg_path.read_text(encoding="utf-8"), "config.yaml") or {}  # aliases bounded
        except (yaml.YAMLError, UnicodeDecodeError, ProverError):
            cfg = None
        if not isinstance(cfg, dict):
            notes.append("config.yaml is not a mapping of sections (not YAML, not UTF-8, or a list); "
                         "the run's settings are not shown")
            cfg = {}

        def get(section: str, key: str | None = None) -> Any:
            value = cfg.get(section)
            return (value or {}).get(key) if key and isinstance(value or {}, dict) else value

        rows += [("env", get("env", "name")), ("credit", get("credit", "name")),
                 ("judge", get("judge", "name")), ("steps", get("steps")), ("seed", get("seed")),
                 ("groups per step × group size", f"{get('rollout', 'groups_per_step')} × "
                                                   f"{get('rollout', 'group_size')}")]
    evals = [r for r in history if r.get("phase") == "eval" and _is_number(r.get("eval/success"))]
    if evals:
        rows.append(("held-out success", " → ".join(f"{r['eval/success']:.3f} (step {r['step']})"
                                                    for r in evals)))
    body = "".join(f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in rows)
    return f'<table class="summary">{body}</table>'


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def metric_records(rows: list[Any], notes: list[str]) -> list[dict[str, Any]]:
    """The records of metrics.jsonl the page can draw: a mapping with a whole ``step`` and a ``phase`` name;
    values that are not numbers are left out of the curves by ``charts_html``. The rest are counted."""
    good = [r for r in rows if isinstance(r, dict) and type(r.get("step")) is int and isinstance(r.get("phase"), str)]
    if len(good) < len(rows):
        notes.append(f"metrics.jsonl: {len(rows) - len(good)} malformed record(s) skipped (no whole step or "
                     "phase name)")
    return good


def groups_html(groups: list[Any], most: int, notes: list[str]) -> str:
    """Each shown group rendered on its own: a record whose fields have the wrong types is skipped and
    counted, and the rest still render."""
    records = [g for g in groups if isinstance(g, dict)]
    shown = pick_groups(records, most)
    parts, bad = [], len(groups) - len(records)
    for g in shown:
        try:
            parts.append(group_html(g))
        except (TypeError, ValueError, AttributeError, KeyError, IndexError):
            bad += 1
    if bad:
        notes.append(f"groups.jsonl: {bad} malformed record(s) skipped (a field of the wrong type)")
    if not parts:
        return "<p>No saved groups: the run kept none (run.save_groups=0, or it predates groups.jsonl).</p>"
    return (f"<p>{len(parts)} of the {len(groups)} saved groups (those with a judge's proposal first). "
            "Outlined turns are the judge's proposed segment: green accepted (Δ &gt; 0, the bonus was "
            "added), amber rejected, dashed dropped by validation.</p>" + "".join(parts))


def environment_html(run: Path, notes: list[str]) -> str:
    """The run's environment.json as lines (versions, CPU, threads, GPUs), its package list folded away."""
    path = run / ENVIRONMENT_FILE
    if not path.is_file():
        return f"<p>The run folder holds no {ENVIRONMENT_FILE}.</p>"
    try:
        lines = summary_lines(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, UnicodeDecodeError, TypeError, AttributeError, KeyError, RecursionError):  # hand-edited
        notes.append(f"{ENVIRONMENT_FILE} is not the JSON record prover writes; the environment is not shown")
        return ""
    head = [line for line in lines if not line.startswith("  ")]
    packages = [line.strip() for line in lines if line.startswith("  ")]
    return (f"<pre>{esc(chr(10).join(head[:-1]))}</pre><details><summary>{esc(head[-1].rstrip(':'))}</summary>"
            f"<pre>{esc(chr(10).join(packages))}</pre></details>")


def render(run_dir: str | Path, most_groups: int = 24, notes: list[str] | None = None) -> str:
    """The report's HTML; ``notes`` gets one line per kind of malformed input that was skipped."""
    run, notes = Path(run_dir), [] if notes is None else notes
    history = metric_records(read_jsonl(run / "metrics.jsonl"), notes)
    if not history:
        raise ConfigError(f"run folder {str(run)!r} has no metrics.jsonl records; give a folder that "
                          "`prover train` wrote")
    body = groups_html(read_jsonl(run / "groups.jsonl"), most_groups, notes)
    summary = _summary(run, history, notes)
    environment = environment_html(run, notes)
    warned = "".join(f"<p class=\"note\"><small>Skipped: {esc(n)}</small></p>" for n in notes)
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>prover run {esc(run.name)}</title><style>{CSS}</style></head>"
            f"<body><h1>prover run <code>{esc(run)}</code></h1>{warned}"
            f"{summary}<h2>Learning curves</h2>{charts_html(history)}"
            f'<h2 id="groups">Sampled groups</h2>{body}'
            f'<h2 id="environment">Environment</h2>{environment}</body></html>\n')


def write_report(run_dir: str | Path, out: str | Path | None = None, most_groups: int = 24,
                 notes: list[str] | None = None) -> Path:
    path = Path(out) if out else Path(run_dir) / "report.html"
    html = render(run_dir, most_groups, notes)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html, encoding="utf-8")
    return path


def add_parser(sub: argparse._SubParsersAction) -> None:
    v = sub.add_parser("view", help="write a static HTML report of a run: curves and sampled groups")
    v.add_argument("run_dir", help="a run folder (run.dir of `prover train`, or a bench cell)")
    v.add_argument("--out", help="HTML file to write (default: RUN_DIR/report.html)")
    v.add_argument("--max-groups", type=int, default=24,
                   help="most groups shown (those with a proposal first)")
    v.set_defaults(fn=cmd_view)


def cmd_view(args: argparse.Namespace) -> int:
    if not args.run_dir.strip():  # Path("") is the current folder, which is not what was meant
        raise ConfigError("the run folder is empty; name it, e.g. prover view runs/my-run")
    notes: list[str] = []
    path = write_report(args.run_dir, args.out, args.max_groups, notes)
    for note in notes:
        print(f"prover view: note: {note}")
    print(f"wrote {path}")
    return 0
