"""ProVer: with no accepted segment it is GRPO exactly; an accepted segment moves only its own tokens,
by exactly lambda * Delta (times reward.scale in the default units); invalid proposals are dropped and
counted; eligibility; diagnostics; config errors; and one run through the real Brancher.

The verification source of most tests is a scripted stand-in with the Brancher's interface, so that
Delta is an input and the expected advantages are computed by hand from the formula.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prover.config import TrainConfig
from prover.config_load import load_config
from prover.credit.base import CreditContext
from prover.credit.grpo import GRPO, GRPOConfig
from prover.credit.prover import ProVer, ProVerConfig
from prover.episodes.branching import BranchResult
from prover.errors import ConfigError, ProverError
from prover.judges.base import Judge
from prover.judges.contrast import ContrastJudge
from prover.types import JudgeRequest, JudgeResult, JudgeUsage, Proposal, Segment, Trajectory, Turn


class ScriptedJudge(Judge):
    """Answers every request with ``answer(request)``: a Segment, or None for no proposal."""

    def __init__(self, answer, usage: JudgeUsage | None = None) -> None:
        super().__init__()
        self.answer, self.usage, self.requests = answer, usage or JudgeUsage(), []

    def propose(self, request):
        self.requests.append(request)
        seg = self.answer(request)
        return JudgeResult(Proposal(seg) if seg is not None else None, usage=JudgeUsage().add(self.usage))


class ScriptedValues:
    """The Brancher's interface with a fixed success rate per branch turn (default ``default``)."""

    def __init__(self, values: dict[int, float] | None = None, default: float = 0.0) -> None:
        self.values, self.default, self.calls = values or {}, default, []

    def continue_from(self, requests, seed=0):
        self.calls.append([(r.trajectory.traj_id, r.turn, r.n) for r in requests])
        out = []
        for r in requests:
            v = self.values.get(r.turn, self.default)
            won = np.array([k < round(v * r.n) for k in range(r.n)])
            out.append(BranchResult(r, won, 0, []))
        return out


def middle(request) -> Segment | None:
    """A valid segment of the success when one exists: turns 0..min(1, n-2)."""
    n = len(request.success.turns)
    return Segment(request.success.traj_id, 0, min(1, n - 2)) if n >= 2 else None


def assign(batch, judge, values, cfg: TrainConfig | None = None, **method):
    ctx = CreditContext(cfg or TrainConfig(), brancher=values, judge=judge, step=3)
    return ProVer(ProVerConfig(**method)).assign(batch, ctx)


def grpo(batch, cfg: TrainConfig | None = None):
    return GRPO(GRPOConfig(norm="mean")).assign(batch, CreditContext(cfg or TrainConfig()))


GROUP = st.lists(st.tuples(st.booleans(), st.integers(1, 5), st.none()), min_size=1, max_size=8)


@settings(max_examples=120, deadline=None)
@given(st.lists(GROUP, min_size=1, max_size=4), st.sampled_from(["none", "no-gain", "loss"]))
def test_without_an_accepted_segment_prover_is_grpo_exactly(make_batch, spec, how):
    batch = make_batch(spec)
    judge = ScriptedJudge((lambda r: None) if how == "none" else middle)
    # Delta = after - before: 0 when both boundaries are worth the same, negative when "after" is worse
    values = ScriptedValues(default=0.5) if how == "no-gain" else ScriptedValues({0: 0.75}, default=0.25)
    adv = assign(batch, judge, values)
    want = grpo(batch)
    assert len(adv.flat()) == len(want.flat()) == len(batch.turns())
    for a, b in zip(adv.flat(), want.flat()):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert adv.metrics["credit/accepted"] == 0.0


