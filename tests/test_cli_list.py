"""`prover list`: every registered name has a row whose columns line up and a description under it, and the
credit methods it lists are the ones the method notes name."""

from __future__ import annotations

import re
from pathlib import Path

from prover.cli import main
from prover.registry import REGISTRIES

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _listing(capsys) -> dict[str, list[str]]:
    """Each row of `prover list` (indent 2) with the description lines (indent 6) under it, by name."""
    assert main(["list"]) == 0
    rows: dict[str, list[str]] = {}
    name = None
    for line in capsys.readouterr().out.splitlines():
        if line.startswith("      "):
            rows[name].append(line.strip())
        elif line.startswith("  ") and line.strip() != "(none)":
            name = line.split()[0]
            rows[name] = [line]
    return rows


def test_every_registered_name_has_a_description(capsys):
    rows = _listing(capsys)
    names = {e.name for reg in REGISTRIES.values() for e in reg.entries()}
    assert names <= set(rows)
    for name in names:
        text = " ".join(rows[name][1:])
        assert text and not text.startswith(("(no description", "(does not load")), (name, text)
    # VinePPO is no name of its own but spo-chain's preset: the listing says so where people look for it
    assert "preset: vineppo" in " ".join(rows["spo-chain"][1:]).replace("``", "")


def test_the_origin_column_lines_up_whatever_the_longest_name(capsys):
    from prover.registry import ENVS

    long_name = "an-env-name-longer-than-any-built-in-one"
    ENVS.register(long_name, "prover.envs.pivot_sim:PivotSimEnv")
    try:
        rows = _listing(capsys)
    finally:
        ENVS.unregister(long_name)
    starts = {row[0].index(row[0].split()[1], len(row[0].split()[0]) + 2) for row in rows.values()}
    assert len(starts) == 1 and starts.pop() > len(long_name) + 2


def test_the_method_notes_name_exactly_the_registered_credit_methods():
    table = (DOCS / "methods" / "README.md").read_text(encoding="utf-8")
    named = set(re.findall(r"^\| `([a-z-]+)`", table, flags=re.M))
    assert named == {e.name for e in REGISTRIES["credit"].entries()}
