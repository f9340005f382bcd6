"""docs/architecture.md against the code: the arrows it lists and its floors table are the rules and floors
tests/test_import_graph.py enforces, and the picture of one training step names only what prover/ defines
(every class, function and method, and the arguments it shows them called with)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from test_import_graph import FLOORS, GRAPH_CHECKS, PROVER, REPO, RULES

ARCHITECTURE = REPO / "docs" / "architecture.md"


def architecture_section(title: str, text: str | None = None) -> str:
    """The text of the ``## title`` section of docs/architecture.md, up to the next ``## `` heading."""
    text = ARCHITECTURE.read_text() if text is None else text
    found = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert found, f"docs/architecture.md has no section '## {title}'"
    return found.group(1)


def documented_arrows(text: str | None = None) -> list[str]:
    """The case names the page lists under "Arrows that must never exist", one ``- `name`: ...`` line each."""
    return re.findall(r"^- `([a-z0-9-]+)`", architecture_section("Arrows that must never exist", text), re.M)


def documented_floors(text: str | None = None) -> list[tuple[str, tuple[str, ...]]]:
    """The page's floors table, lowest first: ``| n | name | `module`, `module` ... |`` rows."""
    rows = re.findall(r"^\| *\d+ *\| *([a-z ]+?) *\|(.*)\|$", architecture_section("Floors", text), re.M)
    return [(name, tuple(re.findall(r"`([a-z_.]+)`", rooms))) for name, rooms in rows]


def test_the_architecture_page_names_the_rules_this_file_enforces() -> None:
    assert documented_arrows() == [p.id for p in RULES] + list(GRAPH_CHECKS)


def test_the_architecture_page_shows_the_floors_this_file_enforces() -> None:
    assert documented_floors() == FLOORS


def test_the_page_parsers_read_what_they_are_given() -> None:
    page = ("# t\n## Arrows that must never exist\n- `a-rule`: words `x`\n  - `not-a-case`\n- `b`: y\n"
            "## Floors\n| floor | name | rooms |\n|---|---|---|\n| 1 | ground | `prover.a`, `prover.b` |\n"
            "| 2 | run folder | `prover.rundir.run` (and its lock) |\n## Next\n- `c`: z\n")
    assert documented_arrows(page) == ["a-rule", "b"]
    assert documented_floors(page) == [("ground", ("prover.a", "prover.b")), ("run folder", ("prover.rundir.run",))]


def step_picture(text: str | None = None) -> str:
    """The code block of the page's "One step of training" section."""
    found = re.search(r"^```\n(.*?)^```", architecture_section("One step of training", text), re.M | re.S)
    assert found, "the section has no picture"
    return found.group(1)


def definitions(root: Path = PROVER) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Classes -> the names they define (methods, fields, the parameters of ``__init__``), and callables (module
    functions and methods, by name) -> their parameters, over every module under ``root``."""
    classes: dict[str, set[str]] = {}
    params: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                params.setdefault(node.name, set()).update(a.arg for a in args)
            elif isinstance(node, ast.ClassDef):
                names = classes.setdefault(node.name, set())
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        names.add(item.name)
                        if item.name == "__init__":
                            names.update(a.arg for a in item.args.args + item.args.kwonlyargs)
                    elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        names.add(item.target.id)
    return classes, params


def unknown_names(picture: str, root: Path = PROVER) -> list[str]:
    """What the picture names that ``root`` does not define: a CamelCase word is a class; ``Class.method(args)``
    a method of that class; ``Class(args)`` takes those fields; ``function(args)`` a function or method; and
    every argument shown is a parameter (or, for a class, a field) of what is called."""
    classes, params = definitions(root)
    missing = [word for word in re.findall(r"\b[A-Z][a-z]+[A-Za-z]*\b", picture) if word not in classes]
    for owner, name, args in re.findall(r"(?:\b([A-Z]\w*)\.)?\b(\w+)\(([^)]*)\)", picture):
        shown = [a.strip() for a in args.split(",") if a.strip()]
        if name[0].isupper():
            have = classes.get(name, set())
        elif owner and name not in classes.get(owner, set()):
            have, missing = set(), [*missing, f"{owner}.{name}"]
        elif name not in params:
            have, missing = set(shown), [*missing, f"{name}()"]
        else:
            have = params[name]
        missing += [f"{owner + '.' if owner else ''}{name}({a})" for a in shown if a not in have]
    return sorted(set(missing))


def test_the_step_picture_names_only_what_exists() -> None:
    missing = unknown_names(step_picture())
    assert not missing, "docs/architecture.md's picture of a step names what prover/ does not define:\n" + \
        "\n".join(missing)


def test_unknown_names_finds_each_kind(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("class Box:\n    size: int\n    def open(self, key): ...\n"
                                   "def make(n, *, seed): ...\n")
    assert unknown_names("Box(size) ─▶ Box.open(key) ─▶ make(n, seed)", tmp_path) == []
    assert unknown_names("TaskSource ─▶ Box.close() ─▶ Box(colour) ─▶ Box.open(lock) ─▶ build(n)", tmp_path) == [
        "Box(colour)", "Box.close", "Box.open(lock)", "TaskSource", "build()"]
