"""ProVer's verification rules (credit/verification.py): the sequential rule never passes K, stops early on
saturated values and reaches the decisions worked out by hand on scripted outcomes; free samples count only
the trajectories that stood in the boundary state.

The Brancher here is scripted: each boundary turn has a fixed list of outcomes, handed out in order across
calls, so a test knows exactly which samples every round drew."""

from __future__ import annotations

import numpy as np
import pytest

from prover.credit.verification import Boundaries, Tally, free_tally, p_post_greater, settle, verify
from prover.episodes.branching import BranchResult
from prover.types import Group, Trajectory, Turn

PRE, POST = 1, 3  # the boundary turns of the segment [1, 2] of the target


class ScriptedOutcomes:
    """The Brancher's interface: boundary turn -> the outcomes of its continuations, in draw order."""

    def __init__(self, outcomes: dict[int, list[bool]]) -> None:
        self.outcomes = {turn: list(seq) for turn, seq in outcomes.items()}
        self.drawn = {turn: 0 for turn in outcomes}  # continuations asked for, per boundary turn
        self.calls = 0

    def continue_from(self, requests, seed=0):
        self.calls += 1
        out = []
        for r in requests:
            start = self.drawn[r.turn]
            won = np.array(self.outcomes[r.turn][start:start + r.n], dtype=bool)
            assert len(won) == r.n, "asked for more continuations than the script holds"
            self.drawn[r.turn] += r.n
            out.append(BranchResult(r, won, 0, []))
        return out


def turn(key: object) -> Turn:
    return Turn([], [], [], "", "", "", True, True, 0.0, key)


def traj(name: str, keys: list[object], won: bool) -> Trajectory:
    return Trajectory(name, "task", "task", [turn(k) for k in keys], won=won)


def one_segment(group: Group | None = None) -> list[Boundaries]:
    group = group or Group("task", [traj("t", ["a", "b", "c", "d", "e"], True)])
    return [Boundaries(group, 0, (PRE, POST))]


def run(outcomes, *, k=8, rule="adaptive", round_size=2, confidence=0.95, free=False, group=None, saturation=False):
    brancher = ScriptedOutcomes(outcomes)
    (verdict,) = verify(brancher, one_segment(group), k=k, rule=rule, round_size=round_size,
                        confidence=confidence, free_samples=free, seed=0, saturation=saturation)
    return verdict, brancher


def test_the_posterior_probability_matches_hand_integrals():
    # 2 of 2 won after, 0 of 2 before: V_post ~ Beta(3, 1) (density 3x^2), V_pre ~ Beta(1, 3) (3(1-y)^2).
    # P(V_post <= V_pre) = int_0^1 y^3 * 3(1-y)^2 dy = 3 (1/4 - 2/5 + 1/6) = 3/60 = 0.05, so 0.95.
    assert p_post_greater(Tally(0, 2), Tally(2, 2)) == pytest.approx(0.95, abs=1e-12)
    # 4 of 4 vs 0 of 4: P(V_post <= V_pre) = int y^5 * 5(1-y)^4 dy = 5 B(6, 5) = 5 * 5! 4! / 10! = 1/252
    assert p_post_greater(Tally(0, 4), Tally(4, 4)) == pytest.approx(1 - 1 / 252, abs=1e-12)
    assert p_post_greater(Tally(1, 2), Tally(1, 2)) == pytest.approx(0.5, abs=1e-12)  # symmetry


def test_it_never_draws_more_than_k_and_an_undecided_segment_ends_as_fixed_would():
    # both boundaries win every other draw: P stays 0.5, nothing saturates, curtailment never bites, so
    # rounds of 3 run to K = 8 (3 + 3 + 2 at each boundary) and Delta = 4/8 - 4/8 = 0 is rejected
    half = [True, False] * 8
    verdict, brancher = run({PRE: half, POST: half}, k=8, round_size=3)
    assert brancher.drawn == {PRE: 8, POST: 8} and brancher.calls == 3
    assert (verdict.pre.n, verdict.post.n, verdict.delta, verdict.accepted) == (8, 8, 0.0, False)
    assert verdict.settled_by == "K"


def test_with_saturation_it_stops_once_half_of_k_is_drawn_when_both_values_are_saturated():
    for outcome in (True, False):  # all won at both ends, or all failed at both ends: P stays 0.5
        verdict, brancher = run({PRE: [outcome] * 8, POST: [outcome] * 8}, saturation=True)  # rounds of 2: 4 = K/2
        assert brancher.drawn == {PRE: 4, POST: 4} and verdict.rounds == 2
        assert (verdict.settled_by, verdict.accepted) == ("saturation", False)


def test_without_saturation_a_late_failure_before_the_segment_still_counts():
    # the before-end wins 6 draws, fails the 7th and wins the 8th; the after-end wins all 8. With saturation
    # the segment stops at 4/4 against 4/4 and is rejected. Without it no round settles it (P = 0.5 while
    # both ends won everything; curtailment needs 2 wins more after than before could still reach), so it
    # runs to K = 8 as fixed does: Delta = 8/8 - 7/8 = 1/8 > 0, accepted.
    script = {PRE: [True] * 6 + [False, True], POST: [True] * 8}
    verdict, brancher = run(script)
    assert brancher.drawn == {PRE: 8, POST: 8}
    assert (verdict.settled_by, verdict.accepted, verdict.delta) == ("K", True, 0.125)
    verdict, _ = run(script, saturation=True)
    assert (verdict.settled_by, verdict.accepted) == ("saturation", False)


