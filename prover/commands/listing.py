"""What `prover list` says a registered name is: the first paragraph of its docstring, read from the source
file, so that listing imports no part and no plugin (a registry's entries stay lazy until a run names them)."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import sys
from pathlib import Path


def description(target: object) -> str:
    """What `prover list` says a name is: the first paragraph of its class's docstring, else of its module's
    (a plugin package or a method's module says what it is in its first line)."""
    doc = _docstring(target)
    if doc is None and isinstance(target, str):
        doc = _docstring(target.partition(":")[0])
    elif doc is None:
        doc = inspect.getdoc(sys.modules.get(target.__module__))
    return (doc or "(no description: neither the class nor its module has a docstring)").split("\n\n")[0]


def _docstring(target: object, hops: int = 3) -> str | None:
    """The docstring of a registry target. A ``module:Object`` string is read from the module's source,
    so that listing imports no plugin, following ``from ... import Object`` where the module re-exports it
    (a package's __init__), up to ``hops`` modules deep; a bare ``module`` is the module's own docstring.
    None where the object has none or is not found."""
    if not isinstance(target, str):
        return inspect.getdoc(target)
    module, _, attr = target.partition(":")
    try:
        found_at = _module_source(module)
        if found_at is None:
            return f"(does not load: no module named {module!r})"
        origin, is_package = found_at
        if origin.suffix != ".py":
            return None
        tree = ast.parse(origin.read_text(encoding="utf-8"))
    except Exception as exc:  # noqa: BLE001 - a broken plugin is listed with its problem, not fatal
        return f"(does not load: {type(exc).__name__}: {exc})"
    node: ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef = tree
    for part in [p for p in attr.split(".") if p]:
        found = next((n for n in node.body if getattr(n, "name", None) == part), None)
        if found is None and hops > 0 and isinstance(node, ast.Module):
            source = _reexported_from(node, part, module, is_package)
            return _docstring(f"{source}:{attr}", hops - 1) if source else None
        if not isinstance(found, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        node = found
    return ast.get_docstring(node)


def _module_source(module: str) -> tuple[Path, bool] | None:
    """Where ``module``'s source lies and whether it is a package, found without importing anything: the
    top-level package by ``find_spec`` (which imports nothing for a top-level name), then folder by folder
    (``find_spec`` of a submodule would import its parent packages, and with them the plugins)."""
    top, *rest = module.split(".")
    spec = importlib.util.find_spec(top)
    if spec is None:
        return None
    if not rest:
        return (Path(spec.origin), spec.submodule_search_locations is not None) if spec.origin else None
    folders = [Path(f) for f in (spec.submodule_search_locations or [])]
    for k, part in enumerate(rest):
        last = k == len(rest) - 1
        for folder in folders:
            if (folder / part / "__init__.py").is_file():
                if last:
                    return folder / part / "__init__.py", True
                folders = [folder / part]
                break
            if last and (folder / f"{part}.py").is_file():
                return folder / f"{part}.py", False
        else:
            return None
    return None


def _reexported_from(tree: ast.Module, name: str, module: str, is_package: bool) -> str | None:
    """The module that ``tree`` (the source of ``module``) imports ``name`` from, absolute; None if it does not."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            if not node.level:
                return node.module
            base = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
            return ".".join(base + ([node.module] if node.module else []))
    return None
