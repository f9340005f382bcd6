"""Judge diagnostics against the ground truth (prover/episodes/truth.py), on hand-built groups and a toy env whose
pivotal turns are written down by hand."""

from __future__ import annotations

from typing import ClassVar

from prover.envs.base import TextEnv
from prover.episodes.truth import TruthScorer, segment_hits
from prover.types import Batch, CheckedSegment, Group, Segment, Trajectory, Turn


def _turn(action: str) -> Turn:
    return Turn(prompt_ids=[1], completion_ids=[2], logprobs=[0.0], observation="", completion_text=action,
                action=action, format_valid=True, action_valid=True, reward=0.0, state_key=0)


def _traj(traj_id: str, n_turns: int, won: bool) -> Trajectory:
    return Trajectory(traj_id=traj_id, task_id="train/1", task_text="t", turns=[_turn("a")] * n_turns, won=won)


class KnowsTruth(TextEnv):
    """Pivotal turns by trajectory id, as a test writes them down."""

    table: ClassVar[dict[str, list[int]]] = {"g0#0": [2], "g0#1": [], "g1#0": [0, 4]}
    asked: ClassVar[list] = []

    def pivotal_turns(self, trajectory):
        self.asked.append(trajectory.traj_id)
        return self.table[trajectory.traj_id]


class NoTruth(TextEnv):
    pass


def _batch() -> Batch:
    return Batch([Group("train/1", [_traj("g0#0", 5, True), _traj("g0#1", 4, False)]),
                  Group("train/2", [_traj("g1#0", 8, True), _traj("g1#1", 3, False)])])


def test_segment_hits_is_inclusive_at_both_ends():
    assert segment_hits([3], 3, 3) and segment_hits([3], 1, 3) and segment_hits([3], 3, 6)
    assert not segment_hits([3], 0, 2) and not segment_hits([3], 4, 5) and not segment_hits([], 0, 9)


def test_counts_over_verified_proposals_only():
    segments = [
        # contains turn 2: hit, accepted
        CheckedSegment(group=0, segment=Segment("g0#0", 1, 2), delta=0.5, accepted=True),
        # pivotal 0 and 4 lie outside: miss, accepted
        CheckedSegment(group=1, segment=Segment("g1#0", 1, 3), delta=0.25, accepted=True),
        # turn 4: hit, accepted
        CheckedSegment(group=1, segment=Segment("g1#0", 4, 4), delta=0.25, accepted=True),
        # miss, rejected
        CheckedSegment(group=0, segment=Segment("g0#0", 0, 1), delta=-0.25, accepted=False),
        # dropped: not counted
        CheckedSegment(group=1, segment=Segment("g1#0", 0, 0), delta=None, accepted=False,
                       problem="ends on a terminal turn"),
        # no segment: not counted
        CheckedSegment(group=0, segment=None, delta=None, accepted=False, problem="judge found nothing"),
    ]
    m = TruthScorer(KnowsTruth).metrics(_batch(), segments)
    # 4 verified; hits: 1st and 3rd; accepted: 1st, 2nd and 3rd, of which the 1st and 3rd are hits
    assert m["truth/proposals"] == 4 and m["truth/hits"] == 2
    assert m["truth/accepted"] == 3 and m["truth/accepted_hits"] == 2
    # pivotal shares of the judged trajectories: g0#0 1/5 (twice), g1#0 2/8 (twice) -> (0.2+0.25+0.25+0.2)/4
    assert abs(m["truth/target_pivotal_share"] - 0.225) < 1e-12


def test_an_env_without_truth_logs_nothing_and_is_asked_once():
    scorer = TruthScorer(NoTruth)
    seg = [CheckedSegment(group=0, segment=Segment("g0#0", 1, 2), delta=0.5, accepted=True)]
    assert scorer.metrics(_batch(), seg) == {}
    assert scorer.known is False
    assert scorer.metrics(_batch(), seg) == {}


def test_a_known_env_logs_zero_counts_on_a_step_without_proposals():
    scorer = TruthScorer(KnowsTruth)
    assert scorer.metrics(_batch(), []) == {}  # not yet known whether the env has truth
    scorer.metrics(_batch(), [CheckedSegment(group=0, segment=Segment("g0#1", 0, 1), delta=0.0, accepted=False)])
    assert scorer.metrics(_batch(), []) == {"truth/proposals": 0.0, "truth/hits": 0.0, "truth/accepted": 0.0,
                                            "truth/accepted_hits": 0.0}
