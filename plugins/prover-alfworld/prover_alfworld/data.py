"""Find the games of an ALFWorld data folder, the way ALFWorld's own loader does.

ALFWorld keeps one folder per trajectory under ``$ALFWORLD_DATA/json_2.1.1/<split>/``, holding
``traj_data.json`` (the task type) and ``game.tw-pddl`` (the game). Its loader
(``AlfredTWEnv.collect_game_files``) skips movable-receptacle and sliced tasks, task types not asked
for, folders without a game, and games not marked solvable; so do we. Games are sorted by path so that
a seed always picks the same game. Unreadable files are errors that name the file, not skips: a
corrupt download should be noticed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from prover.errors import ConfigError

# prover split -> ALFWorld's folder (train, eval_in_distribution, eval_out_of_distribution)
SPLIT_FOLDERS = {"train": "train", "test": "valid_unseen", "valid_seen": "valid_seen",
                 "valid_unseen": "valid_unseen"}
GAME_KEYS = ("pddl_domain", "grammar", "pddl_problem")


@dataclass(frozen=True)
class GameFile:
    path: Path  # the game.tw-pddl file
    task_type: str
    task_id: str  # the trajectory folder relative to the split folder (ALFWorld's extra.gamefile)


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"alfworld: cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"alfworld: {path} holds {type(data).__name__}, expected a JSON object")
    return data


def collect(data_dir: str | Path, split: str, task_types: tuple[str, ...]) -> list[GameFile]:
    """The playable games of ``split`` under ``data_dir`` (ALFWorld's ``json_2.1.1`` folder)."""
    if split not in SPLIT_FOLDERS:
        raise ConfigError(f"alfworld: unknown split {split!r}; choose one of {sorted(SPLIT_FOLDERS)}")
    root = Path(data_dir).expanduser() / SPLIT_FOLDERS[split]
    if not root.is_dir():
        raise ConfigError(f"alfworld: data folder {root} does not exist; point data_dir at ALFWorld's "
                          "json_2.1.1 folder (the one holding train/, valid_seen/, valid_unseen/)")
    games = []
    for folder, _, files in os.walk(root):
        if "traj_data.json" not in files or "movable" in folder or "Sliced" in folder:
            continue
        folder = Path(folder)
        task_type = _read_json(folder / "traj_data.json").get("task_type")
        if task_type not in task_types or "game.tw-pddl" not in files:
            continue
        if _read_json(folder / "game.tw-pddl").get("solvable"):
            games.append(GameFile(folder / "game.tw-pddl", task_type, str(folder.relative_to(root))))
    if not games:
        raise ConfigError(f"alfworld: no solvable game.tw-pddl of task types {list(task_types)} under {root}")
    return sorted(games, key=lambda g: g.task_id)


def read_game(game: GameFile) -> dict:
    """The game's JSON, checked for the keys the engine needs."""
    data = _read_json(game.path)
    missing = [k for k in GAME_KEYS if not isinstance(data.get(k), str)]
    if missing:
        raise ConfigError(f"alfworld: {game.path} lacks {missing}; is it a game.tw-pddl file?")
    return data
