"""The credit-assigner contract: ``assign(batch, ctx) -> Advantages``, the same for every method.

A method is a class registered in ``CREDIT``. Its own hyperparameters are a pydantic ``Config``
(fields documented once, read from the ``credit:`` section of the run config); anything else it
needs (the brancher, the judge, the run config) comes through ``CreditContext``. The trainer calls
``CREDIT.get(name).from_train_config(cfg).assign(batch, ctx)`` and never asks which method it runs.
``CreditContract`` is the spec, method by method; ``CreditAssigner`` is the base class a method subclasses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, ClassVar, Protocol, cast, runtime_checkable

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from prover.errors import CapabilityError, ConfigError, ContractError
from prover.plugin_config import Configurable
from prover.registry import ENVS, required
from prover.types import Advantages, Batch, Group, GroupValues, Trajectory, Turn

if TYPE_CHECKING:
    from prover.config import RewardConfig, TrainConfig
    from prover.episodes.branching import BrancherContract
    from prover.judges.base import JudgeContract


@dataclass
class CreditContext:
    """What a method may use besides the batch."""

    config: TrainConfig
    brancher: BrancherContract | None = None  # continues episodes from recorded snapshots (branching methods)
    judge: JudgeContract | None = None  # proposes segments (ProVer)
    step: int = 0

    def need_brancher(self, method: str) -> BrancherContract:
        """The brancher, for a method that branches; a one-line ContractError naming ``method`` without one."""
        if self.brancher is None:
            raise ContractError(f"credit {method!r} branches, but its CreditContext has no brancher")
        return self.brancher


class MethodConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WinRangeConfig(MethodConfig):
    """The field every method with an ``eligible`` win range shares (ProVer and those compared with it)."""

    eligible_of: int | None = Field(8, ge=1, description="The group size `eligible` is written for: the range "
                                    "scales to the run's group size as shares (1-3 of 8 is 1-1 of 4, 2-6 of 16; "
                                    "see credit/base.py win_range); null takes it as absolute win counts.")


@runtime_checkable
class CreditContract(Protocol):
    """The credit-assigner contract, as the trainer uses it. Capability flags (class attributes):
    ``needs_snapshots`` (the method branches from recorded states, so an env that cannot snapshot is refused
    at config time), ``needs_groups`` (it compares the episodes of a group, so a group size of 1 is refused)."""

    needs_snapshots: ClassVar[bool]
    needs_groups: ClassVar[bool]

    @classmethod
    def validate_config(cls, train_cfg: TrainConfig) -> None:
        """Refuse, with one ``ConfigError`` or ``CapabilityError`` line, the method's bad fields of the
        ``credit:`` section and a run it cannot serve (no groups, no snapshots); before any work starts."""
        ...

    @classmethod
    def from_train_config(cls, train_cfg: TrainConfig) -> CreditContract:
        """The method built from its fields of the run config's ``credit:`` section."""
        ...

    @classmethod
    def derived_settings(cls, train_cfg: TrainConfig) -> dict[str, str]:
        """Settings the method derives from the run's (``{"credit.eligible": "1-3 wins of 8 ..."}``), which
        the run's config.yaml records as comments; empty when none."""
        ...

    def group_sizes(self, step: int, n_tasks: int, default: int) -> list[int]:
        """Episodes to sample for each of the step's ``n_tasks`` tasks (``default``: the configured G)."""
        ...

    def assign(self, batch: Batch, ctx: CreditContext) -> Advantages:
        """Per-token advantages for every policy turn of ``batch``: ``values[g][i][t]`` holds one float32 per
        completion token of turn ``t`` of trajectory ``i`` of group ``g`` (or of ``train_batch`` when the
        method trains on other turns, such as SPO-tree's edges). Its randomness comes from
        ``prover.seeding.derive_seed`` (the run seed, ``ctx.step``), so that a run repeats. It may branch
        (``ctx.brancher``) and ask the judge (``ctx.judge``); continuations it draws never join the batch
        unless it returns them as ``train_batch``. It logs what it wants in ``metrics`` (``credit/...``). A
        group with no win or no failure gets zeros, not an error."""
        ...


