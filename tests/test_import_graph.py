"""The arrows that must never exist between prover's rooms (docs/architecture.md, "Arrows that must never
exist"), checked on the source with ``ast``: every ``import x`` and ``from x import y`` anywhere in a file
(module level, inside functions, under ``TYPE_CHECKING``: a dependency is a dependency), relative imports
resolved, plus ``importlib.import_module("...")`` with a literal name.

Each rule is one named case; docs/architecture.md names the same cases (tests/test_architecture_page.py keeps
its lists of rules and floors equal to this file's). A known violation that another issue removes goes on its
case as ``marks=pytest.mark.xfail(strict=True, reason=...)``: strict, so that the day it is fixed the mark
fails and must come off.

Besides the named rules, two shapes of the whole graph: no import circle (``import_circles`` takes any
package root, so benchmarks/ can be held to it as well), and every import points down the floors of
``FLOORS`` or stays on its own floor (``upward_imports``); the floors are the table of docs/architecture.md.
Every module these tables name exists, and every module of prover/ stands on a floor and (in engines/) is
the engine contract or an implementation, so a table cannot keep a name the tree lost.

An import inside a function (in prover/, plugins/ and examples/plugins/) is kept there for a cost (torch, an
optional extra, a command's start), and a comment says which: on the import's line, on the line above it, or
above the run of imports it opens (``unexplained_imports``); a tool's directive alone (``# noqa: F401``) says
nothing.

``prover.judges.health`` counts as judge contract, beside ``base``: it reads only contract data (a
judge's ``JudgeUsage`` and ``JudgeResult``, and ``max_failed_steps``, a field every judge has) and
decides what the framework does when any judge keeps failing; it builds or knows no judge. The rule
``judge-contract-imports-no-judge-implementation`` keeps it that way.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PROVER = REPO / "prover"
JUDGE_CONTRACT = ("prover.judges.base", "prover.judges.health")
# every module of prover/engines/ is the contract or an implementation (hf with its decode loop, fused step,
# small-batch kernels, weight arena and KV helpers)
ENGINE_CONTRACT = ("prover.engines", "prover.engines.base")
ENGINE_IMPLEMENTATIONS = ("prover.engines.hf", "prover.engines.decode", "prover.engines.fused_step",
                          "prover.engines.decode_kernels", "prover.engines.kv_cache", "prover.engines.prefix",
                          "prover.engines.weight_arena",
                          "prover.engines.sglang*")


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


PARTS = ("prover.envs", "prover.engines", "prover.credit", "prover.judges", "prover.retrieval")
CONFIG_LOADING = ("prover.config_load", "prover.settings.config_checks", "prover.settings.config_text",
                  "prover.settings.config_overrides")

RULES = [
    pytest.param(Rule(("prover.credit",), ("prover.judges",), JUDGE_CONTRACT),
                 id="credit-imports-only-judge-contract"),
    pytest.param(Rule(JUDGE_CONTRACT, ("prover.judges",), JUDGE_CONTRACT),
                 id="judge-contract-imports-no-judge-implementation"),
    pytest.param(Rule(("prover.envs",), ("prover.credit", "prover.engines", "prover.learning.learner")),
                 id="envs-import-no-credit-engines-or-learner"),
    pytest.param(Rule(("prover.engines",), ("prover.envs", "prover.rollout")),
                 id="engines-import-no-envs-or-rollout"),
    pytest.param(Rule(("prover.learning",), ENGINE_IMPLEMENTATIONS),
                 id="learner-imports-no-engine-implementation"),
    pytest.param(Rule(("prover.policy",), ENGINE_IMPLEMENTATIONS),
                 id="policy-imports-no-engine-implementation"),
    pytest.param(Rule(("prover.config", *CONFIG_LOADING), ENGINE_IMPLEMENTATIONS),
                 id="config-imports-no-engine-implementation"),
    pytest.param(Rule(("prover.config",), ("prover.registry", "prover.plugin_config", *PARTS, *CONFIG_LOADING)),
                 id="config-schema-imports-no-registry-plugin-or-env"),
    pytest.param(Rule(("prover.registry",), PARTS), id="registry-imports-nothing-behind-its-names"),
]
# The whole-graph checks below, named as docs/architecture.md names them beside RULES.
GRAPH_CHECKS = ("no-import-circles", "imports-point-down-the-floors")

# The floors of the house, lowest first (docs/architecture.md, "Floors", is the same table): a module may
# import from its own floor and the floors below, never from one above. A name covers the modules inside it
# (a package's name places its modules on its floor, but for those named on another floor: the most specific
# name wins); the root package ``prover`` (the lazy public API) covers itself alone, so a new module must be
# placed here.
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    ("ground", ("prover.errors", "prover.types", "prover.seeding", "prover.progress", "prover.system",
                "prover.settings.strict_numbers", "prover.settings.yaml_files", "prover.learning.padding",
                "prover.episodes.literal_text", "prover.episodes.episode_chat", "prover.commands.svgchart")),
    ("schema", ("prover.config",)),
    ("registry", ("prover.registry", "prover.plugin_config", "prover.settings")),
    ("parts", ("prover.envs", "prover.engines", "prover.retrieval", "prover.chat", "prover.judges",
               "prover.learning.model_folder", "prover.learning.modeling", "prover.learning.logprobs",
               "prover.learning.learner_rows", "prover.learning.learner_loss",
               "prover.learning.lora", "prover.learning.frozen_weights", "prover.episodes.turn_prompts")),
    ("records", ("prover.rundir.checkpoint_state", "prover.rundir.trackers", "prover.rundir.samples")),
    ("run folder", ("prover.rundir",)),
    ("machinery", ("prover.rollout", "prover.episodes", "prover.credit", "prover.learning")),
    ("policy", ("prover.policy", "prover.rundir.eval_cache")),
    ("assembly", ("prover.trainer", "prover.config_load", "prover.rundir.preflight", "prover.settings.config_checks")),
    ("commands", ("prover", "prover.cli", "prover.bench", "prover.commands")),
]


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same package tree it imports (any form, anywhere in the file), for the
    package at ``root`` (``prover/``, or ``benchmarks/``): imports from outside the tree are left out."""
    paths = sorted(root.rglob("*.py"))
    modules = {module_name(path, root) for path in paths}
    graph = {}
    for path in paths:
        importer = module_name(path, root)
        found = imported_modules(path.read_text(), importer, path.name == "__init__.py", modules)
        graph[importer] = {name for name in found if name in modules and name != importer}
    return graph


