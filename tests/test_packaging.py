"""The distribution is prover-rl (PyPI's `prover` is an unrelated placeholder), and every plugin depends on
prover-rl: installed alone with a plain `pip install`, a plugin finds prover-rl already there and never
pulls the placeholder."""

from __future__ import annotations

import importlib.metadata
import json
import socket
import subprocess
import sys
import sysconfig
import textwrap
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = sorted(p.parent for p in (ROOT / "plugins").glob("*/pyproject.toml"))


def _project(folder: Path) -> dict:
    return tomllib.loads((folder / "pyproject.toml").read_text())["project"]


def _dependency_names(folder: Path) -> set[str]:
    return {canonicalize_name(Requirement(d).name) for d in _project(folder).get("dependencies", [])}


def test_the_distribution_is_prover_rl_and_the_command_stays_prover() -> None:
    project = _project(ROOT)
    assert project["name"] == "prover-rl"
    assert project["scripts"]["prover"] == "prover.cli:main"
    # what this environment installed from the checkout carries the new name
    assert any(ep.name == "prover" for ep in importlib.metadata.distribution("prover-rl").entry_points)


def test_the_glob_finds_the_shipped_plugins() -> None:
    assert {p.name for p in PLUGINS} >= {"prover-alfworld", "prover-searchr1", "prover-textmaze", "prover-webshop"}


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.name)
def test_every_plugin_depends_on_prover_rl_never_on_bare_prover(plugin: Path) -> None:
    names = _dependency_names(plugin)
    assert "prover-rl" in names
    assert "prover" not in names


def _pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=3).close()
        return True
    except OSError:
        return False


def _venv_with_prover_rl(where: Path) -> Path:
    """A fresh venv that already holds prover-rl and its dependencies: this interpreter's site-packages
    (where prover-rl is installed) is added through a .pth file, so pip counts them as installed. The venv
    has no pip or setuptools of its own (they would shadow newer ones there and make pip "upgrade" them);
    it runs the outer pip, which installs into the venv it runs in. Returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=60)
    python = where / "bin" / "python"
    inner = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                           check=True, capture_output=True, text=True, timeout=60).stdout.strip()
    outer = sysconfig.get_paths()["purelib"]
    Path(inner, "outer-site.pth").write_text(f"import site; site.addsitedir({outer!r})\n")
    return python


INSPECT = textwrap.dedent("""
    import importlib.metadata as md, json, sys
    plugin = md.distribution(sys.argv[1])
    print(json.dumps({"requires": plugin.requires, "where": str(plugin.locate_file("")),
                      "names": sorted(d.metadata["Name"] for d in md.distributions())}))
""")


def _install_alone(plugin: Path, where: Path) -> str:
    """`pip install <plugin>` with no flags, as a user types it, into a venv of its own; the problems seen."""
    python = _venv_with_prover_rl(where / "venv")
    # cwd away from the checkout, whose egg-info folders would count as installed distributions
    done = subprocess.run([python, "-m", "pip", "install", str(plugin)], cwd=where, capture_output=True,
                          text=True, timeout=300, check=False)
    if done.returncode != 0:
        return f"{plugin.name}: pip failed: {done.stdout[-1500:]}{done.stderr[-1500:]}"
    info = json.loads(subprocess.run([python, "-c", INSPECT, plugin.name], cwd=where, capture_output=True,
                                     text=True, check=True, timeout=60).stdout)
    problems = []
    if not Path(info["where"]).resolve().is_relative_to(where.resolve()):
        problems.append(f"installed at {info['where']}, not in the venv")
    if "prover-rl" not in {canonicalize_name(Requirement(r).name) for r in info["requires"]}:
        problems.append(f"its Requires-Dist {info['requires']} lacks prover-rl")
    if "prover" in {canonicalize_name(n) for n in info["names"]}:
        problems.append("a distribution called prover got installed (PyPI's placeholder)")
    if "Requirement already satisfied: prover-rl" not in done.stdout:
        problems.append("pip did not find prover-rl already installed")
    return "; ".join(f"{plugin.name}: {p}" for p in problems)


@pytest.mark.slow
def test_each_plugin_installs_alone_next_to_prover_rl(tmp_path: Path) -> None:
    if not _pypi_reachable():
        pytest.skip("pypi.org:443 is unreachable: pip's build isolation fetches setuptools from PyPI")
    for plugin in PLUGINS:  # else pip would build them (alfworld's fast-downward takes minutes)
        missing = sorted(n for n in _dependency_names(plugin) - {"prover-rl"} if not _installed(n))
        assert not missing, f"{plugin.name}'s dependencies {missing} are not installed in this environment"
    # one venv and one pip process per plugin, side by side: each mostly waits on its build isolation
    with ThreadPoolExecutor(len(PLUGINS)) as pool:
        problems = list(pool.map(lambda p: _install_alone(p, tmp_path / p.name), PLUGINS))
    assert not [p for p in problems if p], [p for p in problems if p]


def _installed(name: str) -> bool:
    try:
        importlib.metadata.distribution(name)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False