class CreditAssigner(Configurable):
    """Base class of every credit method (``CreditContract`` is the spec). Subclasses set ``Config`` and
    implement ``assign``; the settings rule is every plugin's (``prover.plugin_config.Configurable``)."""

    Config: ClassVar[type[MethodConfig]] = MethodConfig
    config: MethodConfig  # the parsed settings of ``Config``; a method declares its own ``Config``'s type
    needs_snapshots: ClassVar[bool] = False  # branches from recorded states (refused on envs without snapshots)
    needs_groups: ClassVar[bool] = False  # compares the episodes of a group (GRPO's baseline): refused at G = 1

    def __init__(self, config: MethodConfig | None = None) -> None:
        self.config = config if config is not None else self.Config()

    @classmethod
    def parse_config(cls, train_cfg: TrainConfig) -> MethodConfig:
        """The method's own fields of the ``credit:`` section (``parse_settings``: one line on a bad one)."""
        return cast(MethodConfig, cls.parse_settings(dict(train_cfg.credit.model_extra or {}), "credit",
                                                     train_cfg.credit.name))  # an instance of cls.Config

    @classmethod
    def validate_config(cls, train_cfg: TrainConfig) -> None:
        """Refuse bad method fields and missing capabilities before any work starts."""
        cls.parse_config(train_cfg)
        if cls.needs_groups and train_cfg.rollout.group_size < 2:
            raise ConfigError(f"credit {train_cfg.credit.name!r} compares the episodes of a task's group, so "
                              "rollout.group_size=1 gives it no signal; use 2 or more (verl-agent and ProVer: 8)")
        if cls.needs_snapshots:
            env_cls = ENVS.get(train_cfg.env.name)
            if not getattr(env_cls, "can_snapshot", False):
                raise CapabilityError(f"credit {train_cfg.credit.name!r} branches from saved states, but env "
                                      f"{train_cfg.env.name!r} cannot snapshot; pick a method that does not branch")

    @classmethod
    def from_train_config(cls, train_cfg: TrainConfig) -> CreditAssigner:
        return cls(cls.parse_config(train_cfg))

    @classmethod
    def derived_settings(cls, train_cfg: TrainConfig) -> dict[str, str]:
        """Settings the method derives from the run's, recorded in config.yaml as comments: the
        effective win range at the run's group size, for a method with ``eligible``."""
        cfg = cls.parse_config(train_cfg)
        eligible, of = getattr(cfg, "eligible", None), getattr(cfg, "eligible_of", None)
        if eligible is None or not hasattr(cfg, "eligible_of"):
            return {}
        size = train_cfg.rollout.group_size
        lo, hi = win_range(tuple(eligible), size, of)
        written = f"{eligible[0]}-{eligible[1]} of {of}" if of is not None else "absolute"
        return {"credit.eligible": f"{lo}-{hi} wins of {size} (written as {written})"}

    def group_sizes(self, step: int, n_tasks: int, default: int) -> list[int]:
        """Episodes of each of the step's ``n_tasks`` tasks; the configured G unless the method spends its
        budget on more (budget-matched GRPO)."""
        return [default] * n_tasks

    @required
    def assign(self, batch: Batch, ctx: CreditContext) -> Advantages:
        raise NotImplementedError


def trajectory_score(traj: Trajectory, reward: RewardConfig) -> float:
    """The outcome score R_i of a trajectory: ``scale * env return`` (verl-agent: 10 * won)."""
    return reward.scale * traj.env_return


