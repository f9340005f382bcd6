"""Configs a hostile or careless user writes: YAML aliases that expand past a bound are
refused before any folder changes, wherever they sit (a free-form dict, an override); seeds have one range,
checked where the config loads (train and bench alike); a bool is not a number, in plugin settings
either, and a number is finite."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from prover.config_load import load_config
from prover.errors import ConfigError
from prover.seeding import RUN_SEED_MAX
from prover.settings.yaml_files import MAX_EXPANDED_NODES


def bomb(levels: int = 9, width: int = 9, indent: str = "    ") -> list[str]:
    """``levels`` anchors, each a list of ``width`` aliases of the one before: width**levels values written out."""
    lines = [f"{indent}a0: &a0 [" + ", ".join(["x"] * width) + "]"]
    lines += [f"{indent}a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return lines


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.rglob("*"))}


def test_an_alias_bomb_in_a_free_form_dict_is_refused_in_one_line_before_the_run_folder_changes(tmp_path):
    """A real process: it used to load, then expand the aliases while writing config.yaml, for many minutes."""
    cfg = tmp_path / "bomb.yaml"
    cfg.write_text("\n".join(["model:", "  chat_template_kwargs:", *bomb()]) + "\n")
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    (run / "config.yaml").write_text("steps: 1\n")
    before = _tree(run)
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "prover.cli", "train", "--config", str(cfg), f"run.dir={run}"],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert time.monotonic() - start < 60
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"prover: error: config file {str(cfg)!r}: its anchors and aliases")
    assert f"more than {MAX_EXPANDED_NODES} values" in done.stderr
    assert _tree(run) == before and not list(tmp_path.glob("run.old-*"))


def test_an_alias_bomb_in_an_override_and_a_recursive_alias_are_refused(tmp_path):
    flow = "{a0: &a0 [x,x,x,x,x,x,x,x,x], " + ", ".join(
        f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)) + "}"
    with pytest.raises(ConfigError, match=r"override 'model.chat_template_kwargs': its anchors and aliases"):
        load_config(None, [f"model.chat_template_kwargs={flow}"])
    loop = tmp_path / "loop.yaml"
    loop.write_text("model:\n  chat_template_kwargs:\n    a: &a [x, *a]\n")
    with pytest.raises(ConfigError, match="anchors and aliases"):
        load_config(loop)


def test_anchors_within_the_bound_still_load(tmp_path):
    cfg = tmp_path / "ok.yaml"
    cfg.write_text("\n".join(["model:", "  chat_template_kwargs:", *bomb(levels=3, width=3, indent="    "),
                              "rollout: &r {group_size: 4}", "eval: {episodes: 2}"]) + "\n")
    loaded = load_config(cfg)
    assert loaded.model.chat_template_kwargs["a2"] == [[["x"] * 3] * 3] * 3
    assert loaded.rollout.group_size == 4


@pytest.mark.parametrize("seed", [-1, RUN_SEED_MAX + 1, 2**64])
def test_a_seed_outside_the_one_range_is_refused_where_the_config_loads(seed):
    with pytest.raises(ConfigError, match=rf"config field 'seed': a run seed is an integer from 0 to {RUN_SEED_MAX}"):
        load_config(None, [f"seed={seed}"])


@pytest.mark.parametrize("field", ["seeds=[-1]", "seeds=[18446744073709551616]", "warmstart_seed=-3"])
def test_a_bench_seed_outside_the_range_is_refused_where_the_bench_config_loads(field):
    from prover.bench.config import load_bench_config

    with pytest.raises(ConfigError, match=rf"a run seed is an integer from 0 to {RUN_SEED_MAX}"):
        load_bench_config(None, [field, "methods=[grpo]"])


@pytest.mark.parametrize("override", ["steps=true", "rollout.group_size=false", "rollout.sampling.temperature=true",
                                      "threads=true"])
def test_a_bool_is_not_a_number(override):
    with pytest.raises(ConfigError, match="must be a number, not true or false"):
        load_config(None, [override])


def test_a_bool_is_not_a_bench_number():
    from prover.bench.config import load_bench_config

    for field in ("steps=true", "seeds=[true]"):
        with pytest.raises(ConfigError, match="must be a number, not true or false"):
            load_bench_config(None, [field, "methods=[grpo]"])


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, RUN_SEED_MAX])
def test_the_ends_of_the_seed_range_train(seed, tiny_run_overrides, capsys):
    from prover.cli import main

    assert main(["train", *tiny_run_overrides, f"seed={seed}", "steps=1"]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("overrides, field", [
    (["engine.kwargs.prefix_cache_mb=true"], "engine.kwargs.prefix_cache_mb"),
    (["env.name=pivot-sim", "env.kwargs.n_pivots=true"], "env.kwargs.n_pivots"),
    (["credit.name=grpo", "credit.eps=false"], "credit.eps"),
    (["judge.name=litellm", "judge.model=m", "judge.max_repairs=true"], "judge.max_repairs"),
    (["credit.name=triage", "judge.name=litellm", "judge.model=m", "credit.bonus={regression: true}"],
     "credit.bonus.regression"),
])
def test_a_bool_is_not_a_number_in_plugin_settings_either(overrides, field):
    """The plugins' settings (engine, env, credit, judge, and a model nested in them) follow the schema's rule."""
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    assert str(err.value).startswith(f"config field '{field}' of ") and "must be a number, not true or false" in \
        str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("override", ["learner.lr=inf", "learner.lr=nan", "learner.lr=.inf", "warmstart.lr=inf",
                                      "rollout.sampling.temperature=nan"])
def test_a_non_finite_number_is_refused_where_the_config_loads(override):
    with pytest.raises(ConfigError, match="finite number") as err:
        load_config(None, [override])
    assert override.split("=")[0] in str(err.value) and "\n" not in str(err.value)


def test_a_non_finite_plugin_setting_is_refused_where_the_config_loads():
    with pytest.raises(ConfigError, match="finite number") as err:
        load_config(None, ["credit.name=grpo", "credit.eps=inf"])
    assert "'credit.eps'" in str(err.value)
