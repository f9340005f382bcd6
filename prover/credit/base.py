"""The credit-assigner contract: ``assign(batch, ctx) -> Advantages``, the same for every method.

A method is a class registered in ``CREDIT``. Its own hyperparameters are a pydantic ``Config``
(fields documented once, read from the ``credit:`` section of the run config); anything else it
needs (the brancher, the judge, the run config) comes through ``CreditContext``. The trainer calls
``CREDIT.get(name).from_train_config(cfg).assign(batch, ctx)`` and never asks which method it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict

from prover.errors import CapabilityError
from prover.types import Advantages, Batch, Group, Trajectory

if TYPE_CHECKING:
    from prover.config import RewardConfig, TrainConfig


@dataclass
class CreditContext:
    """What a method may use besides the batch."""

    config: "TrainConfig"
    brancher: Any = None  # continues episodes from recorded snapshots (branching methods)
    judge: Any = None  # proposes segments (ProVer)
    step: int = 0


class MethodConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CreditAssigner:
    """Base class. Subclasses set ``Config`` and implement ``assign``."""

    Config: ClassVar[type[MethodConfig]] = MethodConfig
    needs_snapshots: ClassVar[bool] = False  # branches from recorded states (refused on envs without snapshots)

    def __init__(self, config: MethodConfig | None = None) -> None:
        self.config = config if config is not None else self.Config()

    @classmethod
    def parse_config(cls, train_cfg: "TrainConfig") -> MethodConfig:
        from prover.config import parse_plugin_config

        return parse_plugin_config(cls.Config, dict(train_cfg.credit.model_extra or {}), "credit",
                                   train_cfg.credit.name)

    @classmethod
    def validate_config(cls, train_cfg: "TrainConfig") -> None:
        """Refuse bad method fields and missing capabilities before any work starts."""
        cls.parse_config(train_cfg)
        if cls.needs_snapshots:
            from prover.registry import ENVS

            env_cls = ENVS.get(train_cfg.env.name)
            if not getattr(env_cls, "can_snapshot", False):
                raise CapabilityError(f"credit {train_cfg.credit.name!r} branches from saved states, but env "
                                      f"{train_cfg.env.name!r} cannot snapshot; pick a method that does not branch")

    @classmethod
    def from_train_config(cls, train_cfg: "TrainConfig") -> "CreditAssigner":
        return cls(cls.parse_config(train_cfg))

    def group_size(self, step: int, default: int) -> int:
        """Episodes per task at ``step``; the configured G unless the method spends its budget on more."""
        return default

    def assign(self, batch: Batch, ctx: CreditContext) -> Advantages:
        raise NotImplementedError


def trajectory_score(traj: Trajectory, reward: "RewardConfig") -> float:
    """The outcome score R_i of a trajectory: ``scale * env return`` (verl-agent: 10 * won)."""
    return reward.scale * traj.env_return


def turn_scores(traj: Trajectory, reward: "RewardConfig") -> np.ndarray:
    """(n_turns,) row scores: R_i minus the invalid-format penalty of that turn (verl-agent)."""
    r = trajectory_score(traj, reward)
    return np.array([r - reward.invalid_penalty * (not t.format_valid) for t in traj.turns], dtype=np.float64)


def in_win_range(group: Group, eligible: tuple[int, int] | None) -> bool:
    """Whether a group's number of wins lies in ``eligible`` (min, max); None admits every group.
    ProVer's eligibility rule (1-3 wins of 8), which the methods it is compared with can adopt."""
    return eligible is None or eligible[0] <= group.n_won <= eligible[1]


def broadcast(batch: Batch, per_turn: list[list[np.ndarray]]) -> list[list[list[np.ndarray]]]:
    """Turn values per trajectory -> per-token arrays, one per turn (every token gets its turn's value)."""
    out = []
    for g, group in enumerate(batch.groups):
        out.append([[np.full(turn.n_tokens, per_turn[g][i][t], dtype=np.float32)
                     for t, turn in enumerate(tr.turns)] for i, tr in enumerate(group.trajectories)])
    return out
