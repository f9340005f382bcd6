"""The judge contract: ``propose(request) -> JudgeResult``, the same for every judge.

A judge reads one rollout group and names the segment of a successful trajectory that most likely made
the difference against the failed ones. It proposes; it never writes advantages. The framework
validates every proposal with ``validate_segment`` (here, shared by every judge and by ProVer) and
verifies it by branching. A judge's own settings are a pydantic ``Config`` read from the ``judge:``
section of the run config, like a credit method's. ``JudgeContract`` is the spec, method by method, and what
a credit method may rely on (``CreditContext.judge``); ``Judge`` is the base class a judge plugin subclasses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Protocol, cast, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from prover.plugin_config import Configurable
from prover.registry import required
from prover.types import JudgeRequest, JudgeResult, Segment

if TYPE_CHECKING:
    from prover.config import TrainConfig


class JudgeSettings(BaseModel):
    """The fields every judge has, whatever else its ``Config`` adds."""

    model_config = ConfigDict(extra="forbid")
    max_failed_steps: int = Field(3, ge=0, description="Stop the run (exit 2) after this many steps in a row "
                                  "in which every judge request failed (a bad key, model or server), instead "
                                  "of training on as plain GRPO; 0 never stops.")


@runtime_checkable
class JudgeContract(Protocol):
    """The judge contract. ``config`` is the judge's parsed settings; every judge has the ``JudgeSettings``
    fields (``max_failed_steps``)."""

    config: JudgeSettings

    def propose(self, request: JudgeRequest) -> JudgeResult:
        """Read ``request`` (one group: the target success, the failed trajectories, the most turns ``L`` a
        segment may span) and answer with a ``Proposal`` (the segment that most likely made the difference,
        and why), or with none and why in ``failure``; ``usage`` counts what the answer cost, and ``error``
        names the kind of a failed request ("http_401", ...). A proposal need not be valid: the framework
        checks it with ``validate_segment``. What a model or a server does (a bad key, a timeout, an answer
        that does not parse) is a result with ``failure`` set, never an exception, so that one group's
        failure does not end the step (``prover.judges.health`` stops a run whose judge keeps failing)."""
        ...

    def propose_all(self, requests: list[JudgeRequest]) -> list[JudgeResult]:
        """One result per request, in order (``propose`` of each; LLM judges run them concurrently)."""
        ...

    def check_ready(self) -> None:
        """Raise a one-line ``ProverError`` now if the judge cannot work (a missing API key, model or
        server), so that a run fails before its first rollout rather than after it."""
        ...

    def close(self) -> None:
        """Release servers, threads or models the judge holds; idempotent."""
        ...


class Judge(Configurable):
    """Base class of every judge (``JudgeContract`` is the spec). Subclasses set ``Config`` and implement
    ``propose``; the settings rule is every plugin's (``prover.plugin_config.Configurable``)."""

    Config: ClassVar[type[JudgeSettings]] = JudgeSettings
    config: JudgeSettings  # the parsed settings of ``Config``; a judge declares its own ``Config``'s type

    def __init__(self, config: JudgeSettings | None = None) -> None:
        self.config = config if config is not None else self.Config()

    @classmethod
    def parse_config(cls, train_cfg: TrainConfig) -> JudgeSettings:
        """The judge's own fields of the ``judge:`` section (``parse_settings``: one line on a bad one)."""
        return cast(JudgeSettings, cls.parse_settings(dict(train_cfg.judge.model_extra or {}), "judge",
                                                      str(train_cfg.judge.name)))  # an instance of cls.Config

    @classmethod
    def validate_config(cls, train_cfg: TrainConfig) -> None:
        cls.parse_config(train_cfg)

    @classmethod
    def from_train_config(cls, train_cfg: TrainConfig) -> Judge:
        return cls(cls.parse_config(train_cfg))

    @required
    def propose(self, request: JudgeRequest) -> JudgeResult:
        raise NotImplementedError

    def propose_all(self, requests: list[JudgeRequest]) -> list[JudgeResult]:
        """One result per request, in order. LLM judges override this to run requests concurrently."""
        return [self.propose(r) for r in requests]

    @classmethod
    def reads_hidden_state(cls, settings: JudgeSettings) -> bool:
        """Whether the judge, so configured, reads what neither the agent nor an LLM judge sees (the
        simulator's ``state_key``, gold); the bench says so beside its numbers."""
        return False

    def check_ready(self) -> None:
        """Raise a one-line ProverError now if the judge cannot work (a missing API key, model or server
        setting), so that a run fails before it starts rather than after its first rollout. Free judges
        have nothing to check."""

    def close(self) -> None:
        """Release servers, threads or models the judge holds."""