def import_circles(root: Path) -> list[list[str]]:
    """Each import circle of the package at ``root``: the modules of one strongly connected component of
    its import graph (Tarjan's algorithm, iteratively), as ``a -> b`` lines for every import inside it."""
    graph = import_graph(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None and target not in index:
                index[target] = low[target] = len(index)
                stack.append(target)
                work.append((target, iter(sorted(graph[target]))))
            elif target is not None:
                if target in stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    members = set(stack[stack.index(node):])
                    del stack[stack.index(node):]
                    if len(members) > 1:
                        circles.append([f"{a} -> {b}" for a in sorted(members) for b in sorted(graph[a] & members)])
    return circles


def floor_of(name: str, floors: list[tuple[str, tuple[str, ...]]] = FLOORS) -> int | None:
    """The index in ``floors`` of the most specific name that covers module ``name``; None if none does.
    A floor's name covers the modules inside it, except the root package, which covers itself alone."""
    best: tuple[int, int] | None = None
    for i, (_, names) in enumerate(floors):
        for room in names:
            covers = name == room or ("." in room and name.startswith(room + "."))
            if covers and (best is None or len(room) > best[0]):
                best = (len(room), i)
    return None if best is None else best[1]


def upward_imports(root: Path = PROVER, floors: list[tuple[str, tuple[str, ...]]] = FLOORS) -> list[str]:
    """``importer (floor) -> imported (floor)`` for every import that points from a lower floor up."""
    out = []
    for importer, imported in sorted(import_graph(root).items()):
        for name in sorted(imported):
            low, high = floor_of(importer, floors), floor_of(name, floors)
            if low is not None and high is not None and high > low:
                out.append(f"{importer} ({floors[low][0]}) -> {name} ({floors[high][0]})")
    return out


def test_no_import_circle_among_prover_modules() -> None:
    circles = import_circles(PROVER)
    assert not circles, f"{len(circles)} import circles:\n" + "\n\n".join("\n".join(c) for c in circles)


def test_every_prover_module_stands_on_one_floor() -> None:
    unplaced = sorted(m for m in import_graph(PROVER) if floor_of(m) is None)
    assert not unplaced, "modules on no floor (add them to FLOORS and docs/architecture.md):\n" + "\n".join(unplaced)


def test_imports_point_down_the_floors() -> None:
    found = upward_imports()
    assert not found, f"{len(found)} imports point from a lower floor up:\n" + "\n".join(found)


def test_circles_and_upward_imports_are_found(tmp_path: Path) -> None:
    """A fake package with a two-module circle, a three-module circle through a function-level relative
    import and a TYPE_CHECKING one, an upward import, and a module importing itself (no circle)."""
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    for name, text in {"__init__.py": "", "sub/__init__.py": "",
                       "a.py": "import pkg.b\n", "b.py": "def f():\n    from . import a\n",
                       "c.py": "from pkg.sub import d\n",
                       "sub/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..e import X\n",
                       "e.py": "import importlib\nimportlib.import_module('pkg.c')\n",
                       "low.py": "import pkg.low\nfrom pkg import high\n", "high.py": "import os\n"}.items():
        (root / name).write_text(text)
    assert import_circles(root) == [["pkg.a -> pkg.b", "pkg.b -> pkg.a"],
                                    ["pkg.c -> pkg.sub.d", "pkg.e -> pkg.c", "pkg.sub.d -> pkg.e"]]
    floors = [("low", ("pkg.low",)), ("high", ("pkg.high", "pkg"))]
    assert upward_imports(root, floors) == ["pkg.low (low) -> pkg.high (high)"]
    assert floor_of("pkg.anything", floors) is None  # the root package covers itself alone
    assert floor_of("pkg", floors) == 1


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
                                                           "prover.engines.hf", "prover.engines.prefix.x"))
    assert not any(within(m, ENGINE_IMPLEMENTATIONS) for m in ("prover.engines", "prover.engines.base",
                                                               "prover.engines.hfx"))


