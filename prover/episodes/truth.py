"""Judge diagnostics against the ground truth: do verified proposals land on the pivotal turns?

For an env that knows its pivotal turns (``TextEnv.pivotal_turns``, for diagnostics only), every step
logs, over the proposals a credit method verified (``CheckedSegment.delta`` set):

    truth/proposals             verified proposals
    truth/hits                  of them, segments [l, r] that contain a pivotal turn of their trajectory
    truth/accepted              of them, accepted (Delta > 0)
    truth/accepted_hits         accepted and containing a pivotal turn
    truth/target_pivotal_share  mean share of pivotal turns in the judged trajectories (what a random
                                one-turn segment would hit)

The bench pools the counts over steps and seeds: hit rate = hits / proposals, precision =
accepted_hits / accepted, recall = accepted_hits / hits. The counts, not the ratios, are logged so that
pooling weights every proposal equally. Envs without ground truth log nothing here.

The truth is read after credit has run and never reaches a judge, a prompt or an advantage.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from prover.envs.base import TextEnv
from prover.types import Batch, CheckedSegment, Trajectory


def segment_hits(pivotal: list[int], start: int, end: int) -> bool:
    """Whether turns [start, end] (inclusive) contain a pivotal turn."""
    return any(start <= t <= end for t in pivotal)


class TruthScorer:
    """Scores a step's checked segments with the env's ``pivotal_turns``; builds its own env on first use
    (never one that rolls out) and stays silent for envs that do not know the truth."""

    def __init__(self, make_env: Callable[[], TextEnv]) -> None:
        self.make_env = make_env
        self.env: TextEnv | None = None
        self.known: bool | None = None  # None until the env has been asked once

    def _pivotal(self, trajectory: Trajectory) -> list[int] | None:
        if self.env is None:
            self.env = self.make_env()
        turns = self.env.pivotal_turns(trajectory)
        self.known = turns is not None
        return None if turns is None else sorted(int(t) for t in turns)

    def metrics(self, batch: Batch, segments: list[CheckedSegment]) -> dict[str, float]:
        verified = [s for s in segments if s.segment is not None and s.delta is not None]
        if self.known is False or (self.known is None and not verified):
            return {}
        counts = {"proposals": 0, "hits": 0, "accepted": 0, "accepted_hits": 0}
        shares = []
        for checked in verified:
            trajectory = find_trajectory(batch, checked)
            pivotal = self._pivotal(trajectory)
            if pivotal is None:
                return {}
            segment = checked.segment
            assert segment is not None  # find_trajectory found its trajectory
            hit = segment_hits(pivotal, segment.start_turn, segment.end_turn)
            counts["proposals"] += 1
            counts["hits"] += hit
            counts["accepted"] += checked.accepted
            counts["accepted_hits"] += checked.accepted and hit
            shares.append(len(pivotal) / max(1, len(trajectory.turns)))
        out = {f"truth/{k}": float(v) for k, v in counts.items()}
        if shares:
            out["truth/target_pivotal_share"] = float(np.mean(shares))
        return out


def find_trajectory(batch: Batch, checked: CheckedSegment) -> Trajectory:
    group, traj_id = batch.groups[checked.group], checked.segment.traj_id if checked.segment else None
    for trajectory in group.trajectories:
        if trajectory.traj_id == traj_id:
            return trajectory
    raise KeyError(f"segment names {traj_id!r}, not a trajectory of group {checked.group}")
