"""The contrast judges: free, deterministic judges that read the group themselves instead of asking a model.

They line the successful trajectory S up with the group's failed runs, and propose the short window
where S, from a situation the failed runs were also in, did what none of them did there and so got
somewhere none of them went. None of the anchors has them; they are ours. Two judges share the rule
and differ only in what counts as "the same situation" (``align``):

- ``contrast`` (``align="state"``) compares ``Turn.state_key``, the env's identity of the TRUE state
  before a turn. That is hidden state: neither the agent nor the paper's LLM judge ever sees it, so
  ``contrast`` is an oracle-aligned baseline, not a like-for-like stand-in for an LLM judge.
- ``text-contrast`` (``align="text"``) compares what the agent saw: ``Turn.observation``, the
  observation text the prompt was built from, case and spacing normalised. It never reads
  ``state_key``. Two true states that show the same text are one situation to it, and one state shown
  by two texts is two; that is all an LLM judge reading the same trajectories could tell apart.

Below, a *situation* is the alignment key of a turn: its state key, or its normalised observation text.
Actions are always compared parsed, with case and spacing normalised.

1. Index the failed runs: for every situation they were in before one of their turns, the set of
   actions they took there (the *alternatives*). S's turn t is *aligned* when some failed run was in
   exactly that situation, whatever the turn number. The situation after a failed run's last turn is
   not recorded (the episode ended: no state key was taken and the agent was shown no next
   observation); when S takes that same last action in that same situation, the situation S reaches
   counts as one that failed run was in (with no alternatives: the run stopped there, mostly at the
   turn cap). In state mode that assumes the same action in the same state leads to the same state; in
   text mode it assumes more: that the same action after the same text leads to the same next text.
2. S *diverges* at t when t is aligned and S's action is none of the alternatives there: in the same
   situation it did what the failed runs did not.
3. S *breaks away* after turn e when e is the last aligned turn: the situation after e, and every
   later one, is one no failed run was in. From there on S is where no failed run went, so the cause
   of the difference lies at or before e.
4. The proposal is the window [d, e] from the last divergence d <= e to the break-away: the decision
   that, from the last situation S shared with the failed runs, took it out of their reach. Under
   deterministic dynamics leaving the aligned states needs a new action, so d == e (one turn) is the
   usual answer. The window keeps at most L turns and no rejected or malformed action: when [d, e] is
   longer or holds one, it is cut from the left to the longest valid part that still ends at e.

Why not simply the first divergence: a success often diverges early in a way that does not matter (a
different first room) and then walks back into situations the failed runs were in; the situations it
reaches afterwards tell that such a divergence did not separate it from them. The break-away does.

Why text mode needs another rule (``rule="frequency"``, text-contrast's default). Observations rarely show
the whole state: in pivot-sim a success that took the right item walks on through corridor texts that the
failed runs, carrying a wrong item, saw too. Measured on tuning seeds (benchmarks/studies/judge_truth.py, pivot-sim
defaults, seeds 100-109, 1711 judged groups), the break-away rule in text mode fell back to "approach" on
78% of groups (24.5% hits: walking turns), and its break-away windows hit 0.3%: a text that no failed run
saw (a filler that reads the bag) is not a state they never reached. Text re-entering shared situations
says nothing about whether the state did, so "where S left the failed runs for good" cannot be read off
text. What text can still tell is which choice S made that the failed runs, in the same situation, did
not make, and the other successes did:

5. (``rule="frequency"``) For every valid, non-final turn t of S whose situation k a failed run was in,
   let w(t) be the share of the group's successful visits to k (S's own included) at which S's action
   a_t was taken, and f(t) the share of the failed runs' visits to k at which it was. The proposal is the
   one turn with the largest w(t) - f(t) > 0: the action most typical of winning and least of failing in
   a situation both were in. Ties go to the situation the failed runs visited most (more evidence), then
   to the earlier turn. It reads what an LLM judge would compare in the transcripts: in the same text,
   who did what, and how it ended. When no turn scores above 0 the fallbacks below apply.

Fallbacks, named in the rationale so that acceptance rates can be split by them:
- "approach": S's situation before its final turn is aligned, so only its final (winning) action was
  new, and the final turn cannot be verified (no state after it to branch from). The window is then
  the last L valid turns before the final one, the approach to the win. ``fallback=none`` proposes
  nothing instead.
- no failed run has a turn (nothing to contrast with), or no valid window exists: no proposal.

Limits: a coarse key (a ``state_key`` that leaves out something that matters, or an observation text
such as "Nothing happens." that many states share) makes more turns look aligned than are; the env
contract asks for the true state, and text mode accepts the coarseness as the price of seeing only
what the agent saw.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Literal

from pydantic import Field

from prover.judges.base import Judge, JudgeSettings, validate_segment
from prover.types import JudgeRequest, JudgeResult, Proposal, Segment, Trajectory, Turn

Key = Callable[[Turn], Hashable]


class ContrastSettings(JudgeSettings):
    align: Literal["state", "text"] = Field(
        "state", description="What makes two turns the same situation: 'state', the env's true state_key "
        "(hidden state, which neither the agent nor an LLM judge sees), or 'text', the observation "
        "text the agent saw (what text-contrast uses).")
    fallback: Literal["approach", "none"] = Field(
        "approach", description="When the rule finds no window (the success breaks away only with its "
        "final action, or no turn scores above 0): propose the last L valid turns before it ('approach') "
        "or nothing ('none').")
    rule: Literal["break-away", "frequency"] = Field(
        "break-away", description="How the window is found (module docstring): 'break-away', the last "
        "divergence before the success left the failed runs' situations for good (steps 1-4), or "
        "'frequency', the one turn whose action is most typical of the group's successes and least of its "
        "failed runs in a situation both were in (step 5; text-contrast's default).")


class TextContrastSettings(ContrastSettings):
    align: Literal["text"] = Field(
        "text", description="Always 'text': runs are aligned by the observation text the agent saw, "
        "never by state_key (judge.name=contrast aligns by state).")
    rule: Literal["break-away", "frequency"] = Field(
        "frequency", description="As for contrast; 'frequency' by default because text rarely shows the "
        "whole state, so a break-away read off text is no break-away of the state (module docstring).")


def normalise_action(action: str) -> str:
    return " ".join(action.lower().split())


def state_key(turn: Turn) -> Hashable:
    return turn.state_key


def observation_text(turn: Turn) -> Hashable:
    return normalise_action(turn.observation)  # the same normalisation as actions: case and spacing


ALIGN_KEYS: dict[str, Key] = {"state": state_key, "text": observation_text}


def alternatives(success: Trajectory, failures: list[Trajectory],
                 key: Key = state_key) -> dict[Hashable, set[str]]:
    """Situation -> the actions the failed runs took in it (over every visit of every run), for every
    situation a failed run was in; the situations after their last turns are added where S shows them."""
    index: dict[Hashable, set[str]] = {}
    for traj in failures:
        for turn in traj.turns:
            index.setdefault(key(turn), set()).add(normalise_action(turn.action))
    last_moves = {(key(f.turns[-1]), normalise_action(f.turns[-1].action)) for f in failures}
    for before, after in zip(success.turns, success.turns[1:]):
        if (key(before), normalise_action(before.action)) in last_moves:
            index.setdefault(key(after), set())
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


class ContrastJudge(Judge):
    """Free, deterministic: the window where the success broke away from the failed runs, with runs
    aligned by the env's true ``state_key`` (hidden state no agent or LLM judge sees; ``align``)."""

    Config = ContrastSettings
    config: ContrastSettings  # the parsed settings of ``Config``

    @classmethod
    def reads_hidden_state(cls, settings: JudgeSettings) -> bool:
        return isinstance(settings, ContrastSettings) and settings.align == "state"

    def propose(self, request: JudgeRequest) -> JudgeResult:
        success = request.success
        failures = [f for f in request.failures if f.turns]
        n = len(success.turns)
        if not failures:
            return JudgeResult(None, failure="no failed run with a turn to contrast with")
        if n < 2:
            return JudgeResult(None, failure="the success has a single turn; no non-terminal segment exists")
        key = ALIGN_KEYS[self.config.align]
        keys = [key(turn) for turn in success.turns]
        index = alternatives(success, failures, key)
        if self.config.rule == "frequency":
            result = self._most_typical_of_winning(request, key)
            if result is not None:
                return result
        else:
            aligned = [t for t in range(n) if keys[t] in index]
            last = aligned[-1] if aligned else None  # the initial state is shared, so this is rarely None
            if last is not None and last <= n - 2:
                result = self._break_away(request, index, keys, last)
                if result is not None:
                    return result
        if self.config.fallback == "none":
            return JudgeResult(None, failure="the success breaks away from the failed runs only at its final turn")
        seg = window_ending_at(success, 0, n - 2, request.max_turns)
        if seg is None or validate_segment(request, seg) is not None:
            return JudgeResult(None, failure="no valid window before the final turn")
        why = (f"approach: the success shares its situations with the failed runs until its final turn; "
               f"turns {seg.start_turn}..{seg.end_turn} lead up to it")
        return JudgeResult(Proposal(seg, rationale=why))

    @staticmethod
    def _most_typical_of_winning(request: JudgeRequest, key: Key) -> JudgeResult | None:
        """Step 5 of the module docstring: the turn maximising w(t) - f(t), or None when none is > 0."""
        success = request.success
        visits: dict[bool, dict[Hashable, list[str]]] = {True: {}, False: {}}
        for traj in request.group.trajectories:
            for turn in traj.turns:
                visits[traj.won].setdefault(key(turn), []).append(normalise_action(turn.action))
        best, best_rank = None, None
        for t in range(len(success.turns) - 1):
            turn = success.turns[t]
            failed = visits[False].get(key(turn))
            if not failed or not _valid_turn(success, t):
                continue
            won, action = visits[True][key(turn)], normalise_action(turn.action)
            score = won.count(action) / len(won) - failed.count(action) / len(failed)
            rank = (score, len(failed), -t)
            if score > 0 and (best_rank is None or rank > best_rank):
                best, best_rank = (t, won.count(action), len(won), failed.count(action), len(failed)), rank
        if best is None:
            return None
        t, w, nw, f, nf = best
        seg = Segment(success.traj_id, t, t)
        if validate_segment(request, seg) is not None:
            return None
        return JudgeResult(Proposal(seg, rationale=(
            f"frequency: at turn {t} the success chose {success.turns[t].action!r}, taken at {w} of {nw} "
            f"successful and {f} of {nf} failed visits to that situation")))

    @staticmethod
    def _break_away(request: JudgeRequest, index: dict[Hashable, set[str]], keys: list[Hashable],
                    e: int) -> JudgeResult | None:
        success = request.success
        divergences = [t for t in range(e + 1) if keys[t] in index
                       and normalise_action(success.turns[t].action) not in index[keys[t]]]
        d = divergences[-1] if divergences else e
        seg = window_ending_at(success, d, e, request.max_turns)
        if seg is None or validate_segment(request, seg) is not None:
            return None
        why = (f"at turn {d} the success chose {success.turns[d].action!r} where the failed runs chose "
               f"{sorted(index[keys[d]])[:5]}" if divergences else "it took no action they did not")
        cut = "" if seg.start_turn == d else f"; cut to turns {seg.start_turn}..{seg.end_turn}"
        return JudgeResult(Proposal(seg, rationale=(
            f"break-away: {why}; after turn {e} it is where no failed run went{cut}")))


class TextContrastJudge(ContrastJudge):
    """Free, deterministic: ``contrast``'s rule with runs aligned by the observation text the agent saw
    and its actions, never by ``state_key``; a like-for-like baseline for an LLM judge."""

    Config = TextContrastSettings
    config: TextContrastSettings  # the parsed settings of ``Config``
