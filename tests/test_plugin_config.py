"""Settings of pluggable parts (prover/plugin_config.py): checked when the config loads, so a typo in the hf
engine's kwargs is one line before any work; derived from a constructor where a plugin declares no
``Config``; and listed by `prover train --help` for the env, engine, credit method and judge the command
line names (installed plugins too), a plugin that fails to load as a one-line note. The per-kind checks
before a run folder changes are in tests/test_run_safety.py (BAD_STARTS)."""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Annotated

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from conftest import TINY_RUN
from prover.cli import main
from prover.config_load import load_config
from prover.errors import ConfigError, validation_line
from prover.plugin_config import Configurable
from prover.registry import AUTOLOAD_OFF_VAR, CREDIT, JUDGES
from prover.settings.config_text import field_help

# -- engine.kwargs of the hf engine ------------------------------------------------------------------
BAD_HF_KWARGS = {"engine.kwargs.batch_sise=4": "unknown config field 'engine.kwargs.batch_sise'",
                 "engine.kwargs.batch_size=many": "config field 'engine.kwargs.batch_size'",
                 "engine.kwargs.dtype=float16": "use model.engine_dtype or model.dtype"}


def test_hf_engine_kwargs_are_checked_against_its_constructor_when_the_config_loads():
    for override, message in BAD_HF_KWARGS.items():
        with pytest.raises(ConfigError) as err:
            load_config(None, [override])
        assert message in str(err.value) and "\n" not in str(err.value)
    cfg = load_config(None, ["engine.kwargs.batch_size=4", "engine.kwargs.device=cpu"])
    assert cfg.engine.kwargs == {"batch_size": 4, "device": "cpu"}


