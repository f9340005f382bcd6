"""The Registry's three error paths, lazy entry points, that a broken plugin breaks only itself, that a
plugin (or a built-in) of the wrong kind is refused when loaded, that two distributions may not claim one
name, and that listing every name imports none of the modules behind them."""

from __future__ import annotations

import collections
import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from prover.errors import DuplicateName, NameNotFound, PluginLoadError
from prover.registry import AUTOLOAD_OFF_VAR, CREDIT, ENGINES, ENVS, JUDGES, RETRIEVERS, Registry

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


@pytest.mark.slow
def test_import_prover_does_not_read_entry_points() -> None:
    out = run_python("""
        import importlib.metadata as md
        import sys
        calls, real = [], md.entry_points
        md.entry_points = lambda *a, **k: calls.append(k) or real(*a, **k)
        import prover
        print("heavy", [m for m in ("torch", "gymnasium", "prover.envs", "prover.credit") if m in sys.modules])
        from prover import CREDIT, ENVS, Registry
        from prover.envs import TextEnv
        class Mine(TextEnv):
            def _reset(self, seed, options):
                return "start", {}
            def _step(self, action):
                return "end", 0.0, True, False, {}
            def state_key(self):
                return 0
        ENVS.register("mine", Mine)
        assert ENVS.get("mine") is Mine and "mine" in ENVS and "alfworld-sim" in ENVS
        Registry("env", "prover.envs")
        print("before", calls, "prover_textmaze" in sys.modules)
        ENVS.names()
        print("after", calls, "prover_textmaze" in sys.modules)
    """)
    assert "heavy []" in out  # not even the env contract (gymnasium)
    assert "before [] False" in out
    assert "after [{'group': 'prover.envs'}] False" in out  # listing reads metadata, imports nothing


def test_the_four_factories_are_exported_without_importing_torch() -> None:
    out = run_python("""
        import sys
        import prover
        from prover import make_credit, make_engine, make_env, make_judge
        print([f.__module__ for f in (make_env, make_credit, make_judge, make_engine)], "torch" in sys.modules)
        print(sorted(set(prover.__all__) & {"make_env", "make_credit", "make_judge", "make_engine"}))
    """)
    assert "['prover.envs', 'prover.credit', 'prover.judges', 'prover.engines'] False" in out
    assert "['make_credit', 'make_engine', 'make_env', 'make_judge']" in out


@pytest.fixture
def fake_plugin(tmp_path: Path) -> Path:
    """A fake installed distribution ``fakeplug 1.0`` with one good and one broken entry point."""
    info = tmp_path / "fakeplug-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeplug\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[prover.envs]\nfake-good = fakeplug_good:GoodEnv\nfake-broken = fakeplug_broken:BrokenEnv\n")
    (tmp_path / "fakeplug_good.py").write_text("from prover.envs.pivot_sim import PivotSimEnv\n\n"
                                              "class GoodEnv(PivotSimEnv):\n    pass\n")
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


@pytest.mark.slow
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


@pytest.mark.slow
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
                                            (JUDGES, "prover.judges.Judge"), (ENGINES, "prover.engines.base.Engine"),
                                            (RETRIEVERS, "prover.retrieval.base.Retriever")])
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


# -- built-ins: one table per registry, nothing registered by an import ---------------------------
# Every built-in the docs name, by kind: written out here, not read from the registries.
BUILTINS = {
    "envs": ["alfworld-sim", "alfworld-sim-v1", "webshop-sim", "searchqa-sim", "pivot-sim", "gymnasium",
             "gymnasium-deterministic", "openenv", "openenv-deterministic"],
    "credit": ["grpo", "budget-matched-grpo", "gigpo", "hgpo", "graphgpo", "spo-chain", "spo-tree", "tree-grpo",
               "prover", "criticsearch", "triage"],
    "judges": ["contrast", "text-contrast", "random", "litellm", "local"],
    "engines": ["hf", "sglang"],
    "retrievers": ["bm25", "dense", "pyserini"],
}
# what a name stands for, none of which listing may import (the plugin packages too: entry points stay unread)
NOT_IMPORTED = ["torch", "transformers", "litellm", "gymnasium", "bm25s", "prover_textmaze", "prover.envs",
                "prover.envs.alfworld_sim", "prover.envs.gym", "prover.credit", "prover.credit.grpo",
                "prover.credit.criticsearch", "prover.judges.contrast", "prover.judges.random_judge",
                "prover.judges.agentic", "prover.engines", "prover.engines.hf", "prover.engines.sglang",
                "prover.retrieval", "prover.retrieval.bm25", "prover.trainer"]


