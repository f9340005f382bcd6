"""The contrast judge: a free, deterministic judge that reads the group itself instead of asking a model.

It lines the successful trajectory S up with the group's failed runs by state, and proposes the short
window where S, from a state the failed runs also stood in, did what none of them did there and so got
somewhere none of them went. None of the anchors has it; it is ours.

Alignment (every comparison is by ``Turn.state_key``, the env's identity of the true state before a
turn, and by the parsed action with case and spacing normalised):

1. Index the failed runs: for every state key they stood in before one of their turns, the set of
   actions they took there (the *alternatives*). S's turn t is *aligned* when some failed run was at
   exactly that state, whatever the turn number. The state after a failed run's last turn is not
   recorded; when S takes that same last action in that same state, the state it reaches counts as
   one that failed run stood in (with no alternatives: the run stopped there, mostly at the turn cap).
2. S *diverges* at t when t is aligned and S's action is none of the alternatives there: at the same
   state it did what the failed runs did not.
3. S *breaks away* after turn e when e is the last aligned turn: the state after e, and every later
   one, is a state no failed run stood in. From there on S is where no failed run went, so the cause
   of the difference lies at or before e.
4. The proposal is the window [d, e] from the last divergence d <= e to the break-away: the decision
   that, from the last state S shared with the failed runs, took it out of their reach. Under
   deterministic dynamics leaving the aligned states needs a new action, so d == e (one turn) is the
   usual answer. The window keeps at most L turns and no rejected or malformed action: when [d, e] is
   longer or holds one, it is cut from the left to the longest valid part that still ends at e.

Why not simply the first divergence: a success often diverges early in a way that does not matter (a
different first room) and then walks back into states the failed runs reached; the states it reaches
afterwards tell that such a divergence did not separate it from them. The break-away does.

Fallbacks, named in the rationale so that acceptance rates can be split by them:
- "approach": S's state before its final turn is aligned, so only its final (winning) action was
  new, and the final turn cannot be verified (no state after it to branch from). The window is then
  the last L valid turns before the final one, the approach to the win. ``fallback=none`` proposes
  nothing instead.
- no failed run has a turn (nothing to contrast with), or no valid window exists: no proposal.

Limits: the rule for a failed run's last turn assumes the same action in the same state leads to the
same state (true of the embedded envs). A coarse ``state_key`` (one that leaves out something that
matters) makes more turns look aligned than are; the env contract asks for the true state.
"""

from __future__ import annotations

from typing import Hashable, Literal

from pydantic import Field

from prover.judges.base import Judge, JudgeSettings, validate_segment
from prover.registry import JUDGES
from prover.types import JudgeRequest, JudgeResult, Proposal, Segment, Trajectory


class ContrastSettings(JudgeSettings):
    fallback: Literal["approach", "none"] = Field(
        "approach", description="When the success breaks away from the failed runs only with its "
        "final action: propose the last L valid turns before it ('approach') or nothing ('none').")


def normalise_action(action: str) -> str:
    return " ".join(action.lower().split())


def alternatives(success: Trajectory, failures: list[Trajectory]) -> dict[Hashable, set[str]]:
    """State key -> the actions the failed runs took in that state (over every visit of every run), for
    every state a failed run stood in; the states after their last turns are added where S shows them."""
    index: dict[Hashable, set[str]] = {}
    for traj in failures:
        for turn in traj.turns:
            index.setdefault(turn.state_key, set()).add(normalise_action(turn.action))
    last_moves = {(f.turns[-1].state_key, normalise_action(f.turns[-1].action)) for f in failures}
    for before, after in zip(success.turns, success.turns[1:]):
        if (before.state_key, normalise_action(before.action)) in last_moves:
            index.setdefault(after.state_key, set())
    return index


def _valid_turn(traj: Trajectory, t: int) -> bool:
    turn = traj.turns[t]
    return turn.format_valid and turn.action_valid


def window_ending_at(traj: Trajectory, start: int, end: int, max_turns: int) -> Segment | None:
    """The longest run of valid turns within [start, end] that ends at ``end`` and has at most
    ``max_turns`` turns; None when turn ``end`` itself is invalid."""
    s = end + 1
    while s > max(start, end - max_turns + 1) and _valid_turn(traj, s - 1):
        s -= 1
    return Segment(traj.traj_id, s, end) if s <= end else None


@JUDGES.register("contrast")
class ContrastJudge(Judge):
    Config = ContrastSettings

    def propose(self, request: JudgeRequest) -> JudgeResult:
        success = request.success
        failures = [f for f in request.failures if f.turns]
        n = len(success.turns)
        if not failures:
            return JudgeResult(None, failure="no failed run with a turn to contrast with")
        if n < 2:
            return JudgeResult(None, failure="the success has a single turn; no non-terminal segment exists")
        index = alternatives(success, failures)
        aligned = [t for t in range(n) if success.turns[t].state_key in index]
        last = aligned[-1] if aligned else None  # the initial state is shared, so this is rarely None
        if last is not None and last <= n - 2:
            result = self._break_away(request, index, last)
            if result is not None:
                return result
        if self.config.fallback == "none":
            return JudgeResult(None, failure="the success breaks away from the failed runs only at its final turn")
        seg = window_ending_at(success, 0, n - 2, request.max_turns)
        if seg is None or validate_segment(request, seg) is not None:
            return JudgeResult(None, failure="no valid window before the final turn")
        return JudgeResult(Proposal(seg, rationale=f"approach: the success shares its states with the failed runs "
                                    f"until its final turn; turns {seg.start_turn}..{seg.end_turn} lead up to it"))

    @staticmethod
    def _break_away(request: JudgeRequest, index: dict[Hashable, set[str]], e: int) -> JudgeResult | None:
        success = request.success
        divergences = [t for t in range(e + 1) if success.turns[t].state_key in index
                       and normalise_action(success.turns[t].action) not in index[success.turns[t].state_key]]
        d = divergences[-1] if divergences else e
        seg = window_ending_at(success, d, e, request.max_turns)
        if seg is None or validate_segment(request, seg) is not None:
            return None
        turn = success.turns[d]
        why = (f"at turn {d} the success chose {turn.action!r} where the failed runs chose "
               f"{sorted(index[turn.state_key])[:5]}" if divergences else "it took no action they did not")
        cut = "" if seg.start_turn == d else f"; cut to turns {seg.start_turn}..{seg.end_turn}"
        return JudgeResult(Proposal(seg, rationale=(
            f"break-away: {why}; after turn {e} it is where no failed run went{cut}")))
