"""The data that crosses rooms: what rollout records, what credit reads, what the learner trains on.

Shapes are given per field. Nothing is re-tokenized after the fact: a ``Turn`` keeps the exact token
ids the engine saw and produced, so "restart from turn t" and the training row are both exact.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TypeAlias

import numpy as np
import numpy.typing as npt

# What a credit method hands the learner, named by what each level of the nesting is.
TokenValues: TypeAlias = npt.NDArray[np.float32]  # (n_completion_tokens,) one value per token of one turn
TrajectoryValues: TypeAlias = list[TokenValues]  # one TokenValues per turn of one trajectory, in turn order
GroupValues: TypeAlias = list[TrajectoryValues]  # one TrajectoryValues per trajectory of one group, in order
# one line of a run's metrics.jsonl: its step (int), phase (str) and "area/name" numbers
MetricsRow: TypeAlias = dict[str, float | int | str]


def shared_prefix_length(a: list[int], b: list[int]) -> int:
    """How many leading ids ``a`` and ``b`` share (what a turn shares with the turn before it)."""
    return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


@dataclass
class SamplingParams:
    """How the engine samples one completion. ``temperature == 0`` means greedy."""

    max_new_tokens: int = 32
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    stop_token_ids: tuple[int, ...] = ()


@dataclass
class Generation:
    """One completion from an engine.

    token_ids: (n,) generated ids, the stop token included when one ended the completion.
    logprobs:  (n,) log-prob of each generated id under the sampling distribution.
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" or "length"
    cached_tokens: int = 0  # prompt tokens the engine served from its prefix cache


@dataclass
class Turn:
    """One policy decision and the env's answer to it: one training row.

    prompt_ids:     (p,) the exact prompt token ids the engine saw.
    completion_ids: (c,) the exact ids it produced (the policy tokens of this row).
    logprobs:       (c,) their log-probs under the sampling policy.
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    observation: str  # the env observation the prompt was built from (state before the turn)
    completion_text: str
    action: str  # the parsed action sent to the env
    format_valid: bool  # the completion followed the env's output format (the <action> tags)
    action_valid: bool  # the env accepted the action (info["is_action_valid"])
    reward: float  # env reward for this step
    state_key: Hashable  # env.state_key() before the turn
    snapshot: object = None  # env.snapshot() before the turn, when branching is on
    history: tuple[tuple[str, str], ...] = ()  # (observation, action) pairs before this turn
    admissible: tuple[str, ...] = ()  # the env's admissible actions before the turn (prompt input)
    # the policy that sampled it, counted in learner updates: the starting weights are 0, the weights after
    # step t's update are t (prover/episodes/async_rollout.py states which version samples, learns and verifies what)
    policy_version: int = 0

    @property
    def n_tokens(self) -> int:
        return len(self.completion_ids)


@dataclass
class ResumePoint:
    """Where an unfinished trajectory stopped (a bounded continuation): enough to continue it exactly."""

    snapshot: object
    observation: str
    admissible: tuple[str, ...]


@dataclass
class Trajectory:
    """One episode of the policy in one env from a task's initial state."""

    traj_id: str
    task_id: str  # the task (seed + split) shared by its group
    task_text: str
    turns: list[Turn] = field(default_factory=list)
    gold: str = ""  # env.gold() at reset: privileged reference for critics, never in a prompt
    won: bool = False
    truncated: bool = False  # ended unfinished: by the turn cap, by the env's time limit, or by a full context
    # why it was truncated: "max_turns", "env" (the env's own truncation), or "context: ..." (a chat context
    # that outgrew rollout.max_prompt_tokens, in one line); "" when not truncated
    truncation: str = ""
    resume: ResumePoint | None = None  # set when a bounded continuation stopped before the episode ended
    env_error: str = ""  # one line: why the env ended this episode by failing (it raised or broke its contract)

    @property
    def finished(self) -> bool:
        return self.resume is None

    @property
    def env_return(self) -> float:
        return float(sum(t.reward for t in self.turns))

    @property
    def n_tokens(self) -> int:
        return sum(t.n_tokens for t in self.turns)

    @property
    def unique_tokens(self) -> int:
        """The episode's tokens counted once: each turn's prompt and completion less the prefix they share
        with the turn before's (in a chat context all of it, so this is the chat's length; with windowed
        prompts, little more than the chat template's header)."""
        total, before = 0, list[int]()
        for turn in self.turns:
            seq = turn.prompt_ids + turn.completion_ids
            total, before = total + len(seq) - shared_prefix_length(before, seq), seq
        return total


@dataclass
class Group:
    """G trajectories that share one task (same seed, same initial state)."""

    task_id: str
    trajectories: list[Trajectory]

    @property
    def n_won(self) -> int:
        return sum(t.won for t in self.trajectories)


@dataclass(frozen=True)
class RolloutRequest:
    """What one training step rolls out: this process's tasks, the episodes of each, the sampling seed."""

    step: int
    tasks: list[int]  # task seeds of the train split
    sizes: list[int]  # episodes of each task (the credit method's group sizes)
    seed: int  # the rollout's sampling seed, derive_seed(seed, step, "rollout")
    record_snapshots: bool = False  # the credit method branches from recorded states


@dataclass
class Batch:
    """All groups of one training step."""

    groups: list[Group]

    def turns(self) -> list[Turn]:
        """Every turn, in group, trajectory, turn order (the order of ``Advantages.flat``)."""
        return [turn for g in self.groups for tr in g.trajectories for turn in tr.turns]


