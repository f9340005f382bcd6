"""The plugin env keeps the env contract, reads ALFWorld data folders like ALFWorld, and fails clearly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from prover.envs import ReplaySnapshot, TextEnv, check_env, make_env
from prover.envs.alfworld_sim import AlfworldSimEnv
from prover.errors import ConfigError

from prover_alfworld import AlfworldEnv, emit


def test_check_env_passes_on_the_entry_point_env() -> None:
    assert isinstance(make_env("alfworld-v0"), AlfworldEnv)
    env = make_env("alfworld")
    assert isinstance(env, AlfworldEnv)
    check_env(env, seeds=(0, 1), n_steps=16)


def test_snapshots_replay_and_invalid_actions_change_nothing() -> None:
    assert AlfworldEnv.snapshot is TextEnv.snapshot and not AlfworldEnv.native_snapshot
    env = AlfworldEnv()
    env.reset(seed=4)
    key = env.state_key()
    obs, reward, term, trunc, info = env.step("dance")
    assert obs == "Nothing happens." and not info["is_action_valid"] and reward == 0.0
    assert env.state_key() == key and not term and not trunc
    env.step(info["admissible_actions"][0])
    assert env.state_key() != key and isinstance(env.snapshot(), ReplaySnapshot)


def export(root: Path, split: str, seeds: range, **sim_kwargs) -> list[AlfworldSimEnv]:
    """Write the sim's worlds of ``seeds`` as ALFWorld game folders; return the sims at reset."""
    sims = []
    for seed in seeds:
        sim = AlfworldSimEnv(**sim_kwargs)
        sim.reset(seed=seed)
        emit.write(sim.world, root / split / sim.world.task_type / f"trial_{seed:03d}", sim.expert_plan())
        sims.append(sim)
    return sims


def test_data_folder_games_play_like_alfworld(tmp_path: Path) -> None:
    sims = export(tmp_path, "train", range(4))
    export(tmp_path, "valid_unseen", range(4, 5))
    # ALFWorld's loader skips movable-receptacle folders and games not marked solvable.
    emit.write(sims[0].world, tmp_path / "train" / "movable_x" / "trial_0")
    unsolvable = emit.write(sims[1].world, tmp_path / "train" / "zz_unsolvable" / "trial_0")
    game = json.loads(unsolvable.read_text())
    unsolvable.write_text(json.dumps({**game, "solvable": False}))

    env = AlfworldEnv(data_dir=str(tmp_path))
    by_id = {sim.world.task_id: sim for sim in sims}
    ordered = sorted(by_id.values(), key=lambda s: f"{s.world.task_type}/trial_{s.replay_record()[0]:03d}")
    for seed, sim in enumerate(ordered):
        _obs, info = env.reset(seed=seed + len(sims))  # seeds wrap around the 4 games
        assert info["task_id"] == f"train/{sim.world.task_type}/trial_{sim.replay_record()[0]:03d}"
        assert info["task_type"] == sim.world.task_type and info["task"] == sim.world.goal + "."
        walkthrough = json.loads((tmp_path / info["task_id"] / "game.tw-pddl").read_text())["walkthrough"]
        for i, action in enumerate(walkthrough):
            _, reward, term, _, info = env.step(action)
            assert term == (i == len(walkthrough) - 1) and reward == float(term)
        assert info["won"]
    _, info = env.reset(seed=0, options={"split": "test"})
    assert info["task_id"].startswith("test/")
    only = AlfworldEnv(data_dir=str(tmp_path), task_types=[sims[0].world.task_type])
    assert only.reset(seed=1)[1]["task_type"] == sims[0].world.task_type


