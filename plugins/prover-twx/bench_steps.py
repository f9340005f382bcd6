"""Seconds per env step for each game of a plugin env: `python plugins/prover-twx/bench_steps.py twx|gem`.

Plays random admissible actions (TWX) or random GEM moves (GEM's own sample_random_action, drawn from a private
RNG) for N steps per game, resetting when an episode ends; prints a markdown row per game."""

from __future__ import annotations

import random
import sys
import time

from prover.envs import make_env


def moves(env, rng: random.Random, info: dict) -> str:
    if info.get("admissible_actions"):
        return rng.choice(info["admissible_actions"])
    state = random.getstate()
    random.seed(rng.random())
    try:
        move = env._gem.sample_random_action()  # GEM's own random move, e.g. \boxed{2 3 4}
    except NotImplementedError:  # Sudoku has none: a random cell and digit
        move = f"{rng.randint(1, 4)} {rng.randint(1, 4)} {rng.randint(1, 4)}"
    finally:
        random.setstate(state)
    return move


def bench(name: str, games: list[str], steps: int) -> None:
    print("| game | seconds per step |\n|---|---|")
    for game in games:
        env = make_env(name, game=game)
        rng, seed = random.Random(0), 0
        _, info = env.reset(seed=seed)
        spent = 0.0
        for _ in range(steps):
            action = moves(env, rng, info)
            start = time.perf_counter()
            _, _, term, trunc, info = env.step(action)
            spent += time.perf_counter() - start
            if term or trunc:
                seed += 1
                _, info = env.reset(seed=seed)
        print(f"| {game} | {spent / steps:.5f} |", flush=True)
        env.close()


if __name__ == "__main__":
    which = sys.argv[1]
    if which == "twx":
        from prover_twx import GAMES
    else:
        from prover_gem import GAMES
    bench(which, list(GAMES) if len(sys.argv) < 3 else sys.argv[2:], 200)