def penalised_scores(scores: np.ndarray, invalid: np.ndarray, reward: RewardConfig) -> np.ndarray:
    """(N,) row scores: each row's R_i (``scores``) minus the invalid-format penalty where the turn broke the
    output format (``invalid``, bool; verl-agent)."""
    return scores - reward.invalid_penalty * invalid


def format_invalid(turns: Sequence[Turn]) -> np.ndarray:
    """(N,) bool: True where the turn broke the output format."""
    return ~np.fromiter(map(attrgetter("format_valid"), turns), dtype=bool, count=len(turns))


def turn_scores(traj: Trajectory, reward: RewardConfig) -> np.ndarray:
    """(n_turns,) row scores of one trajectory (``penalised_scores``)."""
    return penalised_scores(np.full(len(traj.turns), trajectory_score(traj, reward)), format_invalid(traj.turns),
                            reward)


PAPER_GROUP_SIZE = 8  # the group size the paper's win range (1-3 wins of 8) is written for


def win_range(eligible: tuple[int, int], group_size: int, of: int | None = PAPER_GROUP_SIZE) -> tuple[int, int]:
    """The wins (min, max) a group of ``group_size`` needs, when ``eligible`` is written for groups of ``of``.

    The range scales as shares of the group, rounded inwards: min = ceil(G * lo / of), max =
    floor(G * hi / of), then at least one win and at least one failure (1 <= min, max <= G - 1), and
    max >= min while that holds. The paper's 1-3 of 8 is therefore 1-1 of 4, 1-2 of 6, 1-3 of 8, 2-4 of
    12 and 2-6 of 16. ``of=None`` takes ``eligible`` as absolute win counts. An empty range (G = 1)
    comes back with max < min.
    """
    if of is None:
        return eligible
    lo = max(1, math.ceil(group_size * eligible[0] / of - 1e-9))
    hi = max(lo, math.floor(group_size * eligible[1] / of + 1e-9))
    return lo, min(hi, group_size - 1)


def in_win_range(group: Group, eligible: tuple[int, int] | None, of: int | None = PAPER_GROUP_SIZE) -> bool:
    """Whether a group's wins lie in ``eligible`` scaled to its size (see ``win_range``); None admits
    every group. ProVer's eligibility rule, which the methods it is compared with can adopt."""
    if eligible is None:
        return True
    lo, hi = win_range(eligible, len(group.trajectories), of)
    return lo <= group.n_won <= hi


def broadcast(batch: Batch, per_turn: list[list[np.ndarray]]) -> list[GroupValues]:
    """Turn values per trajectory, ``per_turn[g][i][t]`` -> per-token arrays, one per turn (every token gets its
    turn's value); ``broadcast_rows`` of them in row order."""
    values = [np.asarray(per_turn[g][i], dtype=np.float32)[:len(tr.turns)]
              for g, group in enumerate(batch.groups) for i, tr in enumerate(group.trajectories)]
    return broadcast_rows(batch, np.concatenate(values) if values else np.zeros(0, np.float32))


def broadcast_rows(batch: Batch, values: np.ndarray) -> list[GroupValues]:
    """(N,) row values in ``batch.turns()`` order -> per-token float32 arrays, ``out[g][i][t]``, each filled
    with its turn's value.

    One np.repeat and slices of it: an np.full per turn was most of GRPO's time. The slices are views of one
    buffer; they do not overlap, so writing into one changes no other turn.
    """
    turns = batch.turns()
    n_tok = np.fromiter(map(len, map(attrgetter("completion_ids"), turns)), dtype=np.int64, count=len(turns))
    flat = np.repeat(values.astype(np.float32), n_tok)
    ends = np.cumsum(n_tok).tolist()
    per_turn = [flat[a:b] for a, b in zip([0] + ends[:-1], ends)]
    out: list[GroupValues] = []
    k = 0
    for group in batch.groups:
        out.append([])
        for tr in group.trajectories:
            out[-1].append(per_turn[k:k + len(tr.turns)])
            k += len(tr.turns)
    return out