def test_bad_data_gives_one_line_errors_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"{tmp_path / 'nowhere' / 'train'} does not exist"):
        AlfworldEnv(data_dir=str(tmp_path / "nowhere")).reset(seed=0)
    (tmp_path / "train").mkdir()
    with pytest.raises(ConfigError, match="no solvable game.tw-pddl"):
        AlfworldEnv(data_dir=str(tmp_path)).reset(seed=0)
    game = export(tmp_path, "train", range(1))[0]
    path = tmp_path / "train" / game.world.task_type / "trial_000" / "game.tw-pddl"
    content = json.loads(path.read_text())
    cases = [("{not json", "cannot read"),
             (json.dumps({"solvable": True, "grammar": ""}), r"lacks \['pddl_domain', 'pddl_problem'\]"),
             (json.dumps({**content, "pddl_problem": "(define (problem broken"}), "the engine cannot load")]
    for text, message in cases:
        path.write_text(text)
        with pytest.raises(ConfigError, match=message) as err:
            AlfworldEnv(data_dir=str(tmp_path)).reset(seed=0)
        assert str(path) in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="unknown split"):
        AlfworldEnv().reset(seed=0, options={"split": "valid_seen"})
    for bad in ({"task_types": ["pick"]}, {"scene": "huge"}, {"prompt": "x"}, {"max_steps": 0}):
        with pytest.raises(ConfigError):
            AlfworldEnv(**bad)


@pytest.mark.slow
def test_importing_the_plugin_leaves_the_engine_unloaded() -> None:
    code = "import sys, prover_alfworld; print('textworld' in sys.modules or 'alfworld' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_engine_puts_back_sys_argv() -> None:
    argv = list(sys.argv)
    AlfworldEnv().reset(seed=0)  # fast_downward's translator overwrites sys.argv while it runs
    assert sys.argv == argv


def test_the_planner_expert_wins_every_game_and_its_commands_are_admissible(tmp_path: Path) -> None:
    # ALFWorld's planner expert (alfworld: agents/environment/alfred_tw_env.py, AlfredExpert with
    # expert_type "planner") follows TextWorld's policy_commands, a Fast Downward plan from the true state
    # to the goal. Following its first command each turn must win every solvable game: generated games
    # of all six task types, and a game read from an ALFWorld data folder.
    export(tmp_path, "train", range(1))
    envs = [(AlfworldEnv(), seed) for seed in range(12)] + [(AlfworldEnv(data_dir=str(tmp_path)), 0)]
    task_types = set()
    for env, seed in envs:
        _, info = env.reset(seed=seed)
        task_types.add(info["task_type"])
        for _ in range(env.max_steps):
            action = env.expert_action()
            assert action in info["admissible_actions"]
            _, _, term, trunc, info = env.step(action)
            if term or trunc:
                break
        assert info["won"] and env.expert_action() is None  # no plan is left once the game is won
    assert len(task_types) == 6


def test_commands_reach_the_engine_as_written_unless_normalisation_is_asked_for() -> None:
    # ALFWorld matches a command exactly after stripping its ends (textworld: envs/pddl/pddl.py,
    # PddlEnv.step: command.strip(), then .index() in the valid commands), so a capitalised command is
    # "Nothing happens." and changes nothing; normalize_commands=True lower-cases and collapses spaces.
    for normalize, upper_valid in ((False, False), (True, True)):
        env = AlfworldEnv(normalize_commands=normalize)
        _, info = env.reset(seed=3)
        command = info["admissible_actions"][0]
        key = env.state_key()
        obs, _, _, _, step_info = env.step(command.upper().replace(" ", "  "))
        assert step_info["is_action_valid"] is upper_valid
        assert (obs == "Nothing happens.") is not upper_valid and (env.state_key() == key) is not upper_valid
        env.reset(seed=3)
        assert env.step(f"  {command} ")[4]["is_action_valid"]  # stripped by the engine itself


def test_the_tokenizer_corpus_plays_on_the_sim_with_the_same_text() -> None:
    env = AlfworldEnv(task_types=["pick_and_place_simple"], max_steps=7, prompt="verl-agent")
    twin = env.corpus_env()
    assert isinstance(twin, AlfworldSimEnv) and twin.agent_spec == env.agent_spec and twin.max_steps == 7
    assert env.reset(seed=5)[0] == twin.reset(seed=5)[0]  # the same first observation, task and all
