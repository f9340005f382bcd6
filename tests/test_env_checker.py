"""``check_env`` catches each broken rule of the env contract with a message naming the field and the step.

Each env here is a five-room corridor that breaks exactly one rule; ``Corridor`` breaks none. The rooms
are 0..4, the key lies in room 2, and opening the door in room 4 while holding the key wins.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import pytest

from prover.cli import main
from prover.envs import ReplaySnapshot, TextEnv, check_env
from prover.errors import ContractError

MOVES = {"go left": -1, "go right": +1}


@dataclass(frozen=True)
class CorridorSnapshot:
    pos: int
    holding: bool
    steps: int
    won: bool
    replay: tuple


class Corridor(TextEnv):
    """A correct env with a native snapshot that carries the step count and the replay record."""

    native_snapshot = True

    def __init__(self, max_steps: int = 40) -> None:
        self.max_steps = max_steps

    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        self.pos, self.holding, self.steps, self.won = 0, False, 0, False
        return "Fetch the key, then open the door. " + self._describe(), self._info(True)

    def _choices(self) -> dict[str, tuple[int, bool]]:
        out = {a: (self.pos + d, self.holding) for a, d in MOVES.items() if 0 <= self.pos + d <= 4}
        if self.pos == 2 and not self.holding:
            out["take key"] = (2, True)
        if self.pos == 4 and self.holding:
            out["open door"] = (4, True)
        return out

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        self.steps += 1
        nxt = self._choices().get(action)
        if nxt is not None:
            self.won = action == "open door" and self.holding
            self.pos, self.holding = nxt
        truncated = not self.won and self.steps >= self.max_steps
        obs = "You win!" if self.won else (self._describe() if nxt else "Nothing happens.")
        return obs, float(self.won), self.won, truncated, self._info(nxt is not None)

    def _describe(self) -> str:
        return f"You are in room {self.pos}." + (" You hold the key." if self.holding else "")

    def _info(self, valid: bool) -> dict:
        return {"task": "open the door", "won": self.won, "is_action_valid": valid,
                "admissible_actions": [] if self.won else sorted(self._choices())}

    def state_key(self):
        return (self.pos, self.holding)

    def snapshot(self) -> CorridorSnapshot:
        return CorridorSnapshot(self.pos, self.holding, self.steps, self.won, self.replay_record())

    def restore(self, snapshot: CorridorSnapshot) -> None:
        self.pos, self.holding, self.steps, self.won = (snapshot.pos, snapshot.holding, snapshot.steps,
                                                         snapshot.won)
        self.set_replay_record(snapshot.replay)


class ReplayCorridor(Corridor):
    """Correct too: the base class's replay snapshot."""

    native_snapshot = False
    snapshot = TextEnv.snapshot
    restore = TextEnv.restore


class ResetsStepCounter(Corridor):
    def restore(self, snapshot: CorridorSnapshot) -> None:
        super().restore(snapshot)
        self.steps = 0  # the bug: the step cap now comes late after every restore


class ForgetsReplayRecord(Corridor):
    def restore(self, snapshot: CorridorSnapshot) -> None:
        replay = self.replay_record()
        super().restore(snapshot)
        self.set_replay_record(replay)  # the bug: the record stays that of the episode before the restore


class KeyForgetsTheKey(Corridor):
    def state_key(self):
        return (self.pos,)  # the bug: what the agent holds is left out


class KeyForgetsTheKeyQuietly(KeyForgetsTheKey):
    """The same bug, where the admissible actions do not give it away: only what follows does."""

    def _choices(self) -> dict[str, tuple[int, bool]]:
        out = {a: (self.pos + d, self.holding) for a, d in MOVES.items() if 0 <= self.pos + d <= 4}
        if self.pos == 2:
            out["take key"] = (2, True)
        if self.pos == 4:
            out["open door"] = (4, self.holding)  # locked without the key: a valid no-op
        return out


class RaisesOnInvalidAction(Corridor):
    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if action not in self._choices():
            raise KeyError(action)
        return super()._step(action)


@pytest.mark.parametrize("cls", [Corridor, ReplayCorridor])
def test_a_correct_env_passes_every_check(cls):
    assert check_env(cls()) == 16  # the corpus_env check, then five checks on each of three seeds
    env = cls()
    env.reset(seed=0)
    env.step("go right")
    snap = env.snapshot()
    assert isinstance(snap, ReplaySnapshot) != cls.native_snapshot


def _error(cls: type) -> str:
    with pytest.raises(ContractError) as err:
        check_env(cls())
    msg = str(err.value)
    assert "\n" not in msg
    return msg


def test_a_restore_that_resets_the_step_counter_is_caught():
    msg = _error(ResetsStepCounter)
    assert msg.startswith("check_env [snapshot-restore]: attribute 'steps' is 0 after restore(snapshot)")
    steps = re.search(r"but was (\d+) when the snapshot was taken at step (\d+) of seed 0", msg)
    assert steps and steps.group(1) == steps.group(2) != "0", msg


