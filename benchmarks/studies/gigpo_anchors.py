"""How GiGPO's step groups look on each built-in env under a uniformly random policy: the scale that
docs/metrics.md gives for ``credit/singleton_anchor_share`` (and the 0.9 warning line it is read against).

    python -m benchmarks.studies.gigpo_anchors [--episodes 8] [--tasks 8] [--max-turns 20] [--seed 0]

For each task, ``--episodes`` episodes play uniformly random admissible actions (``look`` where an env lists
none); every turn's ``env.state_key()`` before acting joins the anchor group of that key within the task, as
GiGPO's ``credit.anchor=state`` groups a task's turns. Printed per env: the groups, their mean size in turns,
the share of groups that hold one turn (a singleton's step advantage is exactly 0) and the share of turns in
singletons. Seconds on one core.
"""

from __future__ import annotations

import argparse
import random
from collections import Counter

import numpy as np

from prover.envs import make_env

ENVS = ("alfworld-sim", "webshop-sim", "pivot-sim")


def anchor_sizes(name: str, episodes: int, tasks: int, max_turns: int, rng: random.Random) -> np.ndarray:
    """The size in turns of every anchor group, over ``tasks`` tasks of ``episodes`` random episodes each."""
    sizes: list[int] = []
    for task in range(tasks):
        keys: Counter = Counter()
        for _ in range(episodes):
            env = make_env(name)
            _, info = env.reset(seed=task)
            for _ in range(max_turns):
                keys[env.state_key()] += 1
                actions = sorted(info.get("admissible_actions") or ["look"])
                _, _, terminated, truncated, info = env.step(rng.choice(actions))
                if terminated or truncated:
                    break
        sizes += list(keys.values())
    return np.array(sizes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--max-turns", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    for name in ENVS:
        sizes = anchor_sizes(name, args.episodes, args.tasks, args.max_turns, rng)
        print(f"{name:13s} groups {len(sizes):4d}  mean size {sizes.mean():5.2f}  singleton share "
              f"{np.mean(sizes == 1):.3f}  turns in singletons {sizes[sizes == 1].sum() / sizes.sum():.3f}")


if __name__ == "__main__":
    main()
