"""The legal segments, stated to an LLM judge exactly: in the first prompt and again in each repair, with the
segments it already proposed and had refused; and the judge's valid-proposal counters through ProVer.

The case is the one a served Qwen2.5-Coder-1.5B judge failed on: a policy whose winning episodes are 2 turns
long, where the only segment whose after-state can be replayed is turn 0, and a model that proposes 1..3.
The model here is scripted on the real OpenAI-compatible server of tests/openai_server.py: it proposes 1..3
first, then obeys the legal segment a message states, if one does. Every expected text and count is worked
out by hand from the rules (at most L turns, ending before the last turn, no rejected action)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from openai_server import ScriptedServer, tool_reply
from prover.config import TrainConfig
from prover.credit.base import CreditContext
from prover.credit.prover import ProVer, ProVerConfig
from prover.judges.base import legal_segments, validate_segment
from prover.types import Group, JudgeRequest, Segment, Trajectory, Turn
from test_judges_llm import judge_for  # the litellm judge over the scripted server

STATED = re.compile(r"The only legal segment is start_turn=(\d+), end_turn=(\d+)\.")
OUT_OF_RANGE = {"start_turn": 1, "end_turn": 3, "rationale": "the last turns"}


def trajectory(traj_id: str, n: int, won: bool, rejected: tuple[int, ...] = ()) -> Trajectory:
    turns = [Turn(prompt_ids=[1], completion_ids=[2], logprobs=[-0.1], observation=f"room {t}",
                  completion_text=f"<action>step {t}</action>", action=f"step {t}", format_valid=True,
                  action_valid=t not in rejected, reward=float(won and t == n - 1), state_key=t) for t in range(n)]
    return Trajectory(traj_id, traj_id.split("-")[0], "fetch the key", turns, won=won)


def request_for(n: int, max_turns: int, rejected: tuple[int, ...] = ()) -> JudgeRequest:
    group = Group("g", [trajectory("g-win", n, True, rejected), trajectory("g-lose", 3, False)])
    return JudgeRequest(group, target=0, max_turns=max_turns)


# -- the statement, worked out by hand ---------------------------------------------------------------

def test_a_two_turn_success_has_one_legal_segment():
    # turns 0 and 1; a segment must end before turn 1, so at turn 0, and start at or before its end: 0..0
    assert legal_segments(request_for(2, 4)) == "The only legal segment is start_turn=0, end_turn=0."


def test_few_legal_segments_are_listed_one_by_one():
    # 5 turns, L = 2, turn 2 rejected: ends at most at 3; 0..0, 0..1, 1..1, 3..3 (1..2, 2..2, 2..3 hold turn 2;
    # 3..4 ends at the last turn)
    assert legal_segments(request_for(5, 2, rejected=(2,))) == (
        "The legal segments are exactly: start_turn=0, end_turn=0; start_turn=0, end_turn=1; "
        "start_turn=1, end_turn=1; start_turn=3, end_turn=3.")


def test_many_legal_segments_are_stated_as_bounds_that_are_exactly_the_rules():
    request = request_for(8, 3, rejected=(5,))
    assert legal_segments(request) == ("Legal segments: 0 <= start_turn <= end_turn <= 6 and end_turn - start_turn "
                                       "<= 2, with none of turns 5 inside (they hold rejected actions).")
    # by hand, start by start (ends at most 6, at most 3 turns, never over turn 5): 0..0-2, 1..1-3, 2..2-4,
    # 3..3-4, 4..4, 6..6
    by_hand = [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (1, 3), (2, 2), (2, 3), (2, 4), (3, 3), (3, 4), (4, 4), (6, 6)]
    accepted = [(s, e) for s in range(-1, 9) for e in range(-1, 9)
                if validate_segment(request, Segment("g-win", s, e)) is None]
    assert accepted == by_hand


def test_the_first_prompt_states_the_legal_segments():
    from prover.judges.agentic import user_prompt

    for answer_only in (False, True):
        rule = user_prompt(request_for(2, 4), answer_only=answer_only).splitlines()[-1]
        assert rule.startswith("Rules: the segment spans at most 4 consecutive turns")
        assert rule.endswith("it holds no invalid action. The only legal segment is start_turn=0, end_turn=0.")


# -- the repair loop on the scripted server ----------------------------------------------------------

def obedient(body: dict) -> dict:
    """Proposes 1..3 on its first reply whatever the prompt says (as the served model did), then the legal
    segment that the repair states, if it states one (else 1..3 again)."""
    stated = STATED.search(body["messages"][-1]["content"] or "")
    answer = {"start_turn": int(stated[1]), "end_turn": int(stated[2])} if stated and len(body["messages"]) > 2 \
        else OUT_OF_RANGE
    return tool_reply(("submit_segment", {"traj_id": traj_of(body), **OUT_OF_RANGE, **answer}))


def stubborn(body: dict) -> dict:
    return tool_reply(("submit_segment", {"traj_id": traj_of(body), **OUT_OF_RANGE}))


def traj_of(body: dict) -> str:
    return re.search(r"submit_segment\(traj_id='([^']+)'", body["messages"][1]["content"])[1]


@pytest.fixture
def server():
    pytest.importorskip("litellm")
    with ScriptedServer() as srv:
        yield srv


REPAIR = ("Your answer cannot be used: turns 1..3 are out of range: need 0 <= start_turn <= end_turn <= 0. "
          "The only legal segment is start_turn=0, end_turn=0. Already refused, do not propose again: 1..3. "
          "Fix it and call submit_segment again.")


def test_the_repair_states_the_legal_segment_and_the_model_obeys(server):
    server.push(obedient, obedient)
    result = judge_for(server, max_tool_turns=0).propose(request_for(2, 4))
    assert result.proposal.segment == Segment("g-win", 0, 0)
    assert (result.usage.calls, result.usage.repairs) == (2, 1)
    repair = server.requests[1]["body"]["messages"][-1]
    assert repair["role"] == "tool" and repair["content"] == REPAIR


def test_a_repeated_answer_is_named_once_among_the_refused(server):
    server.push(*[stubborn] * 4)
    result = judge_for(server, max_tool_turns=0).propose(request_for(2, 4))
    assert result.proposal is None and (result.usage.calls, result.usage.repairs) == (4, 3)
    last = server.requests[3]["body"]["messages"][-1]["content"]
    assert last == REPAIR  # 1..3 three times, listed once
    assert result.failure.startswith("no valid segment after 3 repair(s): turns 1..3 are out of range")


def test_a_structured_repair_admits_only_the_legal_segment(server):
    server.push(stubborn, lambda body: {"text": json.dumps({"traj_id": "g-win", "start_turn": 0, "end_turn": 0,
                                                             "rationale": "r"})})
    result = judge_for(server, max_tool_turns=0, structured=True, structured_format="json_object").propose(
        request_for(2, 4))
    assert result.proposal.segment == Segment("g-win", 0, 0) and result.usage.repairs == 1
    schema = server.requests[1]["body"]["response_format"]["schema"]
    turns = [(a["properties"]["start_turn"], a["properties"]["end_turn"]) for a in schema["anyOf"]]
    assert turns == [({"type": "integer", "enum": [0]}, {"type": "integer", "enum": [0]})]


def test_prover_counts_the_judges_valid_proposals(server, make_batch):
    """Two eligible groups, each a 2-turn success and a failure: the obedient model gives 0..0 after one
    repair (2 calls), the stubborn one nothing after 3 repairs (4 calls). Valid proposals 1 of 2 judged."""
    batch = make_batch([[(True, 2, None), (False, 2, None)], [(True, 2, None), (False, 2, None)]])
    by_traj = {"g0-t0": obedient, "g1-t0": stubborn}
    server.push(*[lambda body: by_traj[traj_of(body)](body)] * 6)
    judge = judge_for(server, max_tool_turns=0, concurrency=1)

    class Values:  # the Brancher's interface: every branch wins half its continuations
        def continue_from(self, requests, seed=0):
            from prover.episodes.branching import BranchResult

            return [BranchResult(r, np.arange(r.n) < r.n // 2, 0, []) for r in requests]

    ctx = CreditContext(TrainConfig(), brancher=Values(), judge=judge, step=1)
    m = ProVer(ProVerConfig()).assign(batch, ctx).metrics
    assert (m["credit/eligible_groups"], m["credit/judged_groups"], m["credit/proposals"]) == (2.0, 2.0, 1.0)
    assert (m["credit/valid_proposals"], m["credit/valid_proposal_rate"]) == (1.0, 0.5)
    assert (m["judge/calls"], m["judge/repairs"], m["credit/dropped_proposals"]) == (6.0, 4.0, 0.0)
    assert len(server.requests) == 6
