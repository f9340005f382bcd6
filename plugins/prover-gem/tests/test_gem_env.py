"""The GEM env plays GEM's games by their rules: \\boxed{} moves, format errors, its own RNG, snapshots."""

from __future__ import annotations

import random
import subprocess
import sys

import numpy as np
import pytest

from prover.envs import check_env, make_env
from prover.errors import ConfigError

from prover_gem import GAMES, GemEnv
from prover_gem.moves import random_move


def test_guess_the_number_is_won_by_binary_search_with_reward_one() -> None:
    # GuessTheNumber-v0-easy: a number in 1..10, 4 turns, hints 'higher'/'lower'. Binary search over 1..10
    # needs at most 4 guesses, so it always wins; the winning guess gives reward 1.0 and ends the game.
    env = GemEnv(game="GuessTheNumber-v0-easy")
    env.reset(seed=7)
    low, high = 1, 10
    for _ in range(4):
        guess = (low + high) // 2
        obs, reward, term, _, info = env.step(str(guess))
        if term:
            break
        assert reward == 0.0 and info["is_action_valid"]
        low, high = (guess + 1, high) if "higher" in obs else (low, guess - 1)
    assert term and info["won"] and reward == 1.0 and f"number {guess}" in obs


def test_a_format_error_is_a_no_op_or_gems_end_as_set() -> None:
    # GEM ends the episode on a move it cannot parse, with reward -0.1 (LanguageGameReward.format_error_reward)
    noop, end = GemEnv(game="Sudoku-v0-easy"), GemEnv(game="Sudoku-v0-easy", format_error="end")
    for env in (noop, end):
        env.reset(seed=1)
    key = noop.state_key()
    obs, reward, term, trunc, info = noop.step("put a 3 somewhere")
    assert (reward, term, trunc, info["is_action_valid"]) == (0.0, False, False, False)
    assert "valid" in obs and noop.state_key() == key  # the turn counter did not move either
    _, reward, term, _, info = end.step("put a 3 somewhere")
    assert (reward, term, info["is_action_valid"]) == (-0.1, True, False)


def test_moves_are_wrapped_in_boxed_unless_already_boxed() -> None:
    # TowerofHanoi-v0-easy: 3 disks on peg A; moving the top disk A->C is legal, and \boxed{A C} is GEM's form.
    for move in ("A C", "\\boxed{A C}"):
        env = GemEnv(game="TowerofHanoi-v0-easy")
        env.reset(seed=0)
        obs, _, term, _, info = env.step(move)
        assert info["is_action_valid"] and not term and "C" in obs


def test_gem_runs_on_its_own_rng_and_snapshots_are_exact() -> None:
    # 2048 draws a new tile from the global `random` after each move: other draws between moves must not
    # change the game, and a restored snapshot must give the same tiles again.
    assert GemEnv.uses_global_rng
    a, b = GemEnv(game="Game2048-v0-easy"), GemEnv(game="Game2048-v0-easy")
    a.reset(seed=3)
    b.reset(seed=3)
    outside = random.getstate()
    outs_a = [a.step(m)[0] for m in ("left", "up")]
    assert random.getstate() == outside  # the process's RNG is left as it was
    random.random(), np.random.random()
    assert [b.step(m)[0] for m in ("left", "up")] == outs_a
    snap = a.snapshot()
    then = [a.step(m)[0] for m in ("right", "down", "left")]
    a.restore(snap)
    assert [a.step(m)[0] for m in ("right", "down", "left")] == then


def test_splits_do_not_share_seeds_and_bad_settings_are_one_line() -> None:
    env = GemEnv(game="Mastermind-v0-easy")
    assert env.reset(seed=0)[0] == env.reset(seed=0, options={"split": "train"})[0]
    env.reset(seed=0, options={"split": "test"})
    assert env.gem_seed == 2**30
    for bad, message in (({"game": "game:Wordle-v0-easy"}, "not one this env runs offline"),
                         ({"format_error": "x"}, "unknown format_error")):
        with pytest.raises(ConfigError, match=message):
            GemEnv(**bad)
    with pytest.raises(ConfigError, match="unknown split"):
        env.reset(seed=0, options={"split": "valid"})


class MovesShown(GemEnv):
    """GemEnv that lists a few real moves as admissible actions, so that check_env's random player makes
    moves (GEM lists none, and check_env's default 'look' is a format error, a no-op). The moves are GEM's
    own ``sample_random_action`` (``prover_gem.moves``), from an RNG seeded by the state."""

    def _info(self, valid: bool) -> dict:
        info = super()._info(valid)
        if self._gem is None or self.done:
            return info
        rng = random.Random(self.state_key()[2])
        moves = {random_move(self._gem, rng) for _ in range(4)}
        return {**info, "admissible_actions": sorted(moves)}


@pytest.mark.slow
@pytest.mark.parametrize("game", [g for g in GAMES if g not in ("game:Sokoban-v0-hard", "game:Sokoban-v0-random")])
def test_check_env_passes_on_every_listed_game(game) -> None:
    check_env(make_env("gem", game=game), seeds=(0, 1), n_steps=16)
    check_env(MovesShown(game=game), seeds=(0, 1), n_steps=16)  # the same rules, with real moves played


@pytest.mark.slow
def test_importing_the_plugin_leaves_gem_unloaded() -> None:
    code = "import sys, prover_gem; print('gem' in sys.modules or 'reasoning_gym' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
