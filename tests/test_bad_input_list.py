"""The "Bad input and safe runs" list (docs/safe-runs.md) is held by tests: every guarantee names at least
one test, and every test it names exists (a renamed or deleted test makes the promise unchecked, so this
fails)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _section() -> str:
    text = (ROOT / "docs" / "safe-runs.md").read_text()
    start = text.index("# Bad input and safe runs")
    end = text.find("\n#", start + 1)  # the next heading, if the page ever gets one
    return text[start:] if end == -1 else text[start:end]


def _guarantees() -> list[str]:
    items = re.split(r"\n- ", _section())[1:]
    return [" ".join(item.split()) for item in items]


def _tests_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def test_every_guarantee_names_a_test_and_every_named_test_exists():
    guarantees = _guarantees()
    assert len(guarantees) >= 10
    for item in guarantees:
        named = re.findall(r"`(tests/[\w/]+\.py)::(test_\w+)`", item)
        assert named, f"this guarantee names no test: {item[:80]}"
        for path, name in named:
            assert (ROOT / path).is_file(), f"{path} (named in docs/safe-runs.md) does not exist"
            assert name in _tests_in(ROOT / path), f"{path}::{name} (named in docs/safe-runs.md) does not exist"
