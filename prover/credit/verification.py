"""How ProVer verifies a proposed segment: fixed K continuations, or sequential rounds that stop early.

    V(s)    = P(win | s, current policy)             estimated from samples that stood in s
    Delta   = V^(s_{r+1}) - V^(s_l)                  accepted when Delta > 0 (prover.py adds the bonus)

``fixed`` (the paper's): K continuations from each boundary, one Brancher call for every segment of a step.

``adaptive``: continuations come in rounds of ``round_size`` per boundary, every unsettled segment of the
step in one Brancher call per round, and a segment stops as soon as its decision is settled:

1. the fixed-K decision can no longer change (curtailment: even if every remaining draw went against the
   current leader, the K-sample means keep their order), or
2. the posterior probability that V(s_{r+1}) > V(s_l) is above ``1 - (1 - confidence) / looks`` (accept)
   or below ``(1 - confidence) / looks`` (reject), with a uniform Beta(1, 1) prior on each value, where
   ``looks = ceil(K / round_size)`` is the most rounds a segment can take: the error budget is split over
   every look (Bonferroni), so ``confidence`` holds for the whole sequence, not for each round alone (at
   0.95 per round, four looks of K = 8 stopped on 4 of 26 clear decisions the other way), or
3. with ``saturation`` (off by default), both boundaries are saturated: every sample so far won, or every
   one failed, with at least half of K drawn at each (``SATURATION_SHARE``; after one or two draws "all
   failed" is too weak a sign, and on scripted draws it ended segments that a later win would have
   accepted). It rejects, since Delta is 0 so far. Off by default because the decision is Delta > 0, not
   a large Delta: a boundary with V = 0.8 wins its first four draws four times in ten, and a good segment
   after it then looks saturated. On the recorded batches of docs/perf.md it rejected 3 of the 26
   proposals that K = 32 accepts with confidence (all three "all won"), where fixed K = 8 accepted them.

A boundary never gets more than K samples; a segment that reaches K at both boundaries is decided by
Delta > 0, as ``fixed`` decides it.

Free samples (``free_samples=true``, either rule): a trajectory of the group that stood in a boundary
state is already an on-policy sample of that state's value. A trajectory "stood in" the target's state
before turn t when it has a turn t whose ``state_key`` equals the target's (equal keys behave identically
from there on, by the env contract, and the same turn index leaves the same number of turns before the
cap). The target itself is one such sample at both boundaries, and a failed run that shared the target's
states up to the segment's start and then diverged is a sample before it. They count towards K, and only
the rest is branched. Departure: those runs' prompts may hold another history (``history_window``), and
the judge picked the segment after seeing their outcomes, so free samples can bias Delta; the perf
benchmark measures the decisions against a K = 32 reference.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from prover.episodes.branching import BrancherContract, BranchRequest
from prover.errors import ContractError
from prover.seeding import derive_seed
from prover.types import Group

SATURATION_SHARE = 0.5  # saturation needs this share of K drawn at each boundary
TIE = 1e-9  # the sum in p_post_greater is exact up to rounding: a probability equal to the bound does not pass


@dataclass
class Tally:
    """Samples of one boundary state's value: wins out of n (free ones included)."""

    wins: int = 0
    n: int = 0
    free: int = 0  # of n, taken from the group's own trajectories
    # the policy version whose continuations drew the branched samples (free ones come from the group's own
    # runs, sampled by Turn.policy_version); None until one is drawn or when the Brancher does not say
    version: int | None = None

    def add(self, won: Sequence[bool] | np.ndarray, version: int | None = None) -> None:
        self.wins += int(sum(bool(w) for w in won))
        self.n += len(won)
        self.version = version if version is not None else self.version

    @property
    def mean(self) -> float:
        return self.wins / self.n if self.n else 0.0


@dataclass
class Verdict:
    """One segment's verification: its boundaries' tallies, Delta, the decision and the rounds it took."""

    pre: Tally
    post: Tally
    accepted: bool = False
    rounds: int = 0
    settled_by: str = ""  # "fixed", "curtailment", "confidence", "saturation" or "K"

    @property
    def delta(self) -> float:
        return self.post.mean - self.pre.mean

    @property
    def verify_version(self) -> int | None:
        """The policy version that verified the segment: its continuations' (one per step, so both sides
        agree); None when every sample was free."""
        versions = [t.version for t in (self.pre, self.post) if t.version is not None]
        return max(versions) if versions else None


@dataclass(frozen=True)
class Boundaries:
    """What to verify: the group, its target trajectory and the two boundary turns (l and r + 1)."""

    group: Group
    target: int
    turns: tuple[int, int]
    tallies: tuple[Tally, Tally] = field(default_factory=lambda: (Tally(), Tally()))


def free_tally(group: Group, target: int, turn: int, k: int) -> Tally:
    """The group's trajectories that stood in the target's state before ``turn`` (see the docstring): the
    target first, then the others in group order, K at most."""
    trs = group.trajectories
    key = trs[target].turns[turn].state_key
    order = [target] + [i for i in range(len(trs)) if i != target]
    won = [trs[i].won for i in order if len(trs[i].turns) > turn and trs[i].turns[turn].state_key == key][:k]
    return Tally(wins=sum(won), n=len(won), free=len(won))


