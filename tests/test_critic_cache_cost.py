"""CriticSearch's critic shares the judges' reply cache: a cached critic reply is counted apart from the
paid ones, with what it cost when it was first paid, so a report can show the cost without the cache."""

from __future__ import annotations

import json

import pytest

from openai_server import ScriptedServer, text_reply
from prover.chat import LiteLLMSettings
from prover.credit.base import CreditContext
from prover.credit.criticsearch import CriticSearch, CriticSearchConfig

# priced by hand: the scripted server reports 100 prompt and 10 completion tokens per reply
PRICE = {"input_cost_per_token": 0.001, "output_cost_per_token": 0.002}  # 100 * 0.001 + 10 * 0.002 = 0.12


@pytest.fixture
def server():
    pytest.importorskip("litellm")
    with ScriptedServer() as srv:
        yield srv


def test_cached_critic_replies_count_apart_with_their_first_cost(server, make_batch, train_cfg):
    batch = make_batch([[(True, 2, None), (False, 2, None)]])  # two trajectories: one critic call each
    server.push(*[text_reply(json.dumps({"labels": ["Good", "Bad"]}))] * 2)
    critic = {"concurrency": 1, "litellm": LiteLLMSettings(model="openai/critic", api_base=server.url,
                                                           backoff_s=0.01, max_retries=0, litellm_kwargs=PRICE)}
    method = CriticSearch(CriticSearchConfig(critic=critic, groups="all"))
    paid = method.assign(batch, CreditContext(config=train_cfg)).metrics
    cached = method.assign(batch, CreditContext(config=train_cfg)).metrics  # the same prompts again
    assert len(server.requests) == 2
    assert (paid["credit/critic_calls"], paid["credit/critic_cached_calls"]) == (2.0, 0.0)
    assert paid["cost/judge_dollars"] == pytest.approx(0.24) and paid["cost/judge_cached_dollars"] == 0.0
    assert (cached["credit/critic_calls"], cached["credit/critic_cached_calls"]) == (0.0, 2.0)
    assert cached["cost/judge_dollars"] == 0.0 and cached["cost/judge_cached_dollars"] == pytest.approx(0.24)
