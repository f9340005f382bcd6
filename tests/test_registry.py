"""The Registry's three error paths, lazy entry points, that a broken plugin breaks only itself, that a
plugin of the wrong kind is refused when loaded, and that two distributions may not claim one name."""

from __future__ import annotations

import collections
import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from types import SimpleNamespace

from prover.errors import DuplicateName, NameNotFound, PluginLoadError
from prover.registry import AUTOLOAD_OFF_VAR, CREDIT, ENGINES, ENVS, JUDGES, Registry

NO_GROUP = "prover.tests-no-such-group"  # a group no distribution declares: known names stay exact


def fresh(group: str = NO_GROUP) -> Registry:
    return Registry("env", group)


def test_register_and_look_up_in_code() -> None:
    reg = fresh()

    @reg.register("alpha")
    class Alpha:
        pass

    assert reg.register("beta", dict) is dict
    assert reg.get("alpha") is Alpha and reg["beta"] is dict
    assert "alpha" in reg and "gamma" not in reg
    assert [(e.name, e.origin) for e in reg.entries()] == [("alpha", "code"), ("beta", "code")]


def test_registering_a_different_object_under_a_taken_name_raises() -> None:
    reg = fresh()
    reg.register("alpha", dict)
    reg.register("alpha", dict)  # the same object again is fine (a module imported twice)
    reg.register("alpha-str", "collections:OrderedDict")
    reg.register("alpha-str", "collections:OrderedDict")
    with pytest.raises(DuplicateName, match=r"env name 'alpha' is already registered \(from code\)"):
        reg.register("alpha", list)
    with pytest.raises(DuplicateName):
        reg.register("alpha")(set)
    assert reg.get("alpha") is dict


def test_unknown_name_lists_known_names_and_the_closest_match() -> None:
    reg = fresh()
    reg.register("alfworld-sim", dict)
    reg.register("webshop", list)
    with pytest.raises(NameNotFound) as err:
        reg.get("alfwrld-sim")
    msg = str(err.value)
    assert "unknown env 'alfwrld-sim'" in msg
    assert "known: alfworld-sim, webshop" in msg
    assert "did you mean 'alfworld-sim'?" in msg
    assert isinstance(err.value, KeyError)
    with pytest.raises(NameNotFound, match="did you mean") as far:
        reg.get("webshop-v0")
    assert "'webshop'" in str(far.value)
    with pytest.raises(NameNotFound, match=r"known: alfworld-sim, webshop \(or give"):
        reg.get("zzzzzzzz")


def test_module_object_strings_resolve_and_are_recorded() -> None:
    reg = fresh()
    assert reg.get("collections:OrderedDict") is collections.OrderedDict
    assert reg.get("json:JSONDecoder.decode") is json.JSONDecoder.decode
    assert {e.name: e.origin for e in reg.entries()}["collections:OrderedDict"] == "module:Object string"
    reg.register("lazy", "collections:Counter")  # a string target is imported only when asked for
    assert reg.get("lazy") is collections.Counter


@pytest.mark.parametrize("target", ["no_colon_here", "json:", ":JSONDecoder"])
def test_malformed_target_names_itself(target: str) -> None:
    reg = fresh()
    reg.register("bad", target)
    with pytest.raises(PluginLoadError) as err:
        reg.get("bad")
    assert "'bad'" in str(err.value) and repr(target) in str(err.value)
    assert "'package.module:Object'" in str(err.value)


def test_missing_module_or_attribute_is_a_plugin_load_error() -> None:
    reg = fresh()
    with pytest.raises(PluginLoadError, match="'no_such_module_xyz:Thing'.*ModuleNotFoundError"):
        reg.get("no_such_module_xyz:Thing")
    with pytest.raises(PluginLoadError, match="AttributeError"):
        reg.get("json:NoSuchThing")


def run_python(code: str, extra_path: Path | None = None, env_off: bool = False) -> str:
    """Run ``code`` in a fresh interpreter (clean sys.modules) and return its stdout."""
    env = {k: v for k, v in os.environ.items() if k != AUTOLOAD_OFF_VAR}
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(extra_path), env.get("PYTHONPATH", "")])
    if env_off:
        env[AUTOLOAD_OFF_VAR] = "1"
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_import_prover_does_not_read_entry_points() -> None:
    out = run_python("""
        import importlib.metadata as md
        import sys
        calls, real = [], md.entry_points
        md.entry_points = lambda *a, **k: calls.append(k) or real(*a, **k)
        import prover
        from prover import CREDIT, ENVS, Registry
        ENVS.register("mine", dict)
        assert ENVS.get("mine") is dict and "mine" in ENVS and "alfworld-sim" in ENVS
        Registry("env", "prover.envs")
        print("before", calls, "prover_textmaze" in sys.modules)
        ENVS.names()
        print("after", calls, "prover_textmaze" in sys.modules)
    """)
    assert "before [] False" in out
    assert "after [{'group': 'prover.envs'}] False" in out  # listing reads metadata, imports nothing


