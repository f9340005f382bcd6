"""Settings of pluggable parts when the config loads: a typo in the hf engine's kwargs is one line before any
work, and `prover train --help` lists the fields of installed credit and judge plugins (entry points), a
plugin that fails to load as a one-line note."""

from __future__ import annotations

import importlib.metadata
import sys
from types import SimpleNamespace

import pytest

from prover.cli import main
from prover.config import field_help, load_config
from prover.errors import ConfigError
from prover.registry import AUTOLOAD_OFF_VAR, CREDIT, JUDGES

from conftest import TINY_RUN


# -- engine.kwargs of the hf engine ------------------------------------------------------------------
BAD_HF_KWARGS = {"engine.kwargs.batch_sise=4": "unknown config field 'engine.kwargs.batch_sise'",
                 "engine.kwargs.batch_size=many": "config field 'engine.kwargs.batch_size'",
                 "engine.kwargs.dtype=float16": "use model.dtype"}


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
from pydantic import Field
from prover.credit.base import CreditAssigner, MethodConfig
from prover.judges.base import Judge, JudgeSettings


class ShinyCredit(CreditAssigner):
    class Config(MethodConfig):
        shine: float = Field(0.25, description="How much the shiny method shines.")


class ShinyJudge(Judge):
    class Config(JudgeSettings):
        glare: int = Field(3, description="How hard the shiny judge looks.")
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


def test_help_lists_the_fields_of_installed_credit_and_judge_plugins(shiny_plugin):
    rows = {name: (default, desc) for name, default, desc in field_help()}
    assert rows["credit.shine"] == ("0.25", "(shiny) How much the shiny method shines.")
    assert rows["judge.glare"] == ("3", "(shiny-judge) How hard the shiny judge looks.")
    assert "credit.norm" in rows  # the built-ins are still there
    note = rows["judge.* (broken-judge)"]
    assert note[0] == "unavailable" and "shinyplug_missing" in note[1] and "\n" not in note[1]


def test_prover_train_help_prints_despite_a_broken_plugin(shiny_plugin, capsys):
    with pytest.raises(SystemExit) as done:
        main(["train", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "credit.shine [0.25]" in out and "judge.glare [3]" in out and "judge.* (broken-judge)" in out
