"""What every engine gets from ``prover.engines.Engine``: engine.kwargs checked against its ``Config`` or
its constructor, no counts and nothing to close by default; built by name with ``make_engine``; and the
sglang engine and the starting-policy package load without torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict

from prover.engines import Engine, make_engine
from prover.errors import ConfigError, PluginLoadError
from prover.trainer import engine_counts


class SignatureEngine(Engine):
    """No ``Config``: its engine.kwargs are its constructor's keyword arguments."""

    name = "sig"

    def __init__(self, model_path: str, dtype: str = "float32", width: int = 3) -> None:
        self.model_path, self.dtype, self.width = model_path, dtype, width


class WholeEngine(SignatureEngine):
    """``SignatureEngine`` with the three methods every engine implements, so the registry hands it out."""

    def generate(self, prompts, params, seed=None):
        return []

    def logprobs(self, prompts, completions):
        return []

    def update_weights(self, learner) -> None:
        pass


class WidthSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    width: int = 7


class ConfigEngine(Engine):
    Config = WidthSettings

    def __init__(self, model_path: str, dtype: str = "float32", **kwargs: object) -> None:
        self.settings = self.validate_kwargs(kwargs)


class CountingEngine(Engine):
    def take_counts(self) -> dict[str, float]:
        return {"cost/engine_requests": 4.0, "engine/cached_ratio": 0.5}


def test_engine_kwargs_are_checked_against_the_constructor() -> None:
    assert SignatureEngine.validate_kwargs({"width": 4}).width == 4
    with pytest.raises(ConfigError, match=r"unknown config field 'engine.kwargs.widht' for engine 'sig'"):
        SignatureEngine.validate_kwargs({"widht": 4})
    with pytest.raises(ConfigError,
                       match="engine.kwargs.dtype is set by the run; use model.engine_dtype or model.dtype instead"):
        SignatureEngine.validate_kwargs({"dtype": "float16"})


def test_engine_kwargs_are_checked_against_config_when_set() -> None:
    assert ConfigEngine("folder").settings.width == 7
    # no name: errors name the class
    with pytest.raises(ConfigError, match=r"'engine.kwargs.height' for engine 'ConfigEngine'"):
        ConfigEngine.validate_kwargs({"height": 1})
    with pytest.raises(ConfigError, match="use model.path"):
        ConfigEngine.validate_kwargs({"model_path": "x"})


def test_no_counts_and_nothing_to_close_by_default() -> None:
    engine = SignatureEngine("folder")
    assert engine.take_counts() == {} and engine.close() is None
    assert engine_counts(engine, "rollout") == {}


def test_counts_are_named_by_phase() -> None:
    # the first "/" gets the phase: cost/engine_requests -> cost/branch_engine_requests
    assert engine_counts(CountingEngine(), "branch") == {"cost/branch_engine_requests": 4.0,
                                                         "engine/branch_cached_ratio": 0.5}


def test_make_engine_builds_by_name_and_refuses_a_class_that_is_no_engine() -> None:
    engine = make_engine("test_engine_base:WholeEngine", "folder", dtype="bfloat16", width=5)
    assert isinstance(engine, WholeEngine)
    assert (engine.model_path, engine.dtype, engine.width) == ("folder", "bfloat16", 5)
    with pytest.raises(PluginLoadError, match="is not a prover.engines.base.Engine subclass"):
        make_engine("collections:OrderedDict", "folder")


def test_prover_exports_the_four_factories() -> None:
    import prover
    from prover.credit import make_credit
    from prover.envs import make_env
    from prover.judges import make_judge

    assert (prover.make_env, prover.make_credit, prover.make_judge, prover.make_engine) == (
        make_env, make_credit, make_judge, make_engine)


@pytest.mark.slow
@pytest.mark.parametrize("module", ["prover", "prover.engines.sglang", "prover.policy", "prover.config",
                                    "prover.config_load"])
def test_module_loads_without_torch(module: str) -> None:
    code = f"import sys, {module}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).parent)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
