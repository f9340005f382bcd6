"""The random judge: a uniformly random valid segment (the paper's "Random" ablation row).

Free and seeded: the same request and seed give the same segment. Uniform over the set of valid
segments (every start, every length up to L), so the verification step sees what chance proposes.
"""

from __future__ import annotations

import random

from prover.judges.base import Judge, valid_segments
from prover.types import JudgeRequest, JudgeResult, Proposal


class RandomJudge(Judge):
    """Free, seeded: a uniform pick among the valid segments of the success; the base rate a judge must beat.
    It reads nothing but the segment bounds."""

    def propose(self, request: JudgeRequest) -> JudgeResult:
        candidates = valid_segments(request)
        if not candidates:
            return JudgeResult(None, failure="no valid segment in the successful trajectory")
        rng = random.Random(f"{request.seed}/{request.success.traj_id}")
        return JudgeResult(Proposal(rng.choice(candidates), rationale="random"))