def table_names() -> set[str]:
    """Every module name this file's tables hold: the floors, the rules' three lists, the named groups."""
    names = {room for _, rooms in FLOORS for room in rooms}
    for case in RULES:
        rule = case.values[0]
        names.update(rule.sources + rule.forbidden + rule.allowed)
    return names | set(JUDGE_CONTRACT + ENGINE_CONTRACT + ENGINE_IMPLEMENTATIONS + PARTS + CONFIG_LOADING)


def test_every_module_the_tables_name_exists() -> None:
    modules = set(import_graph(PROVER))
    missing = sorted(n for n in table_names() if not any(within(m, (n,)) for m in modules))
    assert not missing, "the tables name modules prover/ does not have:\n" + "\n".join(missing)


def test_every_engine_module_is_the_contract_or_an_implementation() -> None:
    engines = [m for m in import_graph(PROVER) if within(m, ("prover.engines",))]
    unplaced = sorted(m for m in engines if m not in ENGINE_CONTRACT and not within(m, ENGINE_IMPLEMENTATIONS))
    assert not unplaced, "engine modules in neither ENGINE_CONTRACT nor ENGINE_IMPLEMENTATIONS:\n" + "\n".join(unplaced)


TOOL_DIRECTIVE = re.compile(r"#\s*(noqa\b(:\s*[A-Z]+[0-9]+(\s*,\s*[A-Z]+[0-9]+)*)?|type:\s*ignore\S*|pragma:\S*)")


def unexplained_imports(source: str) -> list[int]:
    """The line of every import inside a function (at any depth) that no comment explains: none on its own
    lines, and none on a comment line just above it or above an earlier import of its run (imports one
    after another in one block of statements, blank lines allowed between them)."""
    said: dict[int, bool] = {}  # line -> a comment with words on it; True when the line is that comment alone
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and re.search(r"[A-Za-z]{2}", TOOL_DIRECTIVE.sub("", tok.string)):
            said[tok.start[0]] = not tok.line[:tok.start[1]].strip()
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for field in ast.iter_fields(node):
            block = field[1] if isinstance(field[1], list) else []
            run_explained = False  # a comment line above an import explains the imports that follow it
            for stmt in block:
                if not isinstance(stmt, (ast.Import, ast.ImportFrom)):
                    run_explained = False
                    continue
                run_explained = run_explained or bool(said.get(stmt.lineno - 1))
                own = any(line in said for line in range(stmt.lineno, stmt.end_lineno + 1))
                if in_function and not (own or run_explained):
                    found.append(stmt.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    visit(ast.parse(source), False)
    return sorted(found)


def test_every_function_level_import_says_why() -> None:  # prover's, and the plugins' (plugins/, examples/)
    paths = [p for root in (PROVER, REPO / "plugins", REPO / "examples" / "plugins") for p in root.rglob("*.py")]
    found = [f"{path.relative_to(REPO)}:{line}" for path in paths for line in unexplained_imports(path.read_text())]
    assert not found, (f"{len(found)} imports inside a function with no comment saying why (the cost it avoids, "
                       "or the circle it breaks); move each to the top if it costs nothing:\n" + "\n".join(found))


def test_unexplained_imports_finds_each_form() -> None:
    source = ("import os\ndef f():\n"                  # 1: module level, no comment needed
              "    import json\n"                       # 3: no comment
              "    import re  # lazy: why\n    import csv\n"  # 5: the comment beside re is about re alone
              "    # torch is heavy\n    import torch\n"
              "    from a import (b,\n                   c)\n"  # 8: a run headed by the comment above torch
              "\n    from prover import x\n"           # 11: still the run (a blank line between)
              "    y = 1\n    import gzip  # noqa: F401\n"  # 13: a directive is no reason
              "    import bz2  # noqa: F401  (an optional codec)\n"
              "    y = 2  # a comment on code above\n    import lzma\n"  # 16: that comment is about the code
              "class K:\n    def m(self):\n        try:\n"
              "            import yaml\n"               # 20: in a method, inside try
              "        except ImportError:\n            pass\n        def inner():\n"
              "            from . import z\n")          # 24: in a nested function
    assert unexplained_imports(source) == [3, 5, 13, 16, 20, 24]
