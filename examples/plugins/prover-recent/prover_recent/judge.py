"""Recent: proposes the last turns before the success's final turn (a recency heuristic).

Free and deterministic: it reads nothing but the segment bounds, so it is a baseline an informed judge must
beat. A judge proposes and never writes advantages; ProVer validates the proposal and verifies it by
branching. Made by `prover new judge recent`; docs/plugins.md in prover explains each part.
"""

from __future__ import annotations

from pydantic import Field

from prover.judges.base import Judge, JudgeSettings, valid_segments
from prover.types import JudgeRequest, JudgeResult, JudgeUsage, Proposal


class RecentJudgeConfig(JudgeSettings):
    turns: int = Field(1, ge=1, description="Turns of the proposed segment, at most (and at most the "
                       "request's max_turns).")


class RecentJudge(Judge):
    """Free, deterministic: the valid segment of at most judge.turns turns that ends latest before the
    success's final turn. It reads nothing but the segment bounds."""

    Config = RecentJudgeConfig

    def propose(self, request: JudgeRequest) -> JudgeResult:
        longest = min(self.config.turns, request.max_turns)
        candidates = [s for s in valid_segments(request) if s.end_turn - s.start_turn + 1 <= longest]
        if not candidates:  # e.g. a one-turn success: there is no state after a segment to branch from
            return JudgeResult(None, failure="no valid segment in the successful trajectory")
        best = max(candidates, key=lambda s: (s.end_turn, s.end_turn - s.start_turn))
        n = best.end_turn - best.start_turn + 1
        # A free judge costs nothing; an LLM judge fills calls, tokens and dollars here.
        proposal = Proposal(best, rationale=f"the {n} turn(s) before the last one")
        return JudgeResult(proposal, usage=JudgeUsage())