def test_a_restore_that_forgets_the_replay_record_is_caught():
    msg = _error(ForgetsReplayRecord)
    assert msg.startswith("check_env [snapshot-restore]: restore() lost the replay record: "
                          "replay_record() field 'actions' is () after restore"), msg
    assert re.search(r"when the snapshot was taken at step \d+ of seed 0", msg), msg


@pytest.mark.parametrize("cls, differs", [
    (KeyForgetsTheKey, r"their field 'admissible_actions' differs at step 0 of the continuation"),
    (KeyForgetsTheKeyQuietly, (r"after the same actions \[.*\] their field 'obs' differs at step [1-5] of the "
                               r"continuation: '.*' vs '.*'")),
])
def test_a_state_key_that_leaves_out_what_the_agent_holds_is_caught(cls, differs):
    msg = _error(cls)
    head = (r"check_env \[state-key\]: state_key\(\) leaves out part of the state: "
            r"seed 0 episode \d step \d+ and seed 0 episode \d step \d+ share state_key \(\d,\), but ")
    assert re.match(head + differs, msg), msg


def test_an_exception_on_an_invalid_action_is_caught():
    msg = _error(RaisesOnInvalidAction)
    assert msg.startswith("check_env [invalid-action]: step('do a barrel roll') at step 1 of seed 0 raised "
                          "KeyError: 'do a barrel roll'; an invalid action must be a no-op with "
                          "is_action_valid False"), msg


class CorpusWithOtherPrompts(Corridor):
    """Names a corpus env whose prompts differ: its text would train the tokenizer on prompts never seen."""

    def corpus_env(self):
        twin = Corridor()
        twin.agent_spec = dataclasses.replace(twin.agent_spec, history_window=twin.agent_spec.history_window + 1)
        return twin


class CorpusIsNotAnEnv(Corridor):
    def corpus_env(self):
        return "alfworld-sim"


def test_a_corpus_env_must_be_an_env_that_prompts_alike():
    assert _error(CorpusWithOtherPrompts) == ("check_env [corpus_env]: corpus_env()'s agent_spec differs from "
                                              "the env's: its text would train a tokenizer on prompts the agent "
                                              "never sees (see the env contract in prover/envs/base.py)")
    assert _error(CorpusIsNotAnEnv).startswith("check_env [corpus_env]: corpus_env() returned a str, not")


# -- prover check-env -------------------------------------------------------------------------------

def _target(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def test_check_env_command_passes_a_correct_env_with_its_arguments(capsys):
    assert main(["check-env", _target(Corridor), "max_steps=25"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"{_target(Corridor)}: passes the env contract (17 checks)"]  # 16 of ours, gymnasium's
    assert main(["check-env", "alfworld-sim", "env.kwargs.max_steps=20"]) == 0
    assert capsys.readouterr().out == "alfworld-sim: passes the env contract (17 checks)\n"


@pytest.mark.parametrize("argv, expected", [
    ([_target(KeyForgetsTheKey)], ": check_env [state-key]: state_key() leaves out part of the state"),
    ([_target(Corridor), "max_steps"], "env argument 'max_steps' is not of the form key=value"),
    ([_target(Corridor), "max_step=3"], f"unknown config field 'env.kwargs.max_step' for env '{_target(Corridor)}'"),
    (["no-such-env"], "unknown env 'no-such-env'"),
])
def test_check_env_command_reports_one_line_and_exits_2(capsys, argv, expected):
    assert main(["check-env", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.splitlines()) == 1
    assert captured.err.startswith("prover: error: ") and expected in captured.err, captured.err


@pytest.mark.parametrize("setting, expected", [
    # the env's Config (Configurable.parse_settings, prover/plugin_config.py): validation_line's wording
    ("max_steps=abc", "config field 'env.kwargs.max_steps' of env 'alfworld-sim': Input should be a valid integer"),
    ("foo=1", "unknown config field 'env.kwargs.foo' for env 'alfworld-sim'; its fields: env.kwargs.task_types"),
    # a value only the constructor can judge: its own ConfigError, in both commands
    ("task_types=[nope]", "alfworld-sim: task_types ['nope'] invalid"),
])
def test_check_env_refuses_a_bad_setting_with_the_line_prover_train_prints(capsys, tmp_path, setting, expected):
    # the one settings rule: `prover check-env NAME k=v` checks k=v as `prover train env.kwargs.k=v` does
    assert main(["train", "env.name=alfworld-sim", f"env.kwargs.{setting}", f"run.dir={tmp_path / 'run'}"]) == 2
    train = capsys.readouterr().err
    assert main(["check-env", "alfworld-sim", setting]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == train and len(train.splitlines()) == 1
    assert train.startswith(f"prover: error: {expected}") and not (tmp_path / "run").exists()
