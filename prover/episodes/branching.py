"""The Brancher: continuations of the current policy from recorded states, as a service to credit.

Credit methods that need Monte-Carlo values (ProVer, SPO-chain, SPO-tree, budget-matched GRPO) ask
"from the state before turn t of trajectory i, run n continuations and give me their outcomes". The
Brancher plays all requests of a step in one lockstep batch through the rollout machinery, counts every
token it generates, and never adds continuations to the training batch (a method that trains on them,
like SPO-tree or Tree-GRPO, takes ``BranchResult.trajectories`` itself). ``BrancherContract`` is what a
credit method may rely on (``CreditContext.brancher``); ``Brancher`` implements it over the rollout, and a
test may hand a method any object that keeps it (scripted outcomes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from prover.rollout import Rollout
from prover.types import Trajectory


@dataclass(frozen=True)
class BranchRequest:
    """Run ``n`` continuations from the state before turn ``turn`` of ``trajectory``."""

    trajectory: Trajectory
    turn: int
    n: int


@dataclass
class BranchResult:
    """What the continuations of one request achieved.

    won:          (n,) whether each continued episode won.
    tokens:       policy tokens the continuations generated.
    trajectories: the continued episodes (prefix turns shared with the original).
    policy_version: the policy that played the continuations (``Turn.policy_version`` of their own turns;
                  the prefix keeps the version that sampled it); None when unknown (a scripted stand-in).
    """

    request: BranchRequest
    won: np.ndarray
    tokens: int
    trajectories: list[Trajectory]
    policy_version: int | None = None

    @property
    def value(self) -> float:
        """Monte-Carlo estimate of the success probability from the branch state."""
        return float(self.won.mean()) if len(self.won) else 0.0


@runtime_checkable
class BrancherContract(Protocol):
    """The brancher contract, as credit methods use it."""

    def continue_from(self, requests: list[BranchRequest], seed: int = 0, *, max_new_turns: int | None = None,
                      record_snapshots: bool = False) -> list[BranchResult]:
        """One ``BranchResult`` per request, in order: ``request.n`` episodes of the current policy, each
        restored to the state before turn ``request.turn`` of ``request.trajectory`` (its first ``turn``
        turns shared with it) and played on; ``won`` says which won. ``seed`` makes the continuations
        reproducible. With ``max_new_turns`` they stop after that many new turns (an unfinished one keeps a
        ``resume`` point; ``record_snapshots`` records snapshots in them, so that they can branch again).
        Continuations never join the training batch. Raises ``prover.errors.CapabilityError`` when the
        env cannot restore a snapshot."""
        ...


class Brancher:
    """Continues trajectories from their recorded snapshots with the rollout's engine and envs
    (``BrancherContract``)."""

    def __init__(self, rollout: Rollout) -> None:
        self.rollout = rollout
        self.tokens_generated = 0
        self.continuations = 0

    def take_counts(self) -> dict[str, float]:
        """The "cost/branch_*" metrics since the last call (one training step)."""
        out = {"cost/branch_tokens": float(self.tokens_generated),
               "cost/branch_continuations": float(self.continuations)}
        self.tokens_generated = self.continuations = 0
        return out

    def continue_from(self, requests: list[BranchRequest], seed: int = 0, *, max_new_turns: int | None = None,
                      record_snapshots: bool = False) -> list[BranchResult]:
        """Play every request's continuations in one batch. With ``max_new_turns`` they stop after that
        many turns (unfinished ones keep a ``resume`` point; ``record_snapshots`` lets them branch again)."""
        starts = [(r.trajectory, r.turn) for r in requests for _ in range(r.n)]
        played = self.rollout.continue_from(starts, seed=seed, max_new_turns=max_new_turns,
                                            record_snapshots=record_snapshots) if starts else []
        results, k = [], 0
        for r in requests:
            mine = played[k:k + r.n]
            k += r.n
            tokens = sum(t.n_tokens for tr in mine for t in tr.turns[r.turn:])
            results.append(BranchResult(
                request=r, won=np.array([tr.won for tr in mine], dtype=bool), tokens=tokens, trajectories=mine,
                policy_version=self.rollout.policy_version))
            self.tokens_generated += tokens
            self.continuations += r.n
        return results