def test_an_accepted_segment_moves_only_its_tokens_by_lambda_delta(make_batch):
    # one group of 4: the success (4 turns) and three failures; scores 10 * won -> [10, 0, 0, 0]
    batch = make_batch([[(True, 4, None), (False, 3, None), (False, 2, None), (False, 5, None)]])
    seg = lambda r: Segment(r.success.traj_id, 1, 2)  # noqa: E731
    values = ScriptedValues({1: 0.25, 3: 0.75})  # before turn 1: 2/8 win, after turn 2: 6/8 -> Delta 0.5
    adv = assign(batch, ScriptedJudge(seg), values)
    assert values.calls == [[("g0-t0", 1, 8), ("g0-t0", 3, 8)]]  # one batched call, K = 8 from each boundary
    # GRPO (mean-centred): 10 - 2.5 = 7.5 for the success, 0 - 2.5 for the others; bonus 1 * 0.5 * 10
    per_turn = [float(a[0]) for a in adv.flat()]
    assert per_turn[:4] == pytest.approx([7.5, 12.5, 12.5, 7.5])
    assert per_turn[4:] == pytest.approx([-2.5] * 10)
    for a, _b, turn in zip(adv.flat(), grpo(batch).flat(), batch.turns()):
        assert a.shape == (turn.n_tokens,) and np.all(a == a[0])  # every token of a turn alike
    diff = [float(a[0] - b[0]) for a, b in zip(adv.flat(), grpo(batch).flat())]
    assert diff == pytest.approx([0, 5.0, 5.0, 0] + [0] * 10)
    # lambda = 2 in probability units: 2 * 0.5
    adv2 = assign(batch, ScriptedJudge(seg), ScriptedValues({1: 0.25, 3: 0.75}), lam=2.0, bonus_units="success")
    assert [float(a[0] - b[0]) for a, b in zip(adv2.flat(), grpo(batch).flat())][:4] == pytest.approx([0, 1, 1, 0])
    assert adv.metrics["credit/accepted"] == 1.0 and adv.metrics["credit/delta"] == pytest.approx(0.5)
    assert adv.metrics["credit/acceptance_rate"] == 1.0 and adv.metrics["credit/segment_turns"] == 2.0


def test_std_normalisation_is_a_switch(make_batch):
    batch = make_batch([[(True, 3, None), (False, 3, None)]])
    adv = assign(batch, ScriptedJudge(lambda r: None), ScriptedValues(), norm="std")
    # scores [10, 0]: mean 5, unbiased std sqrt(50) -> +-5 / (sqrt(50) + 1e-6)
    assert float(adv.flat()[0][0]) == pytest.approx(5 / (np.sqrt(50) + 1e-6))


def test_eligibility_and_the_shortest_success(make_batch):
    batch = make_batch([
        [(True, 5, None), (True, 3, None)] + [(False, 4, None)] * 6,  # 2 wins of 8: in 1-3 of 8
        [(True, 3, None), (True, 2, None), (False, 3, None), (False, 3, None)],  # 2 of 4: over 1-1 of 4
        [(False, 3, None), (False, 3, None)],  # no win
        [(True, 3, None), (True, 4, None)],  # no failure: nothing to contrast
    ])
    judge = ScriptedJudge(middle)
    adv = assign(batch, judge, ScriptedValues())
    assert [(r.group.task_id, r.target, r.max_turns) for r in judge.requests] == [("task-0", 1, 4)]
    assert adv.metrics["credit/eligible_groups"] == 1.0
    judge = ScriptedJudge(middle)  # absolute counts: 1-4 wins, whatever the group size
    assign(batch, judge, ScriptedValues(), target="longest", eligible=(1, 4), eligible_of=None, max_turns=2)
    assert [(r.group.task_id, r.target, r.max_turns) for r in judge.requests] == [("task-0", 0, 2), ("task-1", 0, 2)]


@pytest.mark.parametrize("size, want", [(2, (1, 1)), (3, (1, 1)), (4, (1, 1)), (6, (1, 2)), (8, (1, 3)),
                                        (12, (2, 4)), (16, (2, 6))])
