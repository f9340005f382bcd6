"""``python judged_train.py ARGS...``: ``prover train ARGS`` in this process, with the longest episode of each
train group marked won (the untrained tiny policy rarely wins), so that the judge is asked about every group.
A real process, so that tests can send it real signals while a judge request is in flight."""

from __future__ import annotations

import sys


def mark_one_win_per_group() -> None:
    from prover.rollout import Rollout

    play = Rollout.run

    def run(self, *args, **kwargs):
        batch = play(self, *args, **kwargs)
        if kwargs.get("split") == "train":
            for group in batch.groups:
                best = max(group.trajectories, key=lambda t: len(t.turns))
                best.won = len(group.trajectories) > 1 and len(best.turns) > 1
                for turn in best.turns:
                    turn.format_valid = turn.action_valid = True
        return batch
    Rollout.run = run


if __name__ == "__main__":
    mark_one_win_per_group()
    from prover.cli import main

    sys.exit(main(["train", *sys.argv[1:]]))