def p_post_greater(pre: Tally, post: Tally) -> float:
    """P(V_post > V_pre) for independent Beta(1 + wins, 1 + n - wins) posteriors, exactly: the sum over
    i < a_post of B(a_pre + i, b_post + b_pre) / ((b_post + i) B(1 + i, b_post) B(a_pre, b_pre))."""
    a1, b1 = 1 + post.wins, 1 + post.n - post.wins
    a2, b2 = 1 + pre.wins, 1 + pre.n - pre.wins

    def log_beta(x: float, y: float) -> float:
        return math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y)

    total = sum(math.exp(log_beta(a2 + i, b1 + b2) - math.log(b1 + i) - log_beta(1 + i, b1) - log_beta(a2, b2))
                for i in range(a1))
    return min(1.0, max(0.0, total))


def settle(pre: Tally, post: Tally, k: int, confidence: float, saturation: bool = False) -> tuple[bool, str] | None:
    """(accepted, why) once the decision is settled, else None (draw another round). ``confidence`` is the
    per-look level: ``verify`` passes the sequence's level with its error split over the looks."""
    if pre.n >= k and post.n >= k:
        return post.mean > pre.mean, "K"
    # the K-sample means compare as wins * (K / n); draws still to come can move each one
    lo_post, hi_post = post.wins, post.wins + (k - post.n)
    lo_pre, hi_pre = pre.wins, pre.wins + (k - pre.n)
    if lo_post > hi_pre:
        return True, "curtailment"
    if hi_post <= lo_pre:
        return False, "curtailment"
    p = p_post_greater(pre, post)
    if p > confidence + TIE:
        return True, "confidence"
    if p < 1.0 - confidence - TIE:
        return False, "confidence"
    enough = saturation and min(pre.n, post.n) >= math.ceil(SATURATION_SHARE * k)
    if enough and (pre.wins == post.wins == 0 or (pre.wins == pre.n and post.wins == post.n)):
        return False, "saturation"  # all failed or all won so far: no gain in sight
    return None


def _draw(brancher: BrancherContract | None, asks: list[tuple[Boundaries, int, int]], seed: int) -> None:
    """One Brancher call for every (boundaries, side, n) asked; adds the outcomes to the tallies."""
    if brancher is None:
        raise ContractError("verification draws continuations, but the credit context has no brancher")
    requests = [BranchRequest(b.group.trajectories[b.target], b.turns[side], n) for b, side, n in asks]
    for (b, side, _), result in zip(asks, brancher.continue_from(requests, seed=seed)):
        b.tallies[side].add(result.won, result.policy_version)


def verify(brancher: BrancherContract | None, segments: list[Boundaries], *, k: int, rule: str, round_size: int,
           confidence: float, free_samples: bool, seed: int, saturation: bool = False) -> list[Verdict]:
    """Verify every segment of a step under ``rule`` ("fixed" or "adaptive"); one verdict per segment."""
    for b in segments:
        for side in (0, 1):
            if free_samples:
                found = free_tally(b.group, b.target, b.turns[side], k)
                b.tallies[side].wins, b.tallies[side].n, b.tallies[side].free = found.wins, found.n, found.free
    verdicts = [Verdict(*b.tallies) for b in segments]
    if rule == "fixed":
        asks = [(b, side, k - b.tallies[side].n) for b in segments for side in (0, 1) if b.tallies[side].n < k]
        if asks:
            _draw(brancher, asks, seed)
        for v in verdicts:
            v.accepted, v.rounds, v.settled_by = v.delta > 0, 1, "fixed"
        return verdicts
    open_ = list(range(len(segments)))
    per_look = 1.0 - (1.0 - confidence) / math.ceil(k / round_size)  # see rule 2 in the docstring
    for round_ in range(1, 2 * k + 1):  # each round adds at least one sample to an unsettled boundary
        asks = [(segments[i], side, min(round_size, k - segments[i].tallies[side].n))
                for i in open_ for side in (0, 1) if segments[i].tallies[side].n < k]
        if asks:
            _draw(brancher, asks, derive_seed(seed, round_, "verify-round"))
        still = []
        for i in open_:
            verdicts[i].rounds = round_
            done = settle(verdicts[i].pre, verdicts[i].post, k, per_look, saturation)
            if done is None:
                still.append(i)
            else:
                verdicts[i].accepted, verdicts[i].settled_by = done
        open_ = still
        if not open_:
            break
    for v in verdicts:  # accepted also needs a positive estimate, the gain the bonus is made of
        v.accepted = v.accepted and v.delta > 0
    return verdicts


def verify_metrics(verdicts: list[Verdict]) -> dict[str, float]:
    """Per step: samples used at the boundaries (free ones apart), the rounds the slowest segment took, and
    the policy version that drew the continuations (when any were drawn)."""
    out = {"credit/verify_samples": float(sum(v.pre.n + v.post.n for v in verdicts)),
           "credit/verify_free_samples": float(sum(v.pre.free + v.post.free for v in verdicts)),
           "credit/verify_rounds": float(max((v.rounds for v in verdicts), default=0))}
    versions = [v.verify_version for v in verdicts if v.verify_version is not None]
    if versions:  # the policy whose continuations verified the step's segments (prover/episodes/async_rollout.py)
        out["credit/verify_policy_version"] = float(max(versions))
    return out
