"""Env steps per second and snapshot+restore microseconds, native against replay, in one run.

    python benchmarks/env_speed.py [--env alfworld-sim] [--steps 20000]

Random admissible actions (the expert's, for an env without an action list) from seeded resets. The replay column times the base class's default
snapshot (seed + actions, restored by replaying) on the same env and states, so the ratio says what
a native snapshot buys; both are measured in the same process, one after the other.
"""

from __future__ import annotations

import argparse
import random
import time

from prover.envs import make_env
from prover.envs.base import TextEnv


def play(env, n_steps: int, rng: random.Random) -> tuple[float, list]:
    """Seconds for n random steps, and (snapshot-able) midpoints to time snapshot/restore on."""
    states, t_env, done, seed = [], 0.0, 0, 0
    _, info = env.reset(seed=seed)
    while done < n_steps:
        # envs without an action list (searchqa-sim) play their expert's move
        action = rng.choice(info.get("admissible_actions") or [env.expert_action() or "look"])
        t0 = time.perf_counter()
        _, _, term, trunc, info = env.step(action)
        t_env += time.perf_counter() - t0
        done += 1
        if done % 97 == 0:
            states.append(env.snapshot())
        if term or trunc:
            seed += 1
            _, info = env.reset(seed=seed)
    return t_env, states


def time_snapshots(env, snapshots: list, snap_fn, restore_fn) -> float:
    t0 = time.perf_counter()
    for s in snapshots:
        restore_fn(env, s)
        snap_fn(env)
    return (time.perf_counter() - t0) / len(snapshots) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--env", default="alfworld-sim")
    ap.add_argument("--steps", type=int, default=20000)
    args = ap.parse_args()
    env = make_env(args.env)
    t_env, snaps = play(env, args.steps, random.Random(0))
    native = time_snapshots(env, snaps, type(env).snapshot, type(env).restore)
    replays = []
    for s in snaps:  # the same states as replay snapshots
        env.restore(s)
        replays.append(TextEnv.snapshot(env))
    replay = time_snapshots(env, replays, TextEnv.snapshot, TextEnv.restore)
    print(f"| env | steps/s | snapshot+restore us (native) | (replay) | replay/native |")
    print(f"|---|---|---|---|---|")
    print(f"| {args.env} | {args.steps / t_env:,.0f} | {native:.1f} | {replay:.1f} | {replay / native:.1f}x |")


if __name__ == "__main__":
    main()
