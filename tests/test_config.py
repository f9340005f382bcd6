"""load_config: defaults, YAML plus dotted overrides, and one-line errors that name the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from conftest import UnplayedEnv
from prover.config import CreditConfig, JudgeConfig, TrainConfig
from prover.config_load import load_config, parse_override
from prover.credit.grpo import GRPOConfig
from prover.envs import TextEnv
from prover.errors import ConfigError, NameNotFound, ProverError
from prover.settings.config_text import field_help


def config_error(*overrides: str, path: str | Path | None = None) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(path, list(overrides))
    msg = str(err.value)
    assert msg and "\n" not in msg, f"not a one-line message: {msg!r}"
    return msg


# -- loading ----------------------------------------------------------------------------------------

def test_no_file_and_no_overrides_gives_the_defaults():
    cfg = load_config()
    assert cfg == TrainConfig()
    # a few documented defaults (config.py field descriptions)
    assert cfg.env.name == "alfworld-sim" and cfg.credit.name == "prover" and cfg.judge.name == "contrast"
    assert cfg.engine.name == "hf"
    assert cfg.rollout.group_size == 8 and cfg.reward.scale == 10.0 and cfg.reward.invalid_penalty == 0.1
    assert cfg.learner.loss_agg == "traj-mean-token-mean" and cfg.learner.kl_type == "k3"
    assert cfg.model.path == "tiny"


def test_yaml_file_plus_dotted_overrides(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("seed: 3\n"
                    "rollout:\n  group_size: 2\n  max_turns: 7\n"
                    "learner:\n  lr: 0.5\n"
                    "credit:\n  name: grpo\n  norm: mean\n")
    cfg = load_config(path, ["rollout.group_size=4", "learner.lr=1e-3", "learner.skip_zero_advantage_rows=false",
                             "rollout.history_window=2", "env.kwargs.scene=full", "credit.stats=step"])
    assert cfg.seed == 3
    assert cfg.rollout.group_size == 4 and type(cfg.rollout.group_size) is int  # the override wins
    assert cfg.rollout.max_turns == 7  # the file's other fields stay
    assert cfg.learner.lr == 1e-3 and type(cfg.learner.lr) is float
    assert cfg.learner.skip_zero_advantage_rows is False
    assert cfg.rollout.history_window == 2
    assert cfg.env.kwargs == {"scene": "full"}
    assert cfg.credit.model_extra == {"norm": "mean", "stats": "step"}
    assert cfg.rollout.sampling.max_new_tokens == 24  # untouched defaults survive


def test_overrides_alone_and_later_overrides_win():
    cfg = load_config(None, ["rollout.group_size=4", "rollout.group_size=6", "run.dir=/tmp/x"])
    assert cfg.rollout.group_size == 6 and cfg.run.dir == "/tmp/x"


def test_empty_yaml_file_gives_the_defaults(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert load_config(path) == TrainConfig()


@pytest.mark.parametrize("text, expect", [
    ("a.b=8", ("a.b", 8)),
    ("a.b=0.5", ("a.b", 0.5)),
    ("a.b=true", ("a.b", True)),
    ("a.b=null", ("a.b", None)),
    ("a.b=hello world", ("a.b", "hello world")),
    ("a.b=x=y", ("a.b", "x=y")),
    (" a.b =3", ("a.b", 3)),
    ("a.b=", ("a.b", "")),
])
def test_parse_override_reads_the_value_as_a_yaml_scalar(text, expect):
    assert parse_override(text) == expect


# -- errors -----------------------------------------------------------------------------------------

def test_wrong_type_in_an_override_names_the_field_and_value():
    msg = config_error("rollout.group_size=abc")
    assert "'rollout.group_size'" in msg and "'abc'" in msg


def test_out_of_range_value_names_the_field():
    msg = config_error("rollout.group_size=0")
    assert "'rollout.group_size'" in msg and "greater than or equal to 1" in msg


def test_literal_field_lists_the_allowed_values():
    msg = config_error("learner.loss_agg=foo")
    assert "'learner.loss_agg'" in msg and "'foo'" in msg
    for allowed in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm",
                    "traj-mean-token-mean"):
        assert allowed in msg


def test_unknown_field_is_named():
    msg = config_error("rollout.grup_size=3")
    assert msg.startswith("unknown config field 'rollout.grup_size'")


def test_unknown_section_is_named():
    assert "'rolout'" in config_error("rolout.group_size=3")


@pytest.mark.parametrize("bad", ["nonsense", "=3", "rollout..group_size=3", ".x=1"])
def test_malformed_override(bad):
    msg = config_error(bad)
    assert repr(bad) in msg and "section.field=value" in msg


def test_override_through_a_value_is_refused():
    msg = config_error("seed=1", "seed.x=2")
    assert "'seed.x'" in msg and "'seed'" in msg


def test_missing_yaml_file(tmp_path):
    missing = tmp_path / "missing.yaml"
    msg = config_error(path=missing)
    assert str(missing) in msg and "does not exist" in msg


def test_invalid_yaml_names_the_file_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("seed: 1\nrollout:\n  group_size: [1, 2\n")
    msg = config_error(path=path)
    assert str(path) in msg and "not valid YAML" in msg


def test_yaml_that_is_a_list_is_refused(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- rollout\n- learner\n")
    msg = config_error(path=path)
    assert str(path) in msg and "mapping" in msg and "list" in msg


@pytest.mark.parametrize("text, key, lines", [
    ("steps: 3\nseed: 1\nsteps: 5\n", "steps", (1, 3)),
    ("rollout:\n  group_size: 8\nseed: 0\nrollout:\n  max_turns: 4\n", "rollout", (1, 4)),
    ("rollout:\n  group_size: 8\n  group_size: 4\n", "group_size", (2, 3)),
], ids=["top-level", "two-sections", "in-a-section"])
def test_a_key_given_twice_is_an_error_naming_it_and_its_lines(tmp_path, text, key, lines):
    """Plain YAML keeps the last of two equal keys: a second rollout: block would drop group_size=8."""
    path = tmp_path / "twice.yaml"
    path.write_text(text)
    msg = config_error(path=path)
    assert f"key {key!r} is given twice (lines {lines[0]} and {lines[1]})" in msg and str(path) in msg


def test_a_merge_key_brings_the_anchors_keys_and_the_mapping_may_override_them(tmp_path):
    """YAML's merge key (`<<: *anchor`) is how a bench file shares one row's settings with another; the
    duplicate-key check must read it as the anchor's keys, not as a key of its own."""
    from prover.settings.yaml_files import read_yaml

    path = tmp_path / "merge.yaml"
    path.write_text("a: &base {x: 1, y: 2}\nb: {<<: *base, y: 3}\n")
    assert read_yaml(path, "config") == {"a": {"x": 1, "y": 2}, "b": {"x": 1, "y": 3}}
    path.write_text("a: &base {x: 1}\nb: {<<: *base, y: 3, y: 4}\n")  # the mapping's own keys still count
    assert "key 'y' is given twice" in config_error(path=path)


