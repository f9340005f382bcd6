"""benchmarks/ is a package run with ``python -m`` from the repository root (benchmarks/README.md): no import
circle among its modules (``test_import_graph.import_circles``, the rule prover/ keeps), no import of a test
module and no ``sys.path`` edit."""

from __future__ import annotations

import ast
from pathlib import Path

from test_import_graph import REPO, import_circles, imported_modules, module_name

BENCHMARKS = REPO / "benchmarks"
TEST_MODULES = tuple(sorted(p.stem for p in (REPO / "tests").glob("*.py")))  # conftest, test_x, ...


def rule_breaks(root: Path = BENCHMARKS, test_modules: tuple[str, ...] = TEST_MODULES) -> list[str]:
    """What breaks benchmarks/' rules: an import of a module of tests/ (by its top-level name, as
    ``sys.path.insert(0, "tests")`` would allow, or as ``tests.x``) and any ``sys.path`` edit (the package
    imports as ``benchmarks.x`` from the root, nothing else)."""
    paths = sorted(root.rglob("*.py"))
    modules = {module_name(path, root) for path in paths}
    broken = []
    for path in paths:
        importer, source = module_name(path, root), path.read_text()
        found = imported_modules(source, importer, path.name == "__init__.py", modules)
        broken += [f"{importer} -> {m} (tests/)" for m in sorted(found)
                   if m.split(".")[0] == "tests" or m.split(".")[0] in test_modules]
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Attribute) and ast.unparse(node).startswith("sys.path."):
                broken.append(f"{importer}:{node.lineno} edits sys.path")
    return broken


def test_benchmarks_have_no_import_circle_and_import_nothing_from_tests() -> None:
    assert (BENCHMARKS / "perf" / "page.py").is_file(), "benchmarks/ was not found"
    broken = rule_breaks()
    assert not broken, "benchmarks/ must not import tests/ or edit sys.path:\n" + "\n".join(broken)
    circles = import_circles(BENCHMARKS)
    assert not circles, "import circles in benchmarks/:\n" + "\n".join(" | ".join(c) for c in circles)


def test_benchmarks_rules_see_a_circle_a_tests_import_and_a_path_edit(tmp_path: Path) -> None:
    root = tmp_path / "benchmarks"
    (root / "perf").mkdir(parents=True)
    for name in ("__init__.py", "perf/__init__.py", "perf/page.py"):
        (root / name).write_text("")
    (root / "perf" / "a.py").write_text("def f():\n    from benchmarks.perf import b\n")
    (root / "perf" / "b.py").write_text("from .c import x\nfrom benchmarks.perf import page\n")
    (root / "perf" / "c.py").write_text("import benchmarks.perf.a\nimport sys\nsys.path.insert(0, 'tests')\n"
                                        "from conftest import TINY_RUN\nfrom tests.helpers import y\n")
    # a -> b -> c -> a is one circle; b -> page leaves it
    assert import_circles(root) == [["benchmarks.perf.a -> benchmarks.perf.b", "benchmarks.perf.b -> benchmarks.perf.c",
                                     "benchmarks.perf.c -> benchmarks.perf.a"]]
    assert sorted(rule_breaks(root, ("conftest",))) == [
        "benchmarks.perf.c -> conftest (tests/)", "benchmarks.perf.c -> tests.helpers (tests/)",
        "benchmarks.perf.c:3 edits sys.path"]
    (root / "perf" / "c.py").write_text("")
    assert import_circles(root) == [] and rule_breaks(root, ()) == []
