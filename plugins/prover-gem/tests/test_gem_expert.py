"""Guess the Number's expert is binary search on GEM's higher/lower answers, and the recipe warms up only
the games that have an expert."""

from __future__ import annotations

import math

import pytest

from prover.config_load import load_config

from prover_gem import GemEnv


def play(env: GemEnv, target: int, first: list[str]) -> tuple[list[str], dict]:
    """Reset, fix the hidden number to ``target``, play ``first`` and then the expert to the end."""
    env.reset(seed=0)
    env._gem.unwrapped.game_number = target
    moves, info, done = [], {}, False
    while not done:
        move = first[len(moves)] if len(moves) < len(first) else env.expert_action()
        _, _, term, trunc, info = env.step(move)
        moves.append(move)
        done = term or trunc
    assert env.expert_action() is None  # none once the episode ended
    return moves, info


def test_binary_search_by_hand_on_easy() -> None:
    # 1..10, target 7: 5 (-> higher, 6..10), 8 (-> lower, 6..7), 6 (-> higher, 7..7), 7 wins on turn 4.
    env = GemEnv(game="GuessTheNumber-v0-easy")
    moves, info = play(env, 7, [])
    assert moves == ["5", "8", "6", "7"] and info["won"]
    # after a stray guess 1 (-> higher, 2..10): 6 (-> higher, 7..10), 8 (-> lower, 7..7), 7 on turn 4.
    moves, info = play(env, 7, ["1"])
    assert moves == ["1", "6", "8", "7"] and info["won"]
    # a refused guess (out of range) tells nothing: 11 is refused, then 5, 8, 6: turn 4 ends unwon
    moves, info = play(env, 7, ["11"])
    assert moves == ["11", "5", "8", "6"] and not info["won"]


@pytest.mark.parametrize("game", ["GuessTheNumber-v0-easy", "GuessTheNumber-v0-hard", "GuessTheNumber-v0-random"])
def test_the_expert_wins_from_every_seed_within_log2_of_the_range(game) -> None:
    env = GemEnv(game=game)
    for seed in range(12):
        env.reset(seed=seed)
        gem = env._gem.unwrapped
        bound = math.ceil(math.log2(gem.max_number - gem.min_number + 1)) + 1
        turns, info, done = 0, {}, False
        while not done:
            _, reward, term, trunc, info = env.step(env.expert_action())
            turns, done = turns + 1, term or trunc
        assert info["won"] and reward == 1.0 and turns <= bound, (game, seed, turns)


def test_other_games_have_no_expert_and_the_recipe_follows_the_game() -> None:
    env = GemEnv(game="Sudoku-v0-easy")
    env.reset(seed=0)
    assert env.expert_action() is None
    assert load_config(None, ["env.name=gem", "env.kwargs.game=game:Sudoku-v0-easy"]).warmstart.enabled is False
    for game in ([], ["env.kwargs.game=GuessTheNumber-v0-hard"]):  # the default game is Guess the Number
        cfg = load_config(None, ["env.name=gem", *game])
        assert cfg.warmstart.enabled and cfg.warmstart.episodes == GemEnv.EXPERT_RECIPE["warmstart.episodes"]
    cfg = load_config(None, ["env.name=gem", "env.kwargs.game=Sudoku-v0-easy", "warmstart.enabled=true"])
    assert cfg.warmstart.enabled  # what the user sets wins over the recipe
