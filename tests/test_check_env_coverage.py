"""`prover check-env` says what it could not test: the steps where the env listed no admissible actions,
which the checks played with 'look' only; `--strict` fails on them."""

from __future__ import annotations

from prover.cli import main
from prover.envs.base import TextEnv
from prover.envs.checker import check_env_report


class PasswordEnv(TextEnv):
    """Say the password (the seed's word) to win; lists no admissible actions, as a free-text game does.
    ``listed=True`` lists them from the second turn on."""

    WORDS = ("apple", "pear", "plum")

    def __init__(self, listed: bool = False, max_steps: int = 4) -> None:
        self.listed, self.max_steps = listed, max_steps
        self.steps = self.turns = 0
        self.word = ""

    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        self.steps = self.turns = 0
        self.word = self.WORDS[seed % 3]
        return "Say the password.", self._info(False, True)

    def _info(self, won: bool, valid: bool) -> dict:
        actions = list(self.WORDS) if self.listed and self.turns else []
        return {"won": won, "is_action_valid": valid, "admissible_actions": actions}

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        self.turns += 1
        if action not in self.WORDS:
            return "Nothing happens.", 0.0, False, False, self._info(False, False)
        self.steps += 1
        won = action == self.word
        return ("The door opens." if won else "Wrong."), float(won), won, self.steps >= self.max_steps, \
            self._info(won, True)

    def state_key(self) -> tuple:
        return self.word, self.steps, self.turns


def test_the_report_counts_the_steps_played_blind():
    blind = check_env_report(PasswordEnv(), seeds=(0, 1), n_steps=6)
    # nothing is ever listed, and 'look' is no password: every episode runs all 6 steps without an end
    assert (blind.steps, blind.blind) == (12, 12)
    assert "at 12 of the 12 steps the checks chose, so they sent 'look' there" in blind.blind_line("pw")
    listed = check_env_report(PasswordEnv(listed=True), seeds=(0,), n_steps=6)
    assert listed.blind == 1 and listed.steps >= 2  # only the first step, from the reset, had no list
    assert check_env_report(PasswordEnv(listed=True), seeds=(0,)).checks == 6


def test_check_env_warns_and_strict_fails(capsys):
    name = "test_check_env_coverage:PasswordEnv"
    assert main(["check-env", name]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == f"{name}: passes the env contract (17 checks)"
    assert err.startswith(f"warning: {name}: the env listed no admissible actions at ") and err.count("\n") == 1
    assert main(["check-env", name, "--strict"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "the game itself went untested" in err
    assert main(["check-env", "pivot-sim", "--strict"]) == 0
    assert capsys.readouterr().err == ""