@dataclass
class Advantages:
    """Per-token advantages for every policy turn of a batch.

    values[g][i][t]: (n_completion_tokens of that turn,) float32 advantages: one ``GroupValues`` per group,
                     one ``TrajectoryValues`` per trajectory, one ``TokenValues`` per turn.
    loss_mask:       same nesting; None means every completion token is trained on. A method that
                     removes tokens from the loss (SPO's probability mask) sets 0 there.
    train_batch:     None: the values index the rollout batch. Set by a method that trains on other
                     turns (SPO-tree trains on its tree's edges); the values then index this batch.
    metrics:         namespaced scalars the method wants logged ("credit/...").
    segments:        the judge's proposals as the method checked them, for reports (``prover view``).
    """

    values: list[GroupValues]
    loss_mask: list[GroupValues] | None = None
    train_batch: Batch | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    segments: list[CheckedSegment] = field(default_factory=list)

    def flat(self) -> list[TokenValues]:
        return [a for g in self.values for tr in g for a in tr]

    def flat_mask(self) -> list[TokenValues] | None:
        if self.loss_mask is None:
            return None
        return [m for g in self.loss_mask for tr in g for m in tr]


@dataclass
class Segment:
    """Turns [start, end] (inclusive) of one trajectory."""

    traj_id: str
    start_turn: int
    end_turn: int


@dataclass
class Proposal:
    """A judge's answer: the segment it thinks made the difference, and why."""

    segment: Segment
    rationale: str = ""


@dataclass(kw_only=True)
class CheckedSegment:
    """One proposal as a credit method checked it: its verified gain, or why it was dropped.

    Read by reports only (``groups.jsonl``, ``prover view``); it never changes an advantage. Built with named
    fields only: three of them are a float, a bool and a text that read alike in a row of values.
    """

    group: int  # index in batch.groups
    segment: Segment | None  # None: the judge gave no proposal for the group (``problem`` says why)
    delta: float | None  # mean won after the segment minus before it; None when dropped unverified
    accepted: bool  # delta > 0: the bonus was added
    problem: str = ""  # why validation dropped it ("" when it was verified)
    rationale: str = ""
    transcript: list[str] = field(default_factory=list)  # the judge's replies for the group (JudgeResult's)
    sampled_version: int | None = None  # the policy version that sampled the segment's turns (Turn.policy_version)
    verify_version: int | None = None  # the version whose continuations verified it; None when none were drawn


@dataclass
class JudgeRequest:
    """What a judge is asked: find, in ``group.trajectories[target]`` (a success), the segment of at
    most ``max_turns`` turns that most likely made the difference against the group's failed runs."""

    group: Group
    target: int  # index of the successful trajectory in group.trajectories
    max_turns: int = 4  # L: longest segment accepted
    seed: int = 0  # for judges that sample (random); same request + seed -> same answer

    @property
    def success(self) -> Trajectory:
        return self.group.trajectories[self.target]

    @property
    def failures(self) -> list[Trajectory]:
        return [t for t in self.group.trajectories if not t.won]


@dataclass
class JudgeUsage:
    """What asking a judge cost. Dollars are 0 for free or unpriced (local) models, never missing."""

    calls: int = 0  # model requests sent (LLM judges), failed ones included; 0 for free judges; not cached ones
    failed_calls: int = 0  # of ``calls``, those that brought no reply (timeout, refused, server error)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    dollars: float = 0.0
    tool_calls: int = 0
    repairs: int = 0  # proposals sent back to the model because validation failed
    errors: int = 0  # failed requests (timeout, server error, unparseable answer)
    cached_calls: int = 0  # replies served from the response cache: nothing spent, no tokens counted
    cached_dollars: float = 0.0  # what those cached replies cost when first paid (the cost without a cache)
    retries: int = 0  # requests sent again after a 429 or 5xx (each one also costs a request)
    # errors by kind (``count_error`` keeps them summing to ``errors``): "timeout", "connection",
    # "http_<status>" (4xx), "http_5xx", "empty" (a reply with nothing in it), "unreadable" (an answer that
    # could not be parsed), "other"; logged as judge/errors/<kind>
    errors_by_kind: dict[str, int] = field(default_factory=dict)

    def count_error(self, kind: str) -> None:
        self.errors += 1
        self.errors_by_kind[kind] = self.errors_by_kind.get(kind, 0) + 1

    def add(self, other: JudgeUsage) -> JudgeUsage:
        for name in self.__dataclass_fields__:
            if name == "errors_by_kind":  # a dict adds per key
                for kind, n in other.errors_by_kind.items():
                    self.errors_by_kind[kind] = self.errors_by_kind.get(kind, 0) + n
            else:
                setattr(self, name, getattr(self, name) + getattr(other, name))
        return self


@dataclass
class JudgeResult:
    """A judge's answer to one request: a proposal or None (with why), and what it cost."""

    proposal: Proposal | None
    usage: JudgeUsage = field(default_factory=JudgeUsage)
    failure: str = ""  # why there is no proposal ("" when there is one)
    error: str = ""  # the kind of failed request that lost the proposal ("http_401", ...); "" when none did
    transcript: list[str] = field(default_factory=list)  # an LLM judge's replies in order, each cut short
