"""`prover train env.name=<plugin env>` runs with the default tiny model: no env's recipe may leak into a
plugin env that subclasses it (webshop and searchr1 inherit from the sims), and a recipe that names a
constructor argument its env does not take is one line when the config loads."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import pytest

from conftest import TINY_RUN, UnplayedEnv
from prover.cli import main
from prover.config import WarmStartConfig
from prover.config_load import load_config
from prover.envs import TextEnv
from prover.errors import ConfigError

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"


def plugin_tests(plugin: str, filename: str) -> ModuleType:
    """A plugin's own test module, for its fixture data (the plugins' tests folders are not packages)."""
    path = PLUGINS / plugin / "tests" / filename
    spec = importlib.util.spec_from_file_location(f"_fixtures_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def webshop_overrides(tmp_path: Path, request) -> list[str]:
    data = plugin_tests("prover-webshop", "test_webshop_plugin.py")
    data.write_data(tmp_path, data.PRODUCTS, data.ATTRIBUTES, data.HUMAN)
    return [f"env.kwargs.data_dir={tmp_path}", "env.kwargs.noun_tagger=words", "env.kwargs.n_test_goals=1"]


def searchr1_overrides(tmp_path: Path, request) -> list[str]:
    data = plugin_tests("prover-searchr1", "test_searchr1.py")
    data.write_jsonl(tmp_path / "nq" / "train.jsonl", data.TRAIN)
    data.write_jsonl(tmp_path / "nq" / "test.jsonl", data.TEST)
    server = data.RetrievalServer()
    request.addfinalizer(server.close)
    return [f"env.kwargs.data_dir={tmp_path / 'nq'}", f"env.kwargs.url={server.url}"]


def alfworld_overrides(tmp_path: Path, request) -> list[str]:
    # The defaults: the warm start clones ALFWorld's planner expert on the real engine, and the tokenizer's
    # corpus is played on alfworld-sim (corpus_env).
    return []


PLUGIN_ENVS = {  # env name -> (its package, the overrides its own tests use)
    "webshop": ("prover_webshop", webshop_overrides),
    "searchr1": ("prover_searchr1", searchr1_overrides),
    "alfworld": ("prover_alfworld", alfworld_overrides),
    "textmaze": ("prover_textmaze", lambda tmp_path, request: []),
}


@pytest.mark.slow
@pytest.mark.parametrize("env_name", sorted(PLUGIN_ENVS))
def test_prover_train_runs_one_step_on_each_plugin_env(env_name, tmp_path, request, capsys):
    package, overrides = PLUGIN_ENVS[env_name]
    pytest.importorskip(package)
    data = tmp_path / "data"
    data.mkdir()
    run = tmp_path / "run"
    args = ["train", *TINY_RUN, "steps=1", f"env.name={env_name}", f"run.dir={run}", *overrides(data, request)]
    assert main(args) == 0, capsys.readouterr().err
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert ("train", 1) in [(r["phase"], r["step"]) for r in steps]


class RecipeParent(UnplayedEnv, TextEnv):
    """Never built: its recipe sets a constructor argument that only it takes."""

    train_recipe: ClassVar[dict[str, Any]] = {"env.kwargs.width": 3, "warmstart.episodes": 77}

    def __init__(self, width: int = 5) -> None:
        self.width = width


class RecipeChild(RecipeParent):
    """A subclass with another constructor (as a plugin env over a sim): the parent's recipe is not its."""

    def __init__(self, *, data_dir: str = "") -> None:
        self.data_dir = data_dir


class BadRecipe(RecipeChild):
    train_recipe: ClassVar[dict[str, Any]] = {"env.kwargs.widht": 3}


def test_a_recipe_applies_only_to_the_class_that_declares_it():
    cfg = load_config(None, [f"env.name={__name__}:RecipeParent"])
    assert (cfg.env.kwargs, cfg.warmstart.episodes) == ({"width": 3}, 77)
    cfg = load_config(None, [f"env.name={__name__}:RecipeChild"])
    assert (cfg.env.kwargs, cfg.warmstart.episodes) == ({}, WarmStartConfig().episodes)


def test_a_recipe_naming_an_argument_the_constructor_lacks_is_one_line():
    with pytest.raises(ConfigError) as err:
        load_config(None, [f"env.name={__name__}:BadRecipe", "env.kwargs.widht=4"])
    msg = str(err.value)
    assert "train_recipe of BadRecipe" in msg and "env.kwargs.widht" in msg and "data_dir" in msg
    assert "\n" not in msg
