"""docs/bench/judges.md's figure: each judge's hit rate minus chance, with its 95% t interval, from the pooled
table of ``benchmarks/results/judge_truth_llm.md`` (what ``benchmarks.studies.judge_truth --pool`` wrote; the
page's pooled table is that table).

Chance is the study's "chance at its length" (``judge_truth.chance_at_length``): for each proposal, the share
of the legal windows of the proposal's length on the same trajectory (every start whose window ends at turn
n-2 or earlier) that hold a pivotal turn, i.e. the hit rate of a uniformly random legal proposal as long as
the judge's. "hit - chance" is the mean over proposals of (hit 0 or 1) minus that chance, with a t interval."""

from __future__ import annotations

import re
from pathlib import Path

from prover.commands.svgchart import ForestRow, forest_chart, standalone

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "benchmarks" / "results" / "judge_truth_llm.md"
FIGURE = ROOT / "docs" / "bench" / "judges-hit-minus-chance.svg"
SECTION = "pooled"
NUMBER = r"([+-]?\d+(?:\.\d+)?)"
ESTIMATE = re.compile(rf"^{NUMBER}(?: \[{NUMBER}, {NUMBER}\])?$")


def section_table(text: str, name: str) -> list[dict[str, str]]:
    """The rows of the first table under the ``### <name>:`` heading, as {column: cell}."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(f"### {name}:")), None)
    if start is None:
        raise SystemExit(f"{SOURCE.name}: no '### {name}:' section")
    table = []
    for line in lines[start + 1:]:
        if line.startswith("### "):
            break
        if line.startswith("|"):
            table.append([c.strip() for c in line.strip().strip("|").split("|")])
    if len(table) < 3:
        raise SystemExit(f"{SOURCE.name}: the '{name}' section has no table")
    head, body = table[0], table[2:]  # table[1] is the |---| line
    return [dict(zip(head, row)) for row in body]


def judge_rows(rows: list[dict[str, str]]) -> list[ForestRow]:
    """One forest row per judge: hit - chance in points, its t interval (none where the table has "-")."""
    out = []
    for row in rows:
        cell = row["hit - chance [95% t]"]
        if cell == "-":
            continue
        found = ESTIMATE.match(cell)
        if found is None:
            raise SystemExit(f"{SOURCE.name}: {row['judge']!r}: 'hit - chance' cell {cell!r} is not 'x [lo, hi]'")
        mean, lo, hi = (None if v is None else float(v) for v in found.groups())
        note = f"{cell} ({row['proposals']}, len. {row['mean len.']})"
        out.append(ForestRow(row["judge"], mean, lo, hi, note))
    return out


def figure(source: Path = SOURCE) -> str:
    rows = judge_rows(section_table(source.read_text(), SECTION))
    return standalone(forest_chart("Judges: hit rate minus chance at the proposal's length (6 settings pooled)",
                                   rows, "hit − chance in points: mean over proposals and 95% t interval",
                                   width=820))
