"""Experts for the GEM games where the rules define one plainly. Only Guess the Number has one here.

Guess the Number (gem/envs/game_env/guess_the_number.py): a hidden integer in ``min_number..max_number``;
after each valid guess GEM answers "the target number is lower than g" when ``g > target`` and "higher"
otherwise (a correct guess wins). A guess outside the range or already made is refused and tells nothing.
The expert is binary search on those answers: the numbers still possible are those above every guess
answered "higher" and below every guess answered "lower"; it guesses their middle, ``(lo + hi) // 2``.
The answers are recomputed from the game's own record (its valid guesses and the target, by the rule GEM
words them with), so the expert plays on from any state, after any other guesses: it follows no fixed plan.
Worst case: ``floor(log2(n)) + 1`` guesses for ``n`` possible numbers, within every GuessTheNumber id's turns
(easy: 1..10 in 4 turns; hard: 1..50 in 7; random: ``ceil(sqrt(max - min)) + 1`` turns for 6..51 numbers).
"""

from __future__ import annotations

from typing import Any

EXPERT_GAMES = ("game:GuessTheNumber-v0-easy", "game:GuessTheNumber-v0-hard", "game:GuessTheNumber-v0-random")


def possible_range(game: Any) -> tuple[int, int]:
    """The numbers GEM's answers so far leave possible: (lowest, highest), both inclusive."""
    lo, hi = game.min_number, game.max_number
    for guess in game.previous_guesses:
        if guess > game.game_number:  # answered "lower than guess"
            hi = min(hi, guess - 1)
        elif guess < game.game_number:  # answered "higher than guess"
            lo = max(lo, guess + 1)
    return lo, hi


def guess_the_number_move(game: Any) -> str:
    """Binary search's next guess, as the text inside ``\\boxed{}``."""
    lo, hi = possible_range(game)
    return str((lo + hi) // 2)