def test_the_papers_win_range_scales_with_the_group_size(size, want):
    from prover.credit.base import win_range

    # shares 1/8 and 3/8 of G rounded inwards, at least one win and one failure: G = 12 -> [1.5, 4.5] -> 2-4;
    # G = 6 -> [0.75, 2.25] -> 1-2; G = 4 -> [0.5, 1.5] -> 1-1 (the 3-of-4 group the literal rule admitted)
    assert win_range((1, 3), size) == want
    assert win_range((1, 3), size, of=None) == (1, 3)


def test_config_yaml_records_the_effective_win_range(tmp_path):
    from prover.settings.config_text import dump_config

    cfg = load_config(None, ["rollout.group_size=4"])
    assert "#   credit.eligible: 1-1 wins of 4 (written as 1-3 of 8)" in dump_config(cfg)
    text = dump_config(load_config(None, ["rollout.group_size=16", "credit.eligible=[1, 2]"]))
    assert "#   credit.eligible: 2-4 wins of 16 (written as 1-2 of 8)" in text
    path = tmp_path / "config.yaml"  # the comments do not stop the file from loading again
    path.write_text(text)
    assert load_config(path).rollout.group_size == 16


def test_an_accepted_segment_in_the_second_group_moves_that_groups_tokens(make_batch):
    # group 0: no success is eligible (0 wins); group 1: the success g1-t1 (3 turns) and a failure
    batch = make_batch([[(False, 2, None), (False, 2, None)], [(False, 2, None), (True, 3, None)]])
    values = ScriptedValues({0: 0.0, 1: 1.0})  # before turn 0: 0/8, after turn 0: 8/8 -> Delta 1
    adv = assign(batch, ScriptedJudge(lambda r: Segment(r.success.traj_id, 0, 0)), values)
    assert values.calls == [[("g1-t1", 0, 8), ("g1-t1", 1, 8)]]
    # group 1 scores [0, 10]: GRPO [-5, 5]; the bonus 1 * 1.0 * 10 lands on turn 0 of g1-t1 only
    per_turn = [float(a[0]) for a in adv.flat()]
    assert per_turn == pytest.approx([0, 0, 0, 0] + [-5, -5] + [15, 5, 5])


def test_invalid_proposals_are_dropped_and_counted(make_batch):
    # five eligible groups; the success of group g has 4 turns, turn 1 of group 4's is malformed
    spec = [[(True, 4, None), (False, 2, None)] for _ in range(4)] + [[(True, 4, [True, False, True, True]),
                                                                      (False, 2, None)]]
    bad = {"task-0": Segment("someone-else", 0, 0),  # not the success
           "task-1": Segment("g1-t0", 2, 7),  # out of range
           "task-2": Segment("g2-t0", 2, 3),  # ends at the final turn
           "task-3": Segment("g3-t0", 0, 2),  # longer than L = 2
           "task-4": Segment("g4-t0", 0, 1)}  # holds a malformed action
    batch = make_batch(spec)
    values = ScriptedValues(default=0.0)
    adv = assign(batch, ScriptedJudge(lambda r: bad[r.group.task_id]), values, max_turns=2)
    assert values.calls == []  # nothing left to verify
    assert adv.metrics["credit/proposals"] == 5.0 and adv.metrics["credit/valid_proposals"] == 0.0
    assert adv.metrics["credit/dropped_proposals"] == 5.0 and "credit/acceptance_rate" not in adv.metrics
    assert adv.metrics["credit/valid_proposal_rate"] == 0.0  # 0 valid of 5 judged groups
    for a, b in zip(adv.flat(), grpo(batch).flat()):
        assert np.array_equal(a, b)


