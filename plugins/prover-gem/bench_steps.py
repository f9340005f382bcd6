"""Seconds per env step for each GEM game: `python plugins/prover-gem/bench_steps.py [game ...]`.

Plays 200 moves per game from GEM's own `sample_random_action` (random cells and digits for Sudoku, which has
none), drawn from a private RNG, resetting to the next seed when an episode ends; prints a markdown row per
game. Only `env.step` is timed (the noop format-error guard's deep copy included), not the resets."""

from __future__ import annotations

import random
import sys
import time

from prover.envs import make_env

from prover_gem import GAMES

STEPS = 200


def random_move(env, rng: random.Random) -> str:
    outside = random.getstate()
    random.seed(rng.random())  # GEM samples from the global RNG: give it a private draw, then put it back
    try:
        return env._gem.sample_random_action()
    except NotImplementedError:  # Sudoku
        n = env._gem.unwrapped.scale
        return f"{random.randint(1, n)} {random.randint(1, n)} {random.randint(1, n)}"
    finally:
        random.setstate(outside)


def seconds_per_step(game: str) -> float:
    env = make_env("gem", game=game)
    rng, seed = random.Random(0), 0
    env.reset(seed=seed)
    spent = 0.0
    for _ in range(STEPS):
        move = random_move(env, rng)
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
