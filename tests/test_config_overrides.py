"""Command-line values typed by the field they fill (prover/settings/config_overrides.py): YAML reads
``env.kwargs.actions=[1,2]`` as two ints, and a ``list[str]`` setting gets the text the user wrote."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from prover.cli import main
from prover.config_load import load_config
from prover.credit.base import CreditAssigner, CreditContext, MethodConfig, broadcast_rows
from prover.envs.base import TextEnv
from prover.errors import ConfigError
from prover.registry import CREDIT, ENVS
from prover.types import Advantages, Batch


class TypedKwargsEnv(TextEnv):
    """Settings of every shape a command-line value can fill; the constructor keeps what it was given."""

    def __init__(self, actions: list[str] = ("a",), n: int = 1, either: int | str = 0, maybe: str | None = None,
                 pair: tuple[str, int] = ("a", 0), labels: dict[str, str] | None = None,
                 kinds: Sequence[str] = ("k",), anything: Any = None) -> None:
        self.given = {"actions": actions, "n": n, "either": either, "maybe": maybe, "pair": pair,
                      "labels": labels, "kinds": kinds, "anything": anything}

    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        self.opened = False
        return "A door.", {"won": False, "is_action_valid": True, "admissible_actions": ["open door"]}

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        valid = action == "open door"
        info = {"won": valid, "is_action_valid": valid, "admissible_actions": ["open door"]}
        self.opened = valid
        return ("It opens." if valid else "A door."), float(valid), valid, False, info

    def state_key(self) -> bool:
        return getattr(self, "opened", False)


class TaggedConfig(MethodConfig):
    tag: str = "x"
    weight: float = 1.0


class Tagged(CreditAssigner):
    Config = TaggedConfig

    def assign(self, batch: Batch, ctx: CreditContext) -> Advantages:  # every turn's tokens get the tag's weight
        return Advantages(values=broadcast_rows(batch, np.full(len(batch.turns()), self.config.weight)))


@pytest.fixture(autouse=True)
def registered():
    ENVS.register("typed-kwargs", TypedKwargsEnv)
    CREDIT.register("tagged", Tagged)
    yield
    ENVS.unregister("typed-kwargs")
    CREDIT.unregister("tagged")


def kwargs_of(*overrides: str) -> dict:
    return load_config(None, ["env.name=typed-kwargs", *overrides]).env.kwargs


@pytest.mark.parametrize("override, want", [
    ("actions=[1,2]", ["1", "2"]),  # the line
    ("actions=[yes, 010, 1.50, 1e3]", ["yes", "010", "1.50", "1e3"]),  # as written: not True, 8, 1.5, 1000.0
    ("n=3", 3),  # an int field keeps YAML's int
    ("either=8", 8),  # int | str: the int takes it
    ("maybe=12", "12"),
    ("maybe=null", None),  # null stays None
    ("pair=[1, 2]", ["1", 2]),  # a tuple's items by position
    ("labels={a: 1, 2: true}", {"a": "1", "2": "true"}),  # a dict[str, str]: keys and values as written
    ("kinds=[1, 2]", ["1", "2"]),  # Sequence[str], which also takes one str (plugin_config._widen)
    ("kinds=5", "5"),
    ("anything=[1, true]", [1, True]),  # Any: YAML's values
])
def test_env_kwargs_are_typed_by_the_envs_setting(override, want):
    assert kwargs_of(f"env.kwargs.{override}")[override.partition("=")[0]] == want


def test_the_env_is_built_with_the_text():
    from prover.envs import make_env

    env = make_env("typed-kwargs", **kwargs_of("env.kwargs.actions=[1,2]", "env.kwargs.pair=[3, 4]"))
    assert env.given["actions"] == ["1", "2"] and env.given["pair"] == ["3", 4]


def test_the_last_override_of_a_name_wins_and_a_replaced_section_is_left_alone():
    assert kwargs_of("env.kwargs.actions=[1]", "env.kwargs.actions=[2, 3]")["actions"] == ["2", "3"]
    # the later section override replaced the value: its own items (typed by YAML) are not re-read from "[1]"
    with pytest.raises(ConfigError, match="env.kwargs.actions.0"):
        kwargs_of("env.kwargs.actions=[1]", "env.kwargs={actions: [7]}")
    # a section set whole between two settings of a field inside it: the section is not put back as written
    cfg = load_config(None, ["env.kwargs.n=3", "env={name: typed-kwargs, kwargs: {n: 2}}", "env.kwargs.n=5",
                             "env.kwargs.actions=[1]"])
    assert cfg.env.kwargs == {"n": 5, "actions": ["1"]}


def test_a_wrong_value_is_still_refused_in_one_line():
    for override, field in (("n=[1,2]", "env.kwargs.n"), ("either=[1]", "env.kwargs.either")):
        with pytest.raises(ConfigError) as err:  # no member of a list's shape: left as YAML read it, refused
            kwargs_of(f"env.kwargs.{override}")
        assert field in str(err.value) and "\n" not in str(err.value)


def test_core_fields_and_credit_settings_are_typed_too():
    cfg = load_config(None, ["run.dir=010", "env.name=typed-kwargs", "credit.name=tagged", "credit.tag=2024",
                             "credit.weight=2"])
    assert cfg.run.dir == "010"  # YAML 1.1 reads 010 as the octal 8
    assert Tagged.from_train_config(cfg).config == TaggedConfig(tag="2024", weight=2.0)


def test_the_env_name_may_come_after_its_settings():
    cfg = load_config(None, ["env.kwargs.actions=[1,2]", "env.name=typed-kwargs"])
    assert cfg.env.kwargs["actions"] == ["1", "2"]


def test_check_env_types_its_arguments_too(capsys):
    assert main(["check-env", "typed-kwargs", "actions=[1,2]", "env.kwargs.maybe=3"]) == 0
    assert "passes the env contract" in capsys.readouterr().out
