"""CriticSearch: a worked example computed by hand from the formula, the critic failure paths (each
leaves its group at plain GRPO, counted), group selection and config, with the critic behind a real
OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from openai_server import ScriptedServer, status, text_reply
from prover.chat import LiteLLMSettings
from prover.config_load import load_config
from prover.credit.base import CreditContext
from prover.credit.criticsearch import CriticSearch, CriticSearchConfig, critic_prompt, read_labels, turn_credit
from prover.credit.grpo import GRPO


@pytest.fixture
def server():
    pytest.importorskip("litellm")
    with ScriptedServer() as srv:
        yield srv


def labels_by_trajectory(table: dict[str, object]):
    """A server step that answers the critic for the trajectory named in its prompt, from ``table``:
    a list of labels, or a full scripted step (e.g. an HTTP error)."""
    def step(body: dict) -> dict:
        traj_id = re.search(r"trajectory '([^']+)'", body["messages"][1]["content"]).group(1)
        answer = table[traj_id]
        return answer if isinstance(answer, dict) else text_reply(json.dumps({"labels": answer}))
    return step


def method_for(server: ScriptedServer, **overrides) -> CriticSearch:
    critic = {"litellm": LiteLLMSettings(model="openai/critic", api_base=server.url, backoff_s=0.01, max_retries=0,
                                         cache=False)}
    return CriticSearch(CriticSearchConfig(**{"critic": critic, **overrides}))


def test_worked_example_by_hand(server, make_batch, train_cfg):
    # One group of 3: the winner (3 turns) and two losers (2 turns each). reward.scale = 10 -> R = [10, 0, 0];
    # GRPO (norm=std, unbiased): mean 10/3, std sqrt(((20/3)^2 + 2 (10/3)^2) / 2) = 10/sqrt(3),
    # so A^GRPO = [2/sqrt(3), -1/sqrt(3), -1/sqrt(3)].
    batch = make_batch([[(True, 3, None), (False, 2, None), (False, 2, None)]])
    server.push(*[labels_by_trajectory({"g0-t0": ["Good", "bad", "GOOD"], "g0-t1": ["Bad", "Bad"],
                                        "g0-t2": ["Good", "Bad"]})] * 3)
    adv = method_for(server, norm="std").assign(batch, CreditContext(config=train_cfg))
    a_win, a_lose = 2 / np.sqrt(3), -1 / np.sqrt(3)
    # A = 0.25 * 1[Good]/#Good + 0.75 * A^GRPO; the winner's two Good turns get 1/2 each, t2's one Good gets 1.
    expected = [[0.25 * 0.5 + 0.75 * a_win, 0.75 * a_win, 0.25 * 0.5 + 0.75 * a_win],
                [0.75 * a_lose, 0.75 * a_lose],
                [0.25 * 1.0 + 0.75 * a_lose, 0.75 * a_lose]]
    for i, traj_values in enumerate(adv.values[0]):
        for t, tokens in enumerate(traj_values):
            assert tokens.shape == (3,) and np.allclose(tokens, expected[i][t], atol=1e-5)
    m = adv.metrics
    assert (m["credit/critic_labelled_groups"], m["credit/critic_failures"], m["credit/critic_calls"]) == (1, 0, 3)
    assert m["cost/judge_tokens"] == 3 * 110 and m["cost/judge_dollars"] == 0.0
    assert m["credit/critic_good_share"] == pytest.approx(3 / 7)


def test_turn_credit_shares_one_unit():
    assert np.allclose(turn_credit([True, False, True, True], 1e-6), [1 / 3, 0, 1 / 3, 1 / 3], atol=1e-6)
    assert np.array_equal(turn_credit([False, False], 1e-6), [0.0, 0.0])  # no Good turn: no credit


@pytest.mark.parametrize("bad_answer", [
    ["Good"],                                    # one label for two turns
    ["Good", "Maybe"],                           # not a label
    text_reply("The first turn was good."),      # no JSON at all
    status(500, "critic down"),                  # the request fails
])
def test_a_critic_failure_leaves_the_group_at_grpo(server, make_batch, train_cfg, bad_answer):
    batch = make_batch([[(True, 2, None), (False, 2, None)], [(True, 1, None), (False, 2, None)]])
    server.push(*[labels_by_trajectory({"g0-t0": ["Good", "Bad"], "g0-t1": bad_answer,
                                        "g1-t0": ["Good"], "g1-t1": ["Bad", "Good"]})] * 4)
    ctx = CreditContext(config=train_cfg)
    adv, grpo = method_for(server).assign(batch, ctx), GRPO().assign(batch, ctx)
    for a, g in zip(adv.values[0], grpo.values[0]):  # group 0: exactly GRPO
        assert all(np.array_equal(x, y) for x, y in zip(a, g))
    assert not np.allclose(adv.values[1][0][0], grpo.values[1][0][0])  # group 1 was labelled
    assert adv.metrics["credit/critic_failures"] == 1 and adv.metrics["credit/critic_labelled_groups"] == 1


def test_a_repair_can_save_the_group(server, make_batch, train_cfg):
    batch = make_batch([[(True, 2, None), (False, 1, None)]])
    server.push(text_reply('{"labels": ["Good"]}'), text_reply('{"labels": ["Good", "Good"]}'),  # g0-t0, repaired
                text_reply('{"labels": ["Bad"]}'))  # g0-t1
    method = method_for(server, norm="std")
    method.config.critic.max_repairs = 1
    method.config.critic.concurrency = 1  # the script is consumed in trajectory order
    adv = method.assign(batch, CreditContext(config=train_cfg))
    assert adv.metrics["credit/critic_labelled_groups"] == 1 and adv.metrics["credit/critic_errors"] == 1
    assert "1 labels for 2 turns" in server.requests[1]["body"]["messages"][-1]["content"]  # the reason, sent back
    assert np.allclose(adv.values[0][0][0], 0.25 * 0.5 + 0.75 / np.sqrt(2), atol=1e-5)  # A^GRPO = 5 / (10 / sqrt(2))


def test_only_eligible_groups_are_labelled(server, make_batch, train_cfg):
    batch = make_batch([[(True, 1, None), (True, 1, None)], [(True, 1, None), (False, 1, None)],
                        [(False, 1, None), (False, 1, None)]])
    server.push(*[labels_by_trajectory({"g1-t0": ["Good"], "g1-t1": ["Bad"]})] * 2)
    ctx = CreditContext(config=train_cfg)
    adv = method_for(server, groups="eligible", eligible=(1, 1)).assign(batch, ctx)
    grpo = GRPO().assign(batch, ctx)
    assert len(server.requests) == 2  # only the group with exactly one win was sent
    for g in (0, 2):
        assert all(np.array_equal(x, y) for a, b in zip(adv.values[g], grpo.values[g]) for x, y in zip(a, b))
    assert adv.metrics["credit/critic_labelled_groups"] == 1 and adv.metrics["credit/critic_failures"] == 0


def test_the_critic_sees_the_reference_and_the_outcome(make_batch):
    group = make_batch([[(False, 2, None), (True, 3, None), (True, 2, None)]]).groups[0]
    prompt = critic_prompt(group.trajectories[0], group)
    assert "it failed" in prompt and "act 200 | act 201" in prompt  # the shortest win's actions
    assert "itself the shortest" in critic_prompt(group.trajectories[2], group)
    lone = make_batch([[(False, 1, None)]]).groups[0]
    assert "No attempt at this task succeeded" in critic_prompt(lone.trajectories[0], lone)
    assert read_labels('{"labels": ["good", "Bad"]}', 2) == [True, False]
    assert "3 labels for 2 turns" in read_labels('{"labels": ["Good", "Bad", "Bad"]}', 2)


def test_config_from_overrides_and_registration():
    cfg = load_config(overrides=["credit.name=criticsearch", "credit.alpha=0.5", "credit.groups=eligible",
                                 "credit.critic.litellm.model=openai/qwen", "credit.critic.backend=local",
                                 "credit.critic.local.model_path=/models/q"])
    method = CriticSearch.from_train_config(cfg)
    assert method.config.alpha == 0.5 and method.config.critic.litellm.model == "openai/qwen"
    assert method.config.critic.local.model_path == "/models/q" and method.config.eligible == (1, 3)
    from prover.errors import ConfigError

    with pytest.raises(ConfigError, match="credit.critic"):
        load_config(overrides=["credit.name=criticsearch", "credit.critic.bogus=1"])


def test_mock_response_critic(make_batch, train_cfg):
    pytest.importorskip("litellm")
    batch = make_batch([[(True, 2, None), (False, 2, None)]])
    critic = {"litellm": LiteLLMSettings(model="gpt-4o-mini", cache=False,
                                         litellm_kwargs={"mock_response": '{"labels": ["Bad", "Good"]}'})}
    adv = CriticSearch(CriticSearchConfig(critic=critic)).assign(batch, CreditContext(config=train_cfg))
    grpo = GRPO().assign(batch, CreditContext(config=train_cfg))
    # both runs: turn 1 gets 0.25 * 1 + 0.75 * A^GRPO, turn 0 gets 0.75 * A^GRPO
    assert np.allclose(adv.values[0][0][1], 0.25 + 0.75 * grpo.values[0][0][1], atol=1e-5)
    assert np.allclose(adv.values[0][1][0], 0.75 * grpo.values[0][1][0], atol=1e-5)
    assert adv.metrics["cost/judge_dollars"] > 0


def test_the_outcome_term_defaults_to_the_shared_grpo_base(make_batch, train_cfg):
    # no override: the GRPO part centres only (norm=mean), as grpo, budget-matched-grpo and prover do.
    # 2 wins of 4 is outside the eligible range (1-3 of 8 -> 1-1 of 4), so no critic is asked and the
    # group keeps plain GRPO: R = [10, 10, 0, 0], mean 5 -> [5, 5, -5, -5]
    # (norm=std would give +-5 / (10 / sqrt(3)) = +-0.866: unbiased std sqrt(4 * 25 / 3))
    batch = make_batch([[(True, 2, None), (True, 1, None), (False, 2, None), (False, 1, None)]])
    ctx = CreditContext(config=train_cfg)
    adv = CriticSearch(CriticSearchConfig()).assign(batch, ctx)
    assert adv.metrics["credit/critic_calls"] == 0.0
    assert [float(t[0]) for t in adv.flat()] == pytest.approx([5, 5, 5, -5, -5, -5])
    assert all(np.array_equal(a, b) for a, b in zip(adv.flat(), GRPO().assign(batch, ctx).flat()))
