"""A finished run closes every env its rollout made: `prover bench` trains many cells in one process, and an env
that holds a process (TWX's JVM, a game server) would otherwise outlive its cell (a bench process once held
196 JVMs)."""

from __future__ import annotations

from typing import ClassVar

from conftest import TINY_RUN
from prover.cli import main
from prover.envs.pivot_sim.env import PivotSimEnv


class CountedEnv(PivotSimEnv):
    """pivot-sim that counts its instances made and closed."""

    made: ClassVar[int] = 0
    closed: ClassVar[int] = 0

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        type(self).made += 1

    def close(self) -> None:
        type(self).closed += 1
        super().close()


def test_a_run_closes_the_envs_its_rollout_made(tmp_path, capsys) -> None:
    args = ["train", *TINY_RUN, "steps=1", "warmstart.enabled=false", f"env.name={__name__}:CountedEnv",
            f"run.dir={tmp_path / 'run'}"]
    assert main(args) == 0, capsys.readouterr().err
    # the rollout keeps one instance per episode of a step, TINY_RUN's 2 groups x 3, closed when the loop
    # ends; the final evaluation then makes 4 more (eval.episodes=4), closed after it: 10 in all. (Others are
    # made and dropped before training: the tokenizer's corpus env, the config check's.)
    assert CountedEnv.closed >= 2 * 3 + 4, (CountedEnv.made, CountedEnv.closed)
