"""Seconds per env step for each GEM game: `python plugins/prover-gem/bench_steps.py [game ...]`.

Plays 200 moves per game (`prover_gem.moves.random_move`: GEM's own `sample_random_action`, or a move in the
game's format for Sudoku and Tower of Hanoi, which have none), resetting to the next seed when an episode
ends; prints a markdown row per game. Only `env.step` is timed (the noop guard's deep copy included)."""

from __future__ import annotations

import random
import sys
import time

from prover.envs import make_env

from prover_gem import GAMES
from prover_gem.moves import random_move

STEPS = 200


def seconds_per_step(game: str) -> float:
    env = make_env("gem", game=game)
    rng, seed = random.Random(0), 0
    env.reset(seed=seed)
    spent = 0.0
    for _ in range(STEPS):
        move = random_move(env._gem, rng)
        start = time.perf_counter()
        _, _, term, trunc, _ = env.step(move)
        spent += time.perf_counter() - start
        if term or trunc:
            seed += 1
            env.reset(seed=seed)
    return spent / STEPS


if __name__ == "__main__":
    print("| game | seconds per step |\n|---|---|")
    for name in sys.argv[1:] or GAMES:
        print(f"| {name} | {seconds_per_step(name):.4f} |", flush=True)