def test_prover_list_shows_every_builtin_and_imports_none_of_them() -> None:
    out = run_python(f"""
        import contextlib, io, json, sys
        from prover.cli import cmd_list
        with contextlib.redirect_stdout(io.StringIO()) as listing:
            assert cmd_list(None) == 0
        print(json.dumps({{"listing": listing.getvalue(),
                          "imported": [m for m in {NOT_IMPORTED!r} if m in sys.modules]}}))
    """)
    result = json.loads(out)
    assert result["imported"] == []
    sections: dict[str, list[str]] = {}
    for line in result["listing"].splitlines():
        if not line.startswith(" "):
            sections[line.rstrip(":")] = []
        elif not line.startswith("      "):  # a judge's summary is indented further
            sections[list(sections)[-1]].append(line.split()[0])
    assert list(sections) == list(BUILTINS)
    for kind, names in BUILTINS.items():
        assert set(names) <= set(sections[kind]), (kind, sections[kind])
    # the judge summaries are read from the judges' source, not their import
    assert "hidden state no agent or LLM judge sees" in result["listing"]


@pytest.mark.parametrize("kind", list(BUILTINS))
def test_every_builtin_loads_and_keeps_its_contract(kind: str) -> None:
    from prover.registry import REGISTRIES

    registry = REGISTRIES[kind]
    assert sorted(registry.builtins) == sorted(BUILTINS[kind])
    for name in BUILTINS[kind]:
        assert isinstance(registry.get(name), type), name  # get() refuses a class of the wrong kind


# a built-in's target pointed at a class of another kind: (registry, name, wrong target, the class's dotted name)
WRONG_BUILTINS = [(CREDIT, "grpo", "prover.judges.random_judge:RandomJudge", "prover.judges.random_judge.RandomJudge"),
                  (JUDGES, "contrast", "prover.credit.grpo:GRPO", "prover.credit.grpo.GRPO"),
                  (ENVS, "alfworld-sim", "collections:OrderedDict", "collections.OrderedDict")]


@pytest.mark.parametrize("registry, name, target, dotted", WRONG_BUILTINS, ids=[w[1] for w in WRONG_BUILTINS])
def test_a_builtin_of_the_wrong_kind_is_one_line(registry, name, target, dotted, monkeypatch, tmp_path,
                                                 capsys) -> None:
    from conftest import TINY_RUN
    from prover.cli import main

    entry = next(e for e in registry.entries() if e.name == name)
    monkeypatch.setattr(entry, "target", target)
    monkeypatch.setattr(entry, "loaded", None)  # forget an earlier test's load of the real class
    for _ in range(2):  # the refused object is not cached as a success
        with pytest.raises(PluginLoadError) as err:
            registry.get(name)
        assert str(err.value).startswith(f"{registry.kind} {name!r} (from code): {dotted} is not a ")
    key = {"credit assigner": "credit.name", "judge": "judge.name", "env": "env.name"}[registry.kind]
    run = tmp_path / "run"
    assert main(["train", *TINY_RUN, "steps=0", "warmstart.enabled=false", f"{key}={name}", f"run.dir={run}"]) == 2
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert len(err_lines) == 1 and err_lines[0].startswith(f"prover: error: {registry.kind} {name!r}"), err_lines
    assert not run.exists()