@pytest.fixture
def fake_plugin(tmp_path: Path) -> Path:
    """A fake installed distribution ``fakeplug 1.0`` with one good and one broken entry point."""
    info = tmp_path / "fakeplug-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeplug\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[prover.envs]\nfake-good = fakeplug_good:GoodEnv\nfake-broken = fakeplug_broken:BrokenEnv\n")
    (tmp_path / "fakeplug_good.py").write_text("from prover.envs import TextEnv\n\nclass GoodEnv(TextEnv):\n    pass\n")
    (tmp_path / "fakeplug_broken.py").write_text("raise RuntimeError('fakeplug exploded on import')\n")
    return tmp_path


@pytest.fixture
def on_path(fake_plugin: Path, monkeypatch: pytest.MonkeyPatch):
    """``fake_plugin`` importable in this process; its modules are forgotten afterwards."""
    monkeypatch.syspath_prepend(str(fake_plugin))
    monkeypatch.delenv(AUTOLOAD_OFF_VAR, raising=False)
    importlib.invalidate_caches()
    yield fake_plugin
    for name in ("fakeplug_good", "fakeplug_broken"):
        sys.modules.pop(name, None)


def test_a_broken_plugin_only_breaks_its_own_lookup(on_path: Path) -> None:
    reg = Registry("env", "prover.envs")
    reg.register("in-code", dict)
    origins = {e.name: e.origin for e in reg.entries()}
    assert origins["fake-good"] == origins["fake-broken"] == "entry point (fakeplug 1.0)"
    assert "fakeplug_good" not in sys.modules  # listing imports nothing
    for _ in range(2):  # the failure is not cached as a success
        with pytest.raises(PluginLoadError) as err:
            reg.get("fake-broken")
        msg = str(err.value)
        assert "'fake-broken'" in msg and "fakeplug 1.0" in msg and "fakeplug_broken:BrokenEnv" in msg
        assert "RuntimeError: fakeplug exploded on import" in msg
        assert isinstance(err.value.__cause__, RuntimeError)
    assert reg.get("fake-good").__name__ == "GoodEnv"
    assert reg.get("in-code") is dict
    assert reg.get("textmaze").__name__ == "TextMazeEnv"


def test_a_broken_plugin_does_not_break_a_fresh_process(fake_plugin: Path) -> None:
    out = run_python("""
        from prover import make_env
        from prover.errors import PluginLoadError
        from prover.registry import ENVS
        try:
            ENVS.get("fake-broken")
        except PluginLoadError as exc:
            print("broken:", exc)
        print("good:", ENVS.get("fake-good").__name__)
        print("maze:", type(make_env("textmaze")).__name__)
    """, extra_path=fake_plugin)
    assert "broken: 'fake-broken' (from entry point (fakeplug 1.0))" in out
    assert "good: GoodEnv" in out and "maze: TextMazeEnv" in out


