"""The arrows that must never exist between prover's rooms (../shared/DESIGN.md, "Arrows that must never
exist"), checked on the source with ``ast``: every ``import x`` and ``from x import y`` anywhere in a file
(module level, inside functions, under ``TYPE_CHECKING``: a dependency is a dependency), relative imports
resolved, plus ``importlib.import_module("...")`` with a literal name.

Each rule is one named case. A known violation that another issue removes goes on its case as
``marks=pytest.mark.xfail(strict=True, reason=...)``: strict, so that the day it is fixed the mark fails
and must come off.

``prover.judges.health`` counts as judge contract, beside ``base``: it reads only contract data (a
judge's ``JudgeUsage`` and ``JudgeResult``, and ``max_failed_steps``, a field every judge has) and
decides what the framework does when any judge keeps failing; it builds or knows no judge. The rule
``judge-contract-imports-no-judge-implementation`` keeps it that way.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PROVER = Path(__file__).resolve().parents[1] / "prover"
JUDGE_CONTRACT = ("prover.judges.base", "prover.judges.health")
ENGINE_IMPLEMENTATIONS = ("prover.engines.hf", "prover.engines.sglang*", "prover.engines.tiny")


def module_name(path: Path, root: Path = PROVER) -> str:
    """``root/credit/grpo.py`` -> ``prover.credit.grpo``; a package's ``__init__.py`` is the package."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def resolve(importer: str, is_package: bool, level: int, module: str | None) -> str:
    """The absolute name ``from <level dots><module> import ...`` means inside ``importer``."""
    if level == 0:
        return module or ""
    package = importer.split(".") if is_package else importer.split(".")[:-1]
    base = package[: len(package) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def imported_modules(source: str, importer: str, is_package: bool, modules: set[str]) -> set[str]:
    """Every module ``source`` imports. ``from x import y`` imports ``x.y`` when that is one of ``modules``
    (a submodule), else ``x`` itself (``y`` is a name defined in ``x``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = resolve(importer, is_package, node.level, node.module)
            for alias in node.names:
                found.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.add(node.args[0].value)
    return found


def within(name: str, prefixes: tuple[str, ...]) -> bool:
    """``name`` is one of ``prefixes`` or inside one; a prefix ending in ``*`` also matches longer names
    (``prover.engines.sglang*`` is sglang, sglang_http, sglang_sync)."""
    for prefix in prefixes:
        if prefix.endswith("*") and name.startswith(prefix[:-1]):
            return True
        if name == prefix or name.startswith(prefix + "."):
            return True
    return False


@dataclass(frozen=True)
class Rule:
    """Modules within ``sources`` must not import a module within ``forbidden`` unless it is within ``allowed``."""

    sources: tuple[str, ...]
    forbidden: tuple[str, ...]
    allowed: tuple[str, ...] = ()


def violations(rule: Rule, root: Path = PROVER) -> list[str]:
    """``importer -> imported`` for every import in ``root`` that breaks ``rule``."""
    paths = sorted(root.rglob("*.py"))
    modules = {module_name(path, root) for path in paths}
    out = []
    for path in paths:
        importer = module_name(path, root)
        if not within(importer, rule.sources):
            continue
        for name in sorted(imported_modules(path.read_text(), importer, path.name == "__init__.py", modules)):
            if within(name, rule.forbidden) and not within(name, rule.allowed):
                out.append(f"{importer} -> {name}")
    return out


RULES = [
    pytest.param(Rule(("prover.credit",), ("prover.judges",), JUDGE_CONTRACT),
                 id="credit-imports-only-judge-contract"),
    pytest.param(Rule(JUDGE_CONTRACT, ("prover.judges",), JUDGE_CONTRACT),
                 id="judge-contract-imports-no-judge-implementation"),
    pytest.param(Rule(("prover.engines",), ("prover.envs", "prover.rollout")),
                 id="engines-import-no-envs-or-rollout"),
    pytest.param(Rule(("prover.learner",), ENGINE_IMPLEMENTATIONS),
                 id="learner-imports-no-engine-implementation"),
    pytest.param(Rule(("prover.policy",), ENGINE_IMPLEMENTATIONS),
                 id="policy-imports-no-engine-implementation"),
    pytest.param(Rule(("prover.config", "prover.config_checks"), ENGINE_IMPLEMENTATIONS),
                 id="config-imports-no-engine-implementation"),
]


@pytest.mark.parametrize("rule", RULES)
def test_no_forbidden_import(rule: Rule) -> None:
    found = violations(rule)
    assert not found, "forbidden imports:\n" + "\n".join(found)


def test_rules_see_function_level_relative_and_dynamic_imports(tmp_path: Path) -> None:
    """A fake prover tree with one violation of each import form; every one must be reported, and the
    imports of the contract (in each form) must not be."""
    root = tmp_path / "prover"
    for name in ("credit", "judges"):
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    for name in ("base", "health", "agentic", "tools", "contrast"):
        (root / "judges" / f"{name}.py").write_text("")
    (root / "credit" / "ok.py").write_text(
        "import prover.judges.base\n"
        "from prover.judges import base, health\n"
        "from ..judges.health import FailureWatch\n"
        "def late():\n"
        "    from prover.judges.base import Judge\n")
    (root / "credit" / "bad.py").write_text(
        "from prover.judges import make_judge\n"
        "def build():\n"
        "    from ..judges.agentic import LocalJudge\n"
        "    import prover.judges.tools as t\n"
        "    import importlib\n"
        "    return importlib.import_module('prover.judges.contrast')\n")
    rule = Rule(("prover.credit",), ("prover.judges",), JUDGE_CONTRACT)
    assert violations(rule, root) == ["prover.credit.bad -> prover.judges",
                                      "prover.credit.bad -> prover.judges.agentic",
                                      "prover.credit.bad -> prover.judges.contrast",
                                      "prover.credit.bad -> prover.judges.tools"]


def test_resolve_relative_imports() -> None:
    assert resolve("prover.credit.grpo", False, 1, "base") == "prover.credit.base"
    assert resolve("prover.credit.grpo", False, 2, "judges.base") == "prover.judges.base"
    assert resolve("prover.credit", True, 1, "grpo") == "prover.credit.grpo"
    assert resolve("prover.credit", True, 2, None) == "prover"
    assert resolve("prover.x", False, 0, "os.path") == "os.path"


def test_sglang_star_matches_every_sglang_module() -> None:
    assert all(within(m, ENGINE_IMPLEMENTATIONS) for m in ("prover.engines.sglang", "prover.engines.sglang_http",
                                                           "prover.engines.hf", "prover.engines.tiny.build"))
    assert not any(within(m, ENGINE_IMPLEMENTATIONS) for m in ("prover.engines", "prover.engines.base",
                                                               "prover.engines.hfx"))


# -- benchmarks/: a package run with python -m from the repository root (benchmarks/README.md) --------------
BENCHMARKS = PROVER.parent / "benchmarks"
TEST_MODULES = tuple(sorted(p.stem for p in (PROVER.parent / "tests").glob("*.py")))  # conftest, test_x, ...


def benchmarks_imports(root: Path = BENCHMARKS, test_modules: tuple[str, ...] = TEST_MODULES
                       ) -> tuple[dict[str, set[str]], list[str]]:
    """The import graph among ``root``'s own modules, and what breaks its rules: an import of a module of
    tests/ (by its top-level name, as ``sys.path.insert(0, "tests")`` would allow, or as ``tests.x``) and any
    ``sys.path`` edit (the package imports as ``benchmarks.x`` from the root, nothing else)."""
    paths = sorted(root.rglob("*.py"))
    modules = {module_name(path, root) for path in paths}
    graph: dict[str, set[str]] = {}
    broken = []
    for path in paths:
        importer, source = module_name(path, root), path.read_text()
        found = imported_modules(source, importer, path.name == "__init__.py", modules)
        graph[importer] = {m for m in found if m in modules and m != importer}
        broken += [f"{importer} -> {m} (tests/)" for m in sorted(found)
                   if m.split(".")[0] == "tests" or m.split(".")[0] in test_modules]
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Attribute) and ast.unparse(node).startswith("sys.path."):
                broken.append(f"{importer}:{node.lineno} edits sys.path")
    return graph, broken


def first_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle of ``graph`` as ``[a, b, ..., a]``, or ``[]`` when there is none (depth-first search;
    a module met again while still on the path closes a circle)."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str]:
        if node in path:
            return path[path.index(node):] + [node]
        if node in done:
            return []
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if cycle := visit(nxt):
                return cycle
        path.pop()
        done.add(node)
        return []

    for start in sorted(graph):
        if cycle := visit(start):
            return cycle
    return []


def test_benchmarks_have_no_import_circle_and_import_nothing_from_tests() -> None:
    graph, broken = benchmarks_imports()
    assert "benchmarks.perf.page" in graph and graph["benchmarks.perf.run"], "benchmarks/ was not read"
    assert not broken, "benchmarks/ must not import tests/ or edit sys.path:\n" + "\n".join(broken)
    cycle = first_cycle(graph)
    assert not cycle, "import circle in benchmarks/: " + " -> ".join(cycle)


def test_benchmarks_rules_see_a_circle_a_tests_import_and_a_path_edit(tmp_path: Path) -> None:
    root = tmp_path / "benchmarks"
    (root / "perf").mkdir(parents=True)
    for name in ("__init__.py", "perf/__init__.py", "perf/page.py"):
        (root / name).write_text("")
    (root / "perf" / "a.py").write_text("def f():\n    from benchmarks.perf import b\n")
    (root / "perf" / "b.py").write_text("from .c import x\nfrom benchmarks.perf import page\n")
    (root / "perf" / "c.py").write_text("import benchmarks.perf.a\nimport sys\nsys.path.insert(0, 'tests')\n"
                                        "from conftest import TINY_RUN\nfrom tests.helpers import y\n")
    graph, broken = benchmarks_imports(root, ("conftest",))
    assert first_cycle(graph) == ["benchmarks.perf.a", "benchmarks.perf.b", "benchmarks.perf.c", "benchmarks.perf.a"]
    assert sorted(broken) == ["benchmarks.perf.c -> conftest (tests/)", "benchmarks.perf.c -> tests.helpers (tests/)",
                              "benchmarks.perf.c:3 edits sys.path"]
    (root / "perf" / "c.py").write_text("")
    assert first_cycle(benchmarks_imports(root, ())[0]) == []
