"""The examples of docs/envs.md run as written: each code block marked ``<!-- example: NAME -->`` is read
from the page here, so the page and the test cannot drift apart."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest

from conftest import TINY_RUN
from prover.cli import main
from prover.config_load import load_config
from prover.envs import make_configured_env
from prover.envs.checker import check_env_report

PAGE = Path(__file__).resolve().parents[1] / "docs" / "envs.md"
MARKED = re.compile(r"<!-- example: (?P<name>[^>]+?) -->\n```(?P<lang>\w+)\n(?P<code>.*?)\n```", re.S)


def example(name: str) -> str:
    blocks = {m["name"]: m["code"] for m in MARKED.finditer(PAGE.read_text(encoding="utf-8"))}
    assert name in blocks, f"docs/envs.md has no example {name!r}; it has {sorted(blocks)}"
    return blocks[name]


def commands(name: str) -> list[list[str]]:
    """The block's shell commands as argument lists (continued lines joined, comments dropped)."""
    text = example(name).replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in text.splitlines() if line.strip()]


@pytest.fixture
def lake_module(tmp_path, monkeypatch):
    """The page's my_module.py, importable as the page says it must be."""
    (tmp_path / "my_module.py").write_text(example("my_module.py"), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("my_module", None)


def frozenlake_args() -> list[str]:
    (command,) = commands("train frozenlake")
    assert command[:2] == ["prover", "train"]
    return command[2:]


def test_the_frozenlake_example_plays_to_the_goal_and_passes_check_env(lake_module):
    env = make_configured_env(load_config(None, frozenlake_args()).env)
    obs, info = env.reset(seed=0)
    assert obs == "@FFF\nFHFH\nFFFH\nHFFG" and info["task"].startswith("Walk from S to G")
    for action in ("right", "right", "down", "down", "down"):  # FrozenLake's 4x4 map, by its definition
        assert env.step(action)[1:4] == (0.0, False, False)
    obs, reward, terminated, _, info = env.step("right")
    assert (obs, reward, terminated, info["won"]) == ("SFFF\nFHFH\nFFFH\nHFF@", 1.0, True, True)
    report = check_env_report(env, seeds=(0,))
    assert report.blind == 0


@pytest.mark.slow
def test_the_frozenlake_command_trains(lake_module, tmp_path, capsys):
    assert main(["train", *frozenlake_args(), *TINY_RUN, "steps=1", f"run.dir={tmp_path / 'run'}"]) == 0
    out = capsys.readouterr()
    assert "held-out success: before RL" in out.out + out.err


def test_the_check_env_examples(capsys):
    for command in commands("check-env"):
        assert command[:2] == ["prover", "check-env"]
        if command[2].startswith("my_pkg."):  # the page's placeholder for the reader's own env
            continue
        assert main(command[1:]) == 0, capsys.readouterr().err
