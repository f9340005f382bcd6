"""Random moves in a GEM game's own format, for the bench and the tests (never shown to the agent)."""

from __future__ import annotations

import random


def random_move(game, rng: random.Random) -> str:
    """A move drawn by GEM's own ``sample_random_action`` (which reads the global ``random``: it is given a
    private draw from ``rng`` and put back), or, for the games without one, a move in the game's format:
    Sudoku's "row column digit", Tower of Hanoi's "from-peg to-peg"."""
    outside = random.getstate()
    random.seed(rng.random())
    try:
        return game.sample_random_action()
    except NotImplementedError:
        game = game.unwrapped
        if hasattr(game, "scale"):
            return " ".join(str(random.randint(1, game.scale)) for _ in range(3))
        return " ".join(random.sample("ABC", 2))
    finally:
        random.setstate(outside)
