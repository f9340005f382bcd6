"""What the agentic judges say to the model: the system prompts, the request (the successful run in full, the
failed runs one line each, the answer format and the rules beside it, with the legal segments they leave),
and the message of a repair turn.
"""

from __future__ import annotations

import json

from prover.chat import render_trajectory
from prover.judges.base import legal_segments
from prover.judges.tools import preview
from prover.types import JudgeRequest, Segment

SYSTEM_PROMPT = """You judge the episodes of an RL agent. Several attempts at the same task are shown: \
one succeeded, the others failed. Find one failure mode that recurs across the failed runs, and the \
shortest stretch of consecutive turns of the successful run that solves or avoids it: the turns that \
most likely made the difference. Inspect the failed runs with search_trajectory and get_segment, then \
answer by calling submit_segment once."""
ANSWER_ONLY_PROMPT = """You judge the episodes of an RL agent. Several attempts at the same task are shown: \
one succeeded, the others failed. Find one failure mode that recurs across the failed runs, and the \
shortest stretch of consecutive turns of the successful run that solves or avoids it: the turns that \
most likely made the difference. Answer with one JSON object and nothing else."""


def user_prompt(request: JudgeRequest, obs_chars: int = 600, preview_chars: int = 400,
                answer_only: bool = False) -> str:
    success, failures = request.success, request.failures
    previews = "\n".join(f"- {preview(t, preview_chars)}" for t in failures) or "- (none)"
    how = ("Reply with one JSON object: {\"traj_id\": " + json.dumps(success.traj_id) + ', "start_turn": <int>, '
           '"end_turn": <int>, "rationale": <why, one sentence>}' if answer_only else
           f"Answer with submit_segment(traj_id={success.traj_id!r}, start_turn, end_turn, rationale)")
    return (f"Task: {success.task_text}\n\nThe successful run, in full:\n{render_trajectory(success, obs_chars)}\n\n"
            f"The failed runs ({len(failures)}), one line each:\n{previews}\n\n{how}\n{answer_rules(request)}")


def answer_rules(request: JudgeRequest) -> str:
    """The rules a segment must meet, stated where the model reads the answer format: first answers ran
    longer than L turns when L was only a phrase of the format's sentence."""
    L, n = request.max_turns, len(request.success.turns)
    span = "end_turn = start_turn" if L == 1 else f"end_turn <= start_turn + {L - 1}"
    return (f"Rules: the segment spans at most {L} consecutive turns, so {span}; it ends at turn {n - 2} or "
            f"earlier (the state after the segment must exist); it holds no invalid action. {legal_segments(request)}")


def repair_message(request: JudgeRequest, outcome: str, refused: list[Segment], answer_only: bool) -> str:
    """What a repair turn says: the reason, the legal segments, and those already refused (a small model
    repeated its answer after each repair)."""
    again = "reply with the corrected JSON object" if answer_only else "call submit_segment again"
    before = "; ".join(dict.fromkeys(f"{seg.start_turn}..{seg.end_turn}" for seg in refused))
    note = f" Already refused, do not propose again: {before}." if before else ""
    return f"Your answer cannot be used: {outcome}. {legal_segments(request)}{note} Fix it and {again}."