def test_one_failed_draw_at_each_end_does_not_count_as_saturated():
    # K = 16, rounds of 1: 16 looks, so each look needs P above 1 - 0.05 / 16 = 0.996875. After round 1 both
    # ends failed once (saturation would reject here); the after-end wins from then on. With r draws each
    # (0 of r before, r - 1 of r after), V_post ~ Beta(r, 2), V_pre ~ Beta(1, r + 1) and
    # P(V_post > V_pre) = 1 - E[(1 - V_post)^(r + 1)] = 1 - B(r, r + 3) / B(r, 2):
    # r = 5: 1 - (1/3960) / (1/30) = 131/132 = 0.99242 (not enough); r = 6: 1 - (1/18018) / (1/42) = 428/429
    # = 0.99767. Curtailment cannot bite before (at r = 6 the before-end could still reach 10 of 16).
    verdict, brancher = run({PRE: [False] * 16, POST: [False] + [True] * 15}, k=16, round_size=1)
    assert (verdict.rounds, verdict.settled_by, verdict.accepted) == (6, "confidence", True)
    assert brancher.drawn == {PRE: 6, POST: 6}


def test_decisions_worked_out_by_hand():
    wins, losses = [True] * 8, [False] * 8
    # after wins, before losses; K = 8 in rounds of 2 is 4 looks, so at confidence 0.95 each look needs P above
    # 1 - 0.05 / 4 = 0.9875. Round 1 (2 each): P = 0.95, and the 6 draws left at each end could still reorder
    # the 8-sample means, so a second round; round 2 (4 each): P = 251/252 = 0.996.
    verdict, brancher = run({PRE: losses, POST: wins}, confidence=0.95)
    assert (verdict.rounds, verdict.settled_by, verdict.accepted, verdict.delta) == (2, "confidence", True, 1.0)
    assert brancher.drawn == {PRE: 4, POST: 4}
    # at confidence 0.79 a look needs 1 - 0.21 / 4 = 0.9475, and round 1's 0.95 passes
    verdict, _ = run({PRE: losses, POST: wins}, confidence=0.79)
    assert (verdict.rounds, verdict.accepted) == (1, True)
    verdict, _ = run({PRE: losses, POST: wins}, confidence=0.81)  # 1 - 0.19 / 4 = 0.9525: not yet
    assert verdict.rounds == 2
    # K = 4, before wins and after fails: after one round (2 each) the after-side can reach at most 2 wins
    # of 4 and the before-side has at least 2, so Delta_4 <= 0 whatever comes (P = 0.05 is not below 0.05)
    verdict, _ = run({PRE: wins, POST: losses}, k=4)
    assert (verdict.rounds, verdict.settled_by, verdict.accepted, verdict.delta) == (1, "curtailment", False, -1.0)


def test_fixed_draws_k_at_each_boundary_in_one_call():
    verdict, brancher = run({PRE: [True, False, False, False], POST: [True, True, False, False]}, k=4, rule="fixed")
    assert brancher.drawn == {PRE: 4, POST: 4} and brancher.calls == 1
    assert (verdict.delta, verdict.accepted) == (0.25, True)  # 2/4 - 1/4


def hand_group() -> Group:
    # the target t stands in a, b, c, d, e before turns 0-4. f1 shares a and b and then diverges (failed);
    # w2 shares a, b, c and d (won); f3 reaches state c but one turn late (turn 3), so it does not count
    # there; f4 is short and never in b at turn 1.
    return Group("task", [
        traj("f1", ["a", "b", "x", "y"], False),
        traj("t", ["a", "b", "c", "d", "e"], True),
        traj("w2", ["a", "b", "c", "d"], True),
        traj("f3", ["a", "z", "q", "c", "d"], False),
        traj("f4", ["a"], False),
    ])


def test_free_samples_are_the_runs_that_stood_in_the_boundary_state():
    group = hand_group()
    target = 1
    # before turn 1 (state b): t, then f1 and w2 in group order -> 2 wins of 3
    assert free_tally(group, target, 1, k=8) == Tally(wins=2, n=3, free=3)
    # before turn 3 (state d): t and w2 (f3 is in d at turn 4, not 3) -> 2 of 2
    assert free_tally(group, target, 3, k=8) == Tally(wins=2, n=2, free=2)
    # never more than K, the target first: K = 2 before turn 1 keeps t and f1
    assert free_tally(group, target, 1, k=2) == Tally(wins=1, n=2, free=2)
    # before turn 0 (state a) every run stood there: 2 wins of 5
    assert free_tally(group, target, 0, k=8) == Tally(wins=2, n=5, free=5)


def test_free_samples_count_towards_k_and_only_the_rest_is_branched():
    group = hand_group()
    brancher = ScriptedOutcomes({PRE: [False] * 8, POST: [True] * 8})
    segments = [Boundaries(group, 1, (PRE, POST))]
    (verdict,) = verify(brancher, segments, k=4, rule="fixed", round_size=2, confidence=0.95,
                        free_samples=True, seed=0)
    # before: 3 free (2 wins) + 1 drawn (a loss) = 2 of 4; after (state d): 2 free wins + 2 drawn wins = 4 of 4
    assert brancher.drawn == {PRE: 1, POST: 2}
    assert (verdict.pre, verdict.post) == (Tally(2, 4, 3), Tally(4, 4, 2))
    assert (verdict.delta, verdict.accepted) == (0.5, True)


def test_settle_leaves_an_open_question_open():
    assert settle(Tally(1, 2), Tally(1, 2), k=8, confidence=0.95) is None