BENCH_CONFIGS = Path(__file__).resolve().parents[1] / "benchmarks" / "configs"


@pytest.mark.parametrize("path", sorted(BENCH_CONFIGS.glob("bench*.yaml")), ids=lambda p: p.name)
def test_every_shipped_bench_file_loads(path):
    from prover.bench.config import load_bench_config

    assert load_bench_config(path, []).methods


def test_a_config_over_the_size_bound_is_refused_before_it_is_read(tmp_path, monkeypatch):
    import prover.settings.yaml_files as yaml_files

    path = tmp_path / "huge.yaml"
    path.write_text("seed: 1\n" + "# padding\n" * (yaml_files.MAX_CONFIG_BYTES // 10))
    monkeypatch.setattr(Path, "read_text", lambda *a, **k: pytest.fail("a file over the bound was read"))
    msg = config_error(path=path)
    assert f"has {path.stat().st_size} bytes; a config file may have at most {1 << 20} (1 MiB)" in msg


def test_yaml_with_an_unknown_field_names_it(tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text("learner:\n  lr: 0.1\n  clip_hihg: 0.3\n")
    assert "'learner.clip_hihg'" in config_error(path=path)


def test_unknown_env_lists_known_names_and_the_closest_match():
    with pytest.raises(NameNotFound) as err:
        load_config(None, ["env.name=alfworld-sm"])
    msg = str(err.value)
    assert "unknown env 'alfworld-sm'" in msg
    assert "alfworld-sim" in msg.split("known:")[1]
    assert "did you mean 'alfworld-sim'?" in msg
    assert isinstance(err.value, ProverError) and "\n" not in msg


class RecipeEnv(UnplayedEnv, TextEnv):
    """Stands in for an env class (never built): load_config reads its ``train_recipe`` (and the credit method
    its flag)."""

    can_snapshot = True

    train_recipe: ClassVar[dict[str, Any]] = {"warmstart.episodes": 77, "warmstart.epochs": 5, "env.kwargs.size": 3}


def test_env_train_recipe_fills_only_what_the_user_left_unset(tmp_path):
    env = f"env.name={__name__}:RecipeEnv"
    cfg = load_config(None, [env])
    assert (cfg.warmstart.episodes, cfg.warmstart.epochs, cfg.env.kwargs) == (77, 5, {"size": 3})
    cfg = load_config(None, [env, "warmstart.episodes=9", "env.kwargs.depth=2"])
    assert (cfg.warmstart.episodes, cfg.warmstart.epochs, cfg.env.kwargs) == (9, 5, {"size": 3, "depth": 2})
    path = tmp_path / "run.yaml"
    path.write_text(f"env:\n  name: {__name__}:RecipeEnv\n  kwargs: {{size: 8}}\nwarmstart:\n  epochs: 1\n")
    cfg = load_config(path)
    assert (cfg.warmstart.episodes, cfg.warmstart.epochs, cfg.env.kwargs) == (77, 1, {"size": 8})
    # an env without a recipe keeps the plain defaults, and so does a real checkpoint (recipes are for tiny)
    assert load_config(None, ["env.name=alfworld-sim"]).warmstart == TrainConfig().warmstart
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    cfg = load_config(None, [env, f"model.path={tmp_path / 'ckpt'}"])
    assert (cfg.warmstart, cfg.env.kwargs) == (TrainConfig().warmstart, {})


class RecipeByKwargsEnv(RecipeEnv):
    """A recipe that depends on the settings: ``train_recipe_for`` updates the class's own recipe."""

    train_recipe: ClassVar[dict[str, Any]] = {"warmstart.episodes": 77}

    @classmethod
    def train_recipe_for(cls, kwargs: dict) -> dict[str, Any]:
        return {"warmstart.enabled": False} if kwargs.get("size") == 0 else {"warmstart.epochs": 5}


class RecipeByKwargsChild(RecipeByKwargsEnv):
    """Inherits the classmethod: neither it nor the parent's recipe applies to a subclass."""


def test_train_recipe_for_reads_the_env_kwargs_as_written():
    env = f"env.name={__name__}:RecipeByKwargsEnv"
    cfg = load_config(None, [env])
    assert (cfg.warmstart.episodes, cfg.warmstart.epochs, cfg.warmstart.enabled) == (77, 5, True)
    cfg = load_config(None, [env, "env.kwargs.size=0"])
    assert (cfg.warmstart.episodes, cfg.warmstart.epochs, cfg.warmstart.enabled) == (77, 2, False)
    cfg = load_config(None, [env, "env.kwargs.size=0", "warmstart.enabled=true"])
    assert cfg.warmstart.enabled  # what the user sets wins
    assert load_config(None, [f"env.name={__name__}:RecipeByKwargsChild"]).warmstart == TrainConfig().warmstart


def test_unknown_credit_lists_known_names_and_the_closest_match():
    with pytest.raises(NameNotFound) as err:
        load_config(None, ["credit.name=grop"])
    msg = str(err.value)
    assert "unknown credit assigner 'grop'" in msg and "known: " in msg
    assert "grpo" in msg.split("known:")[1] and "did you mean 'grpo'?" in msg


def test_unknown_engine_is_refused():
    with pytest.raises(NameNotFound, match="unknown engine 'hff'"):
        load_config(None, ["engine.name=hff"])


def test_unknown_credit_method_field_is_refused_at_load_time():
    msg = config_error("credit.nrom=std")
    assert "'credit.nrom'" in msg and "credit.norm" in msg


def test_bad_credit_method_value_is_refused_at_load_time():
    msg = config_error("credit.norm=median")
    assert "'credit.norm'" in msg and "'median'" in msg


# -- field documentation ----------------------------------------------------------------------------

def leaves(model: type[BaseModel], prefix: str = ""):
    """(dotted name, FieldInfo) of every leaf field, found independently of field_help."""
    for name, f in model.model_fields.items():
        ann = f.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            yield from leaves(ann, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", f


def test_every_leaf_field_has_a_description():
    undocumented = [name for name, f in leaves(TrainConfig) if not (f.description or "").strip()]
    assert undocumented == []
    # the method fields read from the credit section are documented too
    assert all((f.description or "").strip() for f in GRPOConfig.model_fields.values())


def test_field_help_covers_every_leaf_with_its_description_and_default():
    rows = {name: (default, desc) for name, default, desc in field_help()}
    assert all(desc.strip() for _, desc in rows.values()), [n for n, (_, d) in rows.items() if not d.strip()]
    # every leaf outside the free-form credit/judge sections is listed by its dotted name
    expected = {name for name, _ in leaves(TrainConfig) if not name.startswith(("credit.", "judge."))}
    assert expected <= set(rows)
    assert rows["rollout.group_size"] == ("8", TrainConfig.model_fields["rollout"].annotation
                                          .model_fields["group_size"].description)
    assert rows["learner.loss_agg"][0] == "'traj-mean-token-mean'"
    # the method sections list their name and the built-in methods' own fields
    assert {"credit.name", "judge.name", "credit.norm", "credit.stats"} <= set(rows)
    assert CreditConfig.model_fields["name"].description and JudgeConfig.model_fields["name"].description


def test_the_warm_start_lr_defaults_to_the_models_kind():
    from prover.config import WarmStartConfig, warmstart_lr

    assert warmstart_lr(WarmStartConfig(), "tiny") == 1e-3  # a tiny model learns the env's text from scratch
    assert warmstart_lr(WarmStartConfig(), "/models/SmolLM2") == 1e-5  # a checkpoint keeps what it knows
    assert warmstart_lr(WarmStartConfig(lr=3e-4), "/models/SmolLM2") == 3e-4  # a set value wins
