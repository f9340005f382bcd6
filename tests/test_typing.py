"""The type check of prover/: mypy at the strictness pyproject.toml's ``[tool.mypy]`` states (every module of
prover/, the pydantic plugin, strict equality; the modules not yet clean let off only the error codes they still
have, each listed there), and a ceiling on the annotations that say ``Any``, so that the seams stay typed.

mypy is a dev dependency pinned in constraints/lock.txt; a cold check takes about 25 CPU seconds, a warm one
(``.mypy_cache`` in the repository root) a few.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROVER = ROOT / "prover"
# The most annotations in prover/ (parameters, returns, variables and attributes) that are ``Any`` itself;
# ``dict[str, Any]`` and the like are counted apart, in ANY_INSIDE_CEILING. Lower them as annotations are mended.
ANY_CEILING = 59
ANY_INSIDE_CEILING = 167


def run_mypy(*args: str) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("mypy", reason="mypy is a dev dependency (constraints/lock.txt)")
    return subprocess.run([sys.executable, "-m", "mypy", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=900)


@pytest.mark.slow
def test_mypy_finds_no_error_in_prover() -> None:
    done = run_mypy()  # files, plugins and strictness from pyproject.toml
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "Success: no issues found" in done.stdout


def test_the_check_reports_what_its_settings_say(tmp_path: Path) -> None:
    """The settings are live: a wrong assignment, a comparison that can never hold (strict_equality) and a
    pydantic model built without its required field (the pydantic plugin) are each an error."""
    probe = tmp_path / "probe.py"
    probe.write_text("from pydantic import BaseModel\n"
                     "class M(BaseModel):\n    a: int\n"
                     "x: int = 'a'\n"
                     "y = 1 == 'one'\n"
                     "z = M()\n")
    done = run_mypy("--cache-dir", str(tmp_path / "cache"), str(probe))  # a file named replaces the files setting
    assert done.returncode == 1, done.stdout
    assert "[assignment]" in done.stdout and "[comparison-overlap]" in done.stdout and "[call-arg]" in done.stdout


def any_annotations(root: Path = PROVER) -> tuple[list[str], list[str]]:
    """``file:line`` of each annotation that is ``Any`` itself, and of each that holds it inside
    (``dict[str, Any]``), over every parameter, return, variable and attribute annotation under ``root``."""
    def is_any(node: ast.expr) -> bool:
        return (isinstance(node, ast.Name) and node.id == "Any") or (isinstance(node, ast.Attribute)
                                                                      and node.attr == "Any")
    bare, inside = [], []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            found: list[ast.expr] = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(p for p in (a.vararg, a.kwarg) if p)]
                found += [p.annotation for p in params if p.annotation is not None]
                found += [node.returns] if node.returns is not None else []
            elif isinstance(node, ast.AnnAssign):
                found.append(node.annotation)
            for ann in found:
                where = f"{path.relative_to(root.parent)}:{ann.lineno}"
                if is_any(ann):
                    bare.append(where)
                elif any(is_any(n) for n in ast.walk(ann) if isinstance(n, ast.expr)):
                    inside.append(where)
    return bare, inside


def test_annotations_that_say_any_stay_under_their_ceiling() -> None:
    bare, inside = any_annotations()
    assert len(bare) <= ANY_CEILING, f"{len(bare)} annotations are Any (ceiling {ANY_CEILING}):\n" + "\n".join(bare)
    assert len(inside) <= ANY_INSIDE_CEILING, (f"{len(inside)} annotations hold Any (ceiling "
                                               f"{ANY_INSIDE_CEILING}):\n" + "\n".join(inside))


def test_the_count_reads_every_kind_of_annotation(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(
        "import typing\nfrom typing import Any\n"
        "def f(a: Any, *b: Any, c: int = 0, **d: typing.Any) -> Any: ...\n"
        "x: Any = 1\n"
        "class C:\n    y: dict[str, Any]\n    z: int\n"
        "async def g(e: list[Any]) -> None: ...\n")
    bare, inside = any_annotations(tmp_path / "pkg")
    assert sorted(int(w.split(":")[1]) for w in bare) == [3, 3, 3, 3, 4]
    assert sorted(int(w.split(":")[1]) for w in inside) == [6, 8]
