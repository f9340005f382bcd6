"""The whole repository passes ``ruff check`` under pyproject.toml's [tool.ruff] settings, so CI catches lint
the way it catches a failing test. Ruff comes pinned in the dev extra: its rule sets change between releases."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff() -> list[str] | None:
    # only this environment's ruff (the pinned one): another release on PATH may judge by other rules
    if importlib.util.find_spec("ruff") is not None:
        return [sys.executable, "-m", "ruff"]
    beside = Path(sys.executable).with_name("ruff")
    return [str(beside)] if beside.is_file() else None


def test_ruff_check_passes_on_the_whole_repo() -> None:
    ruff = _ruff()
    if ruff is None:
        pytest.skip("ruff is not installed (it comes with the dev extra: pip install -e '.[dev]')")
    proc = subprocess.run([*ruff, "check", "--no-cache", "--output-format", "concise", "."], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        version = subprocess.run([*ruff, "--version"], capture_output=True, text=True).stdout.strip()
        pytest.fail(f"ruff check failed ({version}, exit {proc.returncode}); fix these (`ruff check --fix` does "
                    f"the safe ones):\n{proc.stdout}{proc.stderr}", pytrace=False)