def validate_segment(request: JudgeRequest, segment: Segment) -> str | None:
    """Why ``segment`` cannot be verified for ``request``, or None when it can.

    The checks of the paper: it lies in the successful trajectory, within bounds, at most L turns, ends
    before the last turn (a state after it must exist to branch from), and holds no malformed or
    rejected action. The message is written for an LLM to repair its answer.
    """
    success = request.success
    n = len(success.turns)
    if segment.traj_id != success.traj_id:
        return (f"traj_id {segment.traj_id!r} is not the successful trajectory; "
                f"propose a segment of {success.traj_id!r}")
    s, e = segment.start_turn, segment.end_turn
    if not (isinstance(s, int) and isinstance(e, int)):
        return "start_turn and end_turn must be integers"
    if s < 0 or e >= n or s > e:  # the bound a segment can reach: the last turn only ends the run
        return f"turns {s}..{e} are out of range: need 0 <= start_turn <= end_turn <= {n - 2}"
    if e - s + 1 > request.max_turns:
        L = request.max_turns  # say what to change: either end may move, and how far
        return (f"segment {s}..{e} has {e - s + 1} turns; at most {L} are allowed: "
                f"choose start_turn >= {e - L + 1} or end_turn <= {s + L - 1}")
    if e >= n - 1:
        return (f"segment ends at the final turn {n - 1}; it must end before it (at most turn {n - 2}) "
                "so that the state after it can be replayed")
    for t in range(s, e + 1):
        turn = success.turns[t]
        if not (turn.format_valid and turn.action_valid):
            return f"turn {t} holds a malformed or rejected action ({turn.action!r}); choose turns without one"
    return None


def can_yield_segment(request: JudgeRequest) -> bool:
    """Whether any segment of the target success passes ``validate_segment``, without asking a judge.

    Checking the one-turn segments is enough: the last turn of any valid segment is a valid one-turn
    segment on its own. False for a one-turn success (its only turn is the final one) and for a success
    whose every non-final turn holds a malformed or rejected action; a judge asked about such a request
    can only be wrong, and an LLM judge would be paid for it.
    """
    success = request.success
    return request.max_turns >= 1 and any(
        validate_segment(request, Segment(success.traj_id, t, t)) is None for t in range(len(success.turns) - 1))


def valid_segments(request: JudgeRequest) -> list[Segment]:
    """Every segment that ``validate_segment`` accepts, shortest first, then earliest."""
    success = request.success
    n = len(success.turns)
    out = []
    for length in range(1, request.max_turns + 1):
        for s in range(0, n - length):
            seg = Segment(success.traj_id, s, s + length - 1)
            if validate_segment(request, seg) is None:
                out.append(seg)
    return out


LISTED = 6  # at most this many legal segments are listed one by one; more are stated as bounds


def legal_segments(request: JudgeRequest) -> str:
    """Exactly the segments ``validate_segment`` accepts for ``request``, in one sentence for a model: each
    one when there are few (a 2-turn success has one, 0..0), else the bounds and the turns to leave out.
    A served 1.5B judge, told only the rule it broke, kept proposing segments past the last replayable turn."""
    success, L = request.success, request.max_turns
    segments = sorted(valid_segments(request), key=lambda seg: (seg.start_turn, seg.end_turn))
    if not segments:
        return "No segment of this run can be verified."
    pairs = [f"start_turn={seg.start_turn}, end_turn={seg.end_turn}" for seg in segments]
    if len(segments) == 1:
        return f"The only legal segment is {pairs[0]}."
    if len(segments) <= LISTED:
        return f"The legal segments are exactly: {'; '.join(pairs)}."
    last = len(success.turns) - 2
    bad = [t for t in range(last + 1) if not (success.turns[t].format_valid and success.turns[t].action_valid)]
    text = f"Legal segments: 0 <= start_turn <= end_turn <= {last} and end_turn - start_turn <= {L - 1}"
    if bad:
        text += f", with none of turns {', '.join(map(str, bad))} inside (they hold rejected actions)"
    return text + "."
