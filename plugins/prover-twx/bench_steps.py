"""Seconds per env step for each TWX game: `python plugins/prover-twx/bench_steps.py [game ...]`.

Plays 200 random admissible actions per game (one JVM call each), resetting to the next seed when an episode
ends, and prints a markdown row per game. Only `env.step` is timed (not the resets)."""

from __future__ import annotations

import random
import sys
import time

from prover.envs import make_env

from prover_twx import GAMES

STEPS = 200


def seconds_per_step(game: str) -> float:
    env = make_env("twx", game=game)
    rng, seed = random.Random(0), 0
    _, info = env.reset(seed=seed)
    spent = 0.0
    for _ in range(STEPS):
        action = rng.choice(info["admissible_actions"])
        start = time.perf_counter()
        _, _, term, trunc, info = env.step(action)
        spent += time.perf_counter() - start
        if term or trunc:
            seed += 1
            _, info = env.reset(seed=seed)
    env.close()
    return spent / STEPS


if __name__ == "__main__":
    print("| game | seconds per step |\n|---|---|")
    for name in sys.argv[1:] or GAMES:
        print(f"| {name} | {seconds_per_step(name):.4f} |", flush=True)