def test_autoload_switch_turns_discovery_off(on_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(AUTOLOAD_OFF_VAR, "1")
    reg = Registry("env", "prover.envs")
    assert "fake-good" not in reg and "textmaze" not in reg.names()
    with pytest.raises(NameNotFound, match="unknown env 'fake-good'"):
        reg.get("fake-good")
    assert reg.get("fakeplug_good:GoodEnv").__name__ == "GoodEnv"  # explicit strings still work
    monkeypatch.setenv(AUTOLOAD_OFF_VAR, "0")
    assert "fake-good" in reg
    out = run_python("from prover.registry import ENVS; print(ENVS.names())", fake_plugin, env_off=True)
    assert "fake-good" not in out and "textmaze" not in out


def test_textmaze_plugin_is_installed_and_found_through_its_entry_point(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(AUTOLOAD_OFF_VAR, raising=False)
    try:
        import prover_textmaze
    except ImportError as exc:
        pytest.fail(f"the textmaze plugin is not installed ({exc}); run "
                    "`pip install -e plugins/prover-textmaze` from the repository root")
    origins = {e.name: e.origin for e in ENVS.entries()}
    for name in ("textmaze", "textmaze-v0"):
        assert origins.get(name, "").startswith("entry point (prover-textmaze"), origins
        assert ENVS.get(name) is prover_textmaze.TextMazeEnv


# -- contracts and clashes, with fake entry points ------------------------------------------------
FAKE_GROUP = "prover.tests-fake-entry-points"


def fake_entry_points(monkeypatch: pytest.MonkeyPatch, *eps: tuple[str, str, str]) -> None:
    """``importlib.metadata.entry_points(group=FAKE_GROUP)`` gives ``(name, target, distribution)`` each."""
    real = importlib.metadata.entry_points
    fakes = [SimpleNamespace(name=n, value=v, dist=SimpleNamespace(name=d, version="1.0")) for n, v, d in eps]
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda **kw: fakes if kw.get("group") == FAKE_GROUP else real(**kw))
    monkeypatch.delenv(AUTOLOAD_OFF_VAR, raising=False)


def test_two_distributions_registering_one_name_is_an_error_naming_both(monkeypatch) -> None:
    fake_entry_points(monkeypatch, ("maze", "prover_textmaze:TextMazeEnv", "prover-textmaze"),
                      ("maze", "collections:OrderedDict", "other-mazes"),
                      ("same", "prover_textmaze:TextMazeEnv", "prover-textmaze"),
                      ("same", "prover_textmaze:TextMazeEnv", "a-repackaging"))
    reg = Registry("env", FAKE_GROUP, "prover.envs:TextEnv")
    assert reg.names() == ["maze", "same"]  # listing still works
    for _ in range(2):
        with pytest.raises(DuplicateName) as err:
            reg.get("maze")
        msg = str(err.value)
        assert "'maze'" in msg and "prover-textmaze 1.0" in msg and "other-mazes 1.0" in msg and "\n" not in msg
    assert reg.get("same").__name__ == "TextMazeEnv"  # the same target twice is no clash
    assert reg.get("prover_textmaze:TextMazeEnv").__name__ == "TextMazeEnv"  # the way around it


def test_an_entry_point_of_the_wrong_kind_names_the_plugin_and_its_distribution(monkeypatch) -> None:
    fake_entry_points(monkeypatch, ("wrong", "collections:OrderedDict", "wrongplug"),
                      ("never", "no_such_module_xyz:Env", "wrongplug"))
    reg = Registry("env", FAKE_GROUP, "prover.envs:TextEnv")
    for _ in range(2):  # the refused object is not cached as a success
        with pytest.raises(PluginLoadError) as err:
            reg.get("wrong")
        msg = str(err.value)
        assert msg.startswith("env 'wrong' (from entry point (wrongplug 1.0)): collections.OrderedDict is not "
                              "a prover.envs.TextEnv subclass") and "\n" not in msg
    assert "no_such_module_xyz" not in sys.modules  # only the loaded entry is imported and checked


@pytest.mark.parametrize("registry, base", [(ENVS, "prover.envs.TextEnv"), (CREDIT, "prover.credit.CreditAssigner"),
                                            (JUDGES, "prover.judges.Judge"), (ENGINES, "prover.engines.base.Engine")])
def test_each_kind_refuses_a_module_object_string_of_the_wrong_kind(registry, base) -> None:
    with pytest.raises(PluginLoadError) as err:
        registry.get("json:JSONDecoder")
    msg = str(err.value)
    assert msg.startswith(f"{registry.kind} 'json:JSONDecoder' (from module:Object string): json.decoder.JSONDecoder")
    assert base in msg and "\n" not in msg


@pytest.mark.parametrize("override", ["credit.name=collections:OrderedDict", "judge.name=json:JSONDecoder",
                                      "engine.name=collections:OrderedDict"])
def test_prover_train_with_a_plugin_of_the_wrong_kind_is_one_line(override, tmp_path, capsys) -> None:
    from conftest import TINY_RUN
    from prover.cli import main

    run = tmp_path / "run"  # tiny settings: a check that came too late would still end soon
    assert main(["train", *TINY_RUN, "steps=0", "warmstart.enabled=false", override, f"run.dir={run}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("prover: error: ") and "plugin must be one" in err[0], err
    assert not run.exists()