def test_prover_train_with_an_engine_kwargs_typo_stops_before_the_warm_start(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", *TINY_RUN, "steps=1", "engine.kwargs.batch_sise=4", f"run.dir={run}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("prover: error: ") and "engine.kwargs.batch_sise" in err[0], err
    assert not run.exists()


# -- --help lists installed plugins' own fields ------------------------------------------------------
PLUGIN_SOURCE = '''
import numpy as np
from pydantic import Field
from prover.credit.base import CreditAssigner, MethodConfig, broadcast_rows
from prover.judges.base import Judge, JudgeSettings
from prover.types import Advantages, JudgeResult


class ShinyCredit(CreditAssigner):
    class Config(MethodConfig):
        shine: float = Field(0.25, description="How much the shiny method shines.")

    def assign(self, batch, ctx):
        return Advantages(values=broadcast_rows(batch, np.full(len(batch.turns()), self.config.shine)))


class ShinyJudge(Judge):
    class Config(JudgeSettings):
        glare: int = Field(3, description="How hard the shiny judge looks.")

    def propose(self, request):
        return JudgeResult(None, failure="the shiny judge only glares")
'''


@pytest.fixture
def shiny_plugin(tmp_path, monkeypatch):
    """A fake distribution ``shinyplug 1.0`` with a credit method, a judge, and a judge that fails to import."""
    (tmp_path / "shinyplug.py").write_text(PLUGIN_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    dist = SimpleNamespace(name="shinyplug", version="1.0")
    fakes = {"prover.credit": [SimpleNamespace(name="shiny", value="shinyplug:ShinyCredit", dist=dist)],
             "prover.judges": [SimpleNamespace(name="shiny-judge", value="shinyplug:ShinyJudge", dist=dist),
                               SimpleNamespace(name="broken-judge", value="shinyplug_missing:Judge", dist=dist)]}
    real = importlib.metadata.entry_points
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda **kw: fakes[kw["group"]] if kw.get("group") in fakes else real(**kw))
    monkeypatch.delenv(AUTOLOAD_OFF_VAR, raising=False)
    for reg in (CREDIT, JUDGES):  # read the fake entry points afresh; forget them afterwards
        monkeypatch.setattr(reg, "_entries", dict(reg._entries))
        monkeypatch.setattr(reg, "_scanned", False)
    yield
    sys.modules.pop("shinyplug", None)


def test_help_lists_the_settings_of_the_named_credit_and_judge_plugins_only(shiny_plugin):
    rows = {name: (default, desc) for name, default, desc in field_help({"credit": {"name": "shiny"},
                                                                          "judge": {"name": "shiny-judge"}})}
    assert rows["credit.shine"] == ("0.25", "(shiny, float) How much the shiny method shines.")
    assert rows["judge.glare"] == ("3", "(shiny-judge, int) How hard the shiny judge looks.")
    assert rows["judge.max_failed_steps"][0] == "3"  # what every judge has (JudgeSettings)
    assert "credit.norm" not in rows  # another method's settings stay out of its help
    defaults = {name for name, _, _ in field_help()}  # nothing named: the default method's, no plugin's
    assert "credit.norm" in defaults and "credit.shine" not in defaults and "judge.glare" not in defaults
    note = {n: (d, t) for n, d, t in field_help({"judge": {"name": "broken-judge"}})}["judge.* (broken-judge)"]
    assert note[0] == "unavailable" and "shinyplug_missing" in note[1] and "\n" not in note[1]


def test_prover_train_help_prints_despite_a_broken_plugin(shiny_plugin, capsys):
    with pytest.raises(SystemExit) as done:
        main(["train", "--help", "credit.name=shiny", "judge.name=broken-judge"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "credit.shine [0.25]" in out and "judge.* (broken-judge)" in out


def test_prover_train_help_lists_the_named_env_and_engine_settings_and_the_env_recipe(tmp_path, capsys):
    """The values come from the constructors' signatures and the recipe as written in the sources: searchqa-sim
    (n_kbs=200; recipe warmstart.episodes=3000), pivot-sim (n_pivots=2), sglang (urls has no default)."""
    with pytest.raises(SystemExit):
        main(["train", "--help", "env.name=searchqa-sim", "engine.name=sglang"])
    out = capsys.readouterr().out
    assert "  env.kwargs.n_kbs [200]\n      (searchqa-sim, int) " in out
    assert "  engine.kwargs.urls [required]\n      (sglang, list[str]) Base URLs" in out
    assert "train_recipe of env 'searchqa-sim'" in out and "  warmstart.episodes=3000" in out
    assert "env.kwargs.scene" not in out and "engine.kwargs.batch_size" not in out  # the defaults' settings
    (tmp_path / "run.yaml").write_text("env:\n  name: pivot-sim\n")
    with pytest.raises(SystemExit):
        main(["sft", "--config", str(tmp_path / "run.yaml"), "--help"])
    out = capsys.readouterr().out
    assert "  env.kwargs.n_pivots [2]" in out and "train_recipe of env 'pivot-sim'" in out


# -- settings derived from a constructor -------------------------------------------------------------
class Shelf(Configurable):
    """Stands in for a plugin env or engine without a ``Config``: its constructor is its settings."""

    def __init__(self, *, size: int, names: Sequence[str] = ("a",),
                 note: Annotated[str, Field(description="What the shelf says.")] = "") -> None:
        self.size, self.names, self.note = size, names, note


class OpenShelf(Shelf):
    def __init__(self, depth: float = 1.5, **rest: object) -> None:
        super().__init__(**rest)


class Bare(Configurable):
    """No constructor of its own: nothing says what it takes."""


def test_settings_derived_from_a_constructor_check_names_types_and_required_arguments():
    assert Shelf.parse_settings({"size": 3, "names": "b"}, "env.kwargs").model_dump() == \
        {"size": 3, "names": "b", "note": ""}  # one str for a Sequence[str], as Python counts it
    assert Shelf.parse_settings({"size": 3, "names": ["b", "c"]}, "env.kwargs").names == ["b", "c"]
    for raw, message in [({"size": 3, "sise": 4}, ("unknown config field 'env.kwargs.sise' for env 'Shelf'; its "
                                                   "fields: env.kwargs.size, env.kwargs.names, env.kwargs.note")),
                         ({}, "config field 'env.kwargs.size' of env 'Shelf': Field required"),
                         ({"size": "big"}, ("config field 'env.kwargs.size' of env 'Shelf': Input should be a "
                                            "valid integer"))]:
        with pytest.raises(ConfigError) as err:
            Shelf.parse_settings(raw, "env.kwargs", None)
        assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)
    # **kwargs and a missing constructor take any further name; typed arguments are still checked
    assert OpenShelf.parse_settings({"depth": 2, "colour": "red"}, "env.kwargs").model_dump() == \
        {"depth": 2.0, "colour": "red"}
    with pytest.raises(ConfigError, match="'env.kwargs.depth' of env 'OpenShelf'"):
        OpenShelf.parse_settings({"depth": "deep"}, "env.kwargs")
    assert Bare.parse_settings({"anything": 1}, "env.kwargs").model_dump() == {"anything": 1}


def test_describe_settings_gives_name_type_default_and_description():
    assert Shelf.describe_settings() == [("size", "int", "required", ""),
                                         ("names", "str | Sequence[str]", "('a',)", ""),
                                         ("note", "str", "''", "What the shelf says.")]
    assert OpenShelf.describe_settings() == [
        ("depth", "float", "1.5", ""), ("*", "Any", "", ("any other keyword argument, passed to the constructor "
                                                         "unchecked"))]


# -- the one formatter of a pydantic ValidationError -------------------------------------------------
class Knob(BaseModel):
    model_config = ConfigDict(extra="forbid")
    turns: int = 1

    @field_validator("turns")
    @classmethod
    def _positive(cls, v: int) -> int:
        if v < 1:
            raise ValueError("turns must be at least 1")
        return v


def _error(raw: dict) -> ValidationError:
    with pytest.raises(ValidationError) as err:
        Knob.model_validate(raw)
    return err.value


def test_validation_line_spells_every_validation_error_the_same_way():
    assert validation_line(_error({"turns": 0}), prefix="judge.", owner="judge 'recent'") == \
        "config field 'judge.turns' of judge 'recent': turns must be at least 1 (got 0)"  # "Value error, " dropped
    assert validation_line(_error({"turn": 2}), prefix="judge.", owner="judge 'recent'", unknown="; see help") == \
        "unknown config field 'judge.turn' for judge 'recent'; see help"
    assert validation_line(_error({"turns": 0}), what="bench field") == \
        "bench field 'turns': turns must be at least 1 (got 0)"
    assert validation_line(_error({"turns": "x"}), what="", at="labels", echo=lambda v: "<cut>") == \
        "labels: Input should be a valid integer, unable to parse string as an integer (got <cut>)"