def test_diagnostics_count_groups_judge_costs_and_deltas(make_batch):
    batch = make_batch([[(True, 4, None), (False, 2, None)], [(True, 3, None), (False, 2, None)],
                        [(True, 1, None), (False, 2, None)]])  # a one-turn success has no valid segment
    usage = JudgeUsage(calls=2, prompt_tokens=100, completion_tokens=20, dollars=0.01, repairs=1, errors=1)
    judge = ScriptedJudge(lambda r: Segment(r.success.traj_id, 0, 0) if len(r.success.turns) > 1 else None, usage)
    values = ScriptedValues({1: 0.5}, default=0.25)  # before turn 0: 0.25; after turn 0: 0.5 -> +0.25 twice
    adv = assign(batch, judge, values)
    m = adv.metrics
    assert (m["credit/eligible_groups"], m["credit/proposals"], m["credit/valid_proposals"]) == (3.0, 2.0, 2.0)
    assert m["credit/accepted"] == 2.0 and m["credit/acceptance_rate"] == 1.0 and m["credit/delta"] == 0.25
    # the one-turn success is never sent to the judge: two requests of 2 calls, 120 tokens and $0.01 each
    assert m["credit/unprovable_groups"] == 1.0
    assert (m["credit/judged_groups"], m["credit/valid_proposal_rate"]) == (2.0, 1.0)  # 2 valid of 2 asked
    assert m["cost/judge_tokens"] == 2 * 120 and m["cost/judge_dollars"] == pytest.approx(0.02)
    assert (m["judge/calls"], m["judge/repairs"], m["judge/errors"]) == (4.0, 2.0, 2.0)
    assert not any(k.startswith("cost/branch") for k in m)  # the Brancher reports its own tokens


def one_line_config_error(*overrides: str) -> str:
    with pytest.raises(ProverError) as err:
        load_config(None, list(overrides))
    msg = str(err.value)
    assert msg and "\n" not in msg
    return msg


def test_config_errors_are_one_line(make_batch):
    assert "needs a judge" in one_line_config_error("credit.name=prover", "judge.name=null")
    assert "credit.samples" in one_line_config_error("credit.name=prover", "credit.samples=0")
    assert "credit.bogus" in one_line_config_error("credit.name=prover", "credit.bogus=1")
    assert "min <= max" in one_line_config_error("credit.name=prover", "credit.eligible=[3, 1]")
    assert "unknown judge 'nope'" in one_line_config_error("credit.name=prover", "judge.name=nope")
    cfg = load_config(None, ["credit.name=prover", "judge.name=random", "credit.eligible=[1, 2]"])
    assert cfg.credit.model_extra["eligible"] == [1, 2]
    with pytest.raises(ConfigError, match="no judge"):  # built without the config check
        ProVer().assign(make_batch([[(True, 3, None), (False, 2, None)]]),
                        CreditContext(TrainConfig(), brancher=ScriptedValues()))


# -- through the real Brancher and the tiny policy -------------------------------------------------

def played(env, seed: int, name: str, choose, max_turns: int) -> Trajectory:
    """An episode of ``choose(env, info, rng)`` recorded like the rollout records one (snapshots on)."""
    rng = random.Random(name)
    obs, info = env.reset(seed=seed, options={"split": "train"})
    traj = Trajectory(name, f"train/{seed}", str(info.get("task", obs)))
    for _ in range(max_turns):
        action = choose(env, info, rng)
        key, snap, admissible = env.state_key(), env.snapshot(), tuple(info.get("admissible_actions") or ())
        history = tuple((t.observation, t.action) for t in traj.turns)
        nxt, reward, term, trunc, info = env.step(action)
        traj.turns.append(Turn([0], [1, 2], [-0.1, -0.1], obs, action, action, True,
                               bool(info.get("is_action_valid", True)), float(reward), key, snap, history, admissible))
        obs = nxt
        if term or trunc:
            traj.won = bool(info.get("won"))
            break
    return traj


