"""The lock (constraints/lock.txt, the whole tree; constraints/lock-core.txt, the core's share) against what it
locks: every dependency a pyproject declares is locked at a version its bounds allow, every entry is hashed,
the core's lock is the whole tree's at the same versions and files, and the installed versions are the locked
ones. A pyproject change without `constraints/refresh-lock` fails here."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
LOCK, CORE_LOCK, LOCK_IN = (ROOT / "constraints" / n for n in ("lock.txt", "lock-core.txt", "lock.in"))
ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(\S+)")


def read_lock(path: Path) -> dict[str, tuple[str, frozenset[str]]]:
    """Name (canonical) -> (version, the hashes of its files), from a `pip-compile`-style lock."""
    entries: dict[str, tuple[str, frozenset[str]]] = {}
    name = None
    for line in path.read_text(encoding="utf-8").splitlines():
        match = ENTRY.match(line)
        if match:
            name = canonicalize_name(match[1])
            entries[name] = (match[2], frozenset())
        elif name and line.strip().startswith("--hash=sha256:"):
            version, hashes = entries[name]
            entries[name] = (version, hashes | {line.strip().removeprefix("--hash=sha256:").rstrip(" \\")})
        elif line and not line.startswith(" "):
            name = None
    return entries


def locked_projects(lock_in: Path) -> list[tuple[Path, set[str]]]:
    """The local projects a lock input names (``-e path[extra,...]``), with their extras."""
    projects = []
    for line in lock_in.read_text(encoding="utf-8").splitlines():
        if line.startswith("-e "):
            path, _, extras = line[3:].strip().partition("[")
            projects.append((ROOT / path, {e.strip() for e in extras.rstrip("]").split(",") if e.strip()}))
    return projects


def declared(projects: list[tuple[Path, set[str]]]) -> tuple[set[str], list[tuple[str, Requirement]]]:
    """The local projects' names, and every requirement they declare for the extras named, that applies here."""
    names, requirements = set(), []
    for folder, extras in projects:
        project = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]
        names.add(canonicalize_name(project["name"]))
        texts = list(project.get("dependencies", []))
        for extra in extras:
            texts += project.get("optional-dependencies", {})[extra]
        for text in texts:
            req = Requirement(text)
            if req.marker is None or any(req.marker.evaluate({**default_environment(), "extra": e})
                                         for e in extras | {""}):
                requirements.append((project["name"], req))
    return names, requirements


def unmet(lock: dict[str, tuple[str, frozenset[str]]], lock_in: Path) -> list[str]:
    """Each declared requirement that ``lock`` lacks or locks at a version outside its bounds, as a line."""
    local, requirements = declared(locked_projects(lock_in))
    problems = []
    for project, req in requirements:
        name = canonicalize_name(req.name)
        if name in local:
            continue
        if name not in lock:
            problems.append(f"{project} needs {req}, which the lock lacks")
        elif not req.specifier.contains(Version(lock[name][0]), prereleases=True):
            problems.append(f"{project} needs {req}; the lock has {lock[name][0]}")
    return problems


REFRESH = "run constraints/refresh-lock (docs/quickstart.md, 'The lock')"


@pytest.mark.parametrize(("lock", "lock_in"), [(LOCK, LOCK_IN), (CORE_LOCK, LOCK_IN.with_name("lock-core.in"))],
                         ids=["whole-tree", "core"])
def test_every_declared_dependency_is_locked_within_its_bounds(lock, lock_in):
    assert unmet(read_lock(lock), lock_in) == [], REFRESH


def test_the_check_sees_a_new_dependency_and_a_raised_bound(tmp_path):
    """The check above, on a project whose pyproject moved past the lock."""
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "pyproject.toml").write_text('[project]\nname = "p"\ndependencies = ["numpy>=99", "x-new"]\n'
                                                   '[project.optional-dependencies]\nextra = ["y-extra"]\n')
    (tmp_path / "lock.in").write_text(f"-e {tmp_path / 'p'}[extra]\n")
    problems = unmet({"numpy": ("2.0.0", frozenset())}, tmp_path / "lock.in")
    assert problems == ["p needs numpy>=99; the lock has 2.0.0", "p needs x-new, which the lock lacks",
                        "p needs y-extra, which the lock lacks"]


def test_every_entry_is_pinned_and_hashed_and_no_local_project_is_in_the_lock():
    local = declared(locked_projects(LOCK_IN))[0]
    for path in (LOCK, CORE_LOCK):
        entries = read_lock(path)
        assert entries and all(hashes for _, hashes in entries.values()), path.name
        assert not local & set(entries), f"{path.name} holds a local project; pip cannot check its hash"
        assert not any(line.startswith("-e") for line in path.read_text().splitlines()), path.name


def test_the_core_lock_is_the_whole_trees_at_the_same_versions_and_files():
    whole = read_lock(LOCK)
    strays = {name: entry for name, entry in read_lock(CORE_LOCK).items() if whole.get(name) != entry}
    assert strays == {}, REFRESH


def test_the_installed_versions_are_the_locked_ones():
    wrong = {}
    for name, (version, _) in read_lock(LOCK).items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if installed is None or Version(installed) != Version(version):
            wrong[name] = (version, installed)
    assert wrong == {}, "(locked, installed): install again with `pip install -r constraints/lock.txt`"
