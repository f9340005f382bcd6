"""Env steps per second and snapshot+restore microseconds, for every embedded env, in one run.

    python -m benchmarks.perf.env_speed [--steps 20000] [--real-steps 300]

Table 1: alfworld-sim, webshop-sim, searchqa-sim and pivot-sim. Random admissible actions (the expert's, for an
env without an action list) from seeded resets. The replay column times the base class's default
snapshot (seed + actions, restored by replaying) on the same env and states, so the ratio says what a
native snapshot buys.

Table 2: alfworld-sim against the real ALFWorld engine (the ``alfworld`` env of prover-alfworld:
TextWorld + Fast Downward) on the same generated games with the same random actions; the two agree
step by step (the plugin's conformance test), so both play identical episodes. The real engine's
snapshot is a replay. Without the plugin installed, table 2 says so.

All numbers come from one process, one measurement after the other; compare ratios, not seconds.
"""

from __future__ import annotations

import argparse
import random
import time

from prover.envs import make_env
from prover.envs.base import TextEnv
from prover.errors import ProverError

EMBEDDED = ("alfworld-sim", "webshop-sim", "searchqa-sim", "pivot-sim")


def play(env, n_steps: int, rng: random.Random, every: int) -> tuple[float, float, int, list]:
    """(step seconds, reset seconds, resets, snapshots taken every ``every`` steps) for n random steps."""
    states, t_env, t_reset, done, seed = [], 0.0, 0.0, 0, 0
    t0 = time.perf_counter()
    _, info = env.reset(seed=seed)
    t_reset += time.perf_counter() - t0
    while done < n_steps:
        # envs without an action list (searchqa-sim) play their expert's move
        action = rng.choice(info.get("admissible_actions") or [env.expert_action() or "look"])
        t0 = time.perf_counter()
        _, _, term, trunc, info = env.step(action)
        t_env += time.perf_counter() - t0
        done += 1
        if done % every == 0:
            states.append(env.snapshot())
        if term or trunc:
            seed += 1
            t0 = time.perf_counter()
            _, info = env.reset(seed=seed)
            t_reset += time.perf_counter() - t0
    return t_env, t_reset, seed + 1, states


def time_snapshots(env, snapshots: list, snap_fn, restore_fn) -> float:
    t0 = time.perf_counter()
    for s in snapshots:
        restore_fn(env, s)
        snap_fn(env)
    return (time.perf_counter() - t0) / len(snapshots) * 1e6


def embedded_row(name: str, n_steps: int) -> str:
    env = make_env(name)
    t_env, _, _, snaps = play(env, n_steps, random.Random(0), every=min(97, n_steps))  # a short run snapshots once
    native = time_snapshots(env, snaps, type(env).snapshot, type(env).restore)
    replays = []
    for s in snaps:  # the same states as replay snapshots
        env.restore(s)
        replays.append(TextEnv.snapshot(env))
    replay = time_snapshots(env, replays, TextEnv.snapshot, TextEnv.restore)
    return f"| {name} | {n_steps / t_env:,.0f} | {native:,.1f} | {replay:,.1f} | {replay / native:,.1f}x |"


def sim_vs_real(n_steps: int) -> None:
    print(f"\nalfworld-sim against the real engine, the same generated games and actions ({n_steps} steps):\n")
    try:
        real = make_env("alfworld", max_steps=30)
    except ProverError as exc:
        print(f"prover-alfworld is not installed, so there is no real engine to compare with ({exc}).")
        print("Install it with: pip install -c constraints/cpu.txt -e plugins/prover-alfworld")
        return
    sim = make_env("alfworld-sim", max_steps=30)
    rows = {}
    for label, env in (("alfworld-sim", sim), ("alfworld (real)", real)):
        t_env, t_reset, resets, snaps = play(env, n_steps, random.Random(1), every=min(10, n_steps))
        snap_us = time_snapshots(env, snaps, type(env).snapshot, type(env).restore)
        rows[label] = (n_steps / t_env, t_reset / resets * 1e3, snap_us, resets)
    print("| engine | steps/s | reset ms | snapshot+restore us | episodes |")
    print("|---|---|---|---|---|")
    for label, (sps, reset_ms, snap_us, resets) in rows.items():
        print(f"| {label} | {sps:,.0f} | {reset_ms:,.2f} | {snap_us:,.1f} | {resets} |")
    (s_sps, s_reset, s_snap, _), (r_sps, r_reset, r_snap, _) = rows.values()
    print(f"| sim/real | {s_sps / r_sps:,.0f}x faster | {r_reset / s_reset:,.0f}x | {r_snap / s_snap:,.0f}x | |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20000, help="random steps per embedded env")
    ap.add_argument("--real-steps", type=int, default=300, help="steps on each side of sim vs real")
    args = ap.parse_args()
    if min(args.steps, args.real_steps) < 1:
        raise SystemExit(f"env_speed: --steps and --real-steps must be at least 1 "
                         f"(got {args.steps}, {args.real_steps})")
    print("| env | steps/s | snapshot+restore us (native) | (replay) | replay/native |")
    print("|---|---|---|---|---|")
    for name in EMBEDDED:
        print(embedded_row(name, args.steps))
    sim_vs_real(args.real_steps)


if __name__ == "__main__":
    main()