@pytest.mark.slow
def test_through_the_real_brancher(tmp_path):
    from prover.engines.hf import HFEngine
    from prover.envs import make_env
    from prover.episodes.branching import Brancher
    from prover.policy.tiny import build_tiny_policy
    from prover.rollout import Rollout
    from prover.types import Batch, Group, SamplingParams

    env = make_env("alfworld-sim")
    success = played(env, 7, "S", lambda e, info, rng: e.expert_action(), 20)
    failures = [played(env, 7, f"F{j}", lambda e, info, rng: rng.choice(info["admissible_actions"]), 6)
                for j in range(3)]
    assert success.won and len(success.turns) >= 3 and not any(f.won for f in failures)
    batch = Batch([Group("train/7", [success, *failures])])
    folder = build_tiny_policy(lambda: make_env("alfworld-sim"), tmp_path / "tiny", vocab_size=400, hidden_size=32,
                               num_layers=2, num_heads=2, intermediate_size=64, corpus_episodes=20)
    rollout = Rollout(lambda: make_env("alfworld-sim"), HFEngine(folder), max_turns=len(success.turns) + 2,
                      sampling=SamplingParams(max_new_tokens=10, temperature=1.0))
    spy = Spy(Brancher(rollout))
    cfg = TrainConfig()
    judge = ContrastJudge()
    adv = ProVer(ProVerConfig(samples=3)).assign(batch, CreditContext(cfg, brancher=spy, judge=judge))
    seg = judge.propose(JudgeRequest(batch.groups[0], 0)).proposal.segment  # deterministic: what ProVer got
    [requests] = spy.calls  # one batched call: K from the state before the segment and K from after it
    assert [(r.trajectory.traj_id, r.turn, r.n) for r in requests] == [("S", seg.start_turn, 3),
                                                                       ("S", seg.end_turn + 1, 3)]
    before, after = spy.results
    for res in spy.results:  # continuations start from the success's own recorded state
        assert all(c.turns[res.request.turn].state_key == success.turns[res.request.turn].state_key
                   for c in res.trajectories)
    assert spy.inner.take_counts()["cost/branch_continuations"] == 6.0
    delta = after.value - before.value
    diff = [float(a[0] - b[0]) for a, b in zip(adv.flat(), grpo(batch, cfg).flat())]
    want = [10 * delta if (i == 0 and seg.start_turn <= t <= seg.end_turn and delta > 0) else 0.0
            for i, tr in enumerate(batch.groups[0].trajectories) for t in range(len(tr.turns))]
    assert diff == pytest.approx(want, abs=1e-5)
    assert len(adv.flat()) == len(batch.turns())  # continuations never enter the batch
    assert adv.metrics["credit/accepted"] == float(delta > 0) and adv.metrics["credit/valid_proposals"] == 1.0


class Spy:
    def __init__(self, inner) -> None:
        self.inner, self.calls, self.results = inner, [], []

    def continue_from(self, requests, seed=0):
        self.calls.append(list(requests))
        self.results = self.inner.continue_from(requests, seed=seed)
        return self.results


# -- judge cost: no request that cannot yield a segment; cached replies counted apart ---------------

def test_can_yield_segment_is_whether_any_segment_validates(make_batch):
    from prover.judges.base import can_yield_segment

    def request(n_turns, fmt=None, rejected=(), max_turns=4):
        batch = make_batch([[(True, n_turns, fmt), (False, 2, None)]])
        for t in rejected:
            batch.groups[0].trajectories[0].turns[t].action_valid = False
        return JudgeRequest(batch.groups[0], 0, max_turns)

    assert not can_yield_segment(request(1))  # its only turn is the final one
    assert can_yield_segment(request(2))  # [0, 0]
    assert not can_yield_segment(request(3, [False, True, True], rejected=(1,)))  # turns 0, 1: malformed, rejected
    assert can_yield_segment(request(3, [False, True, True]))  # [1, 1]
    assert not can_yield_segment(request(3, max_turns=0))  # no segment is short enough


def test_a_group_without_a_valid_segment_costs_no_judge_call(make_batch):
    # task-0: a one-turn success; task-1: a 3-turn success whose non-final turns are malformed (0) and
    # env-rejected (1); task-2: a success with valid turns. Only task-2 can be verified, so only it is sent.
    batch = make_batch([[(True, 1, None), (False, 2, None)], [(True, 3, [False, True, True]), (False, 2, None)],
                        [(True, 3, None), (False, 2, None)]])
    batch.groups[1].trajectories[0].turns[1].action_valid = False
    judge = ScriptedJudge(middle, JudgeUsage(calls=1, dollars=0.01))  # each request paid once
    values = ScriptedValues()  # Delta 0: no bonus anywhere
    adv = assign(batch, judge, values)
    assert [r.group.task_id for r in judge.requests] == ["task-2"]
    m = adv.metrics
    assert (m["credit/eligible_groups"], m["credit/unprovable_groups"], m["judge/calls"]) == (3.0, 2.0, 1.0)
    assert m["cost/judge_dollars"] == pytest.approx(0.01) and m["credit/dropped_proposals"] == 0.0
    for a, b in zip(adv.flat(), grpo(batch).flat()):  # every group keeps plain GRPO
        assert np.array_equal(a, b)


def test_cached_judge_replies_are_counted_apart_from_paid_ones(make_batch):
    batch = make_batch([[(True, 3, None), (False, 2, None)], [(True, 4, None), (False, 2, None)]])
    usage = JudgeUsage(calls=1, dollars=0.02, cached_calls=2, cached_dollars=0.05)  # per request
    adv = assign(batch, ScriptedJudge(middle, usage), ScriptedValues())
    m = adv.metrics  # two requests: paid 2 calls, $0.04; cached 4 calls that first cost $0.10
    assert (m["judge/calls"], m["judge/cached_calls"]) == (2.0, 4.0)
    assert m["cost/judge_dollars"] == pytest.approx(0.04) and m["cost/judge_cached_dollars"] == pytest.approx(0.10)


def test_a_proposal_over_an_env_rejected_action_is_dropped_unverified(make_batch):
    # the success's turn 1 is well formed but the env rejected its action; the judge proposes [0, 1]
    batch = make_batch([[(True, 4, None), (False, 2, None), (False, 3, None)]])
    batch.groups[0].trajectories[0].turns[1].action_valid = False
    values = ScriptedValues({0: 0.0, 2: 1.0})  # were it verified: Delta 1, a bonus on turns 0-1
    adv = assign(batch, ScriptedJudge(lambda r: Segment(r.success.traj_id, 0, 1)), values)
    assert values.calls == []  # no continuation from either boundary
    m = adv.metrics
    assert (m["credit/proposals"], m["credit/valid_proposals"], m["credit/dropped_proposals"]) == (1.0, 0.0, 1.0)
    [checked] = adv.segments
    assert checked.delta is None and not checked.accepted and "turn 1" in checked.problem
    for a, b in zip(adv.flat(), grpo(batch).flat()):
        assert np.array_equal(a, b)


def test_default_prover_without_an_accepted_segment_equals_default_grpo(make_batch):
    # one GRPO base: with no override of norm on either side, ProVer without a bonus is plain GRPO.
    # group 0 (1 win of 4, eligible): the judge proposes turns 0-1, verified with Delta = 0.25 - 0.75 < 0
    # (rejected); group 1 (no win) is not eligible. Both default to norm=mean, reward.scale 10:
    #   group 0: R = [10, 0, 0, 0], mean 2.5 -> [7.5, -2.5, -2.5, -2.5]; group 1: R = [0, 0], mean 0 -> 0
    batch = make_batch([[(True, 4, None), (False, 3, None), (False, 2, None), (False, 2, None)],
                        [(False, 2, None), (False, 1, None)]])
    adv = assign(batch, ScriptedJudge(middle), ScriptedValues({0: 0.75}, default=0.25))
    want = GRPO().assign(batch, CreditContext(TrainConfig()))
    assert adv.metrics["credit/valid_proposals"] == 1.0 and adv.metrics["credit/accepted"] == 0.0
    for a, b in zip(adv.flat(), want.flat()):
        assert np.array_equal(a, b)
    per_traj = [float(a[0][0]) for g in adv.values for a in g]
    assert per_traj == pytest.approx([7.5, -2.5, -2.5, -2.5, 0.0, 0.0])
