"""TRIAGE: worked examples computed by hand from A_t = A^GRPO_t + lam * b(role_t), the structured schema (one
of the four roles per turn), judge failures (the group stays at plain GRPO, counted), the contract cases and
the label-vs-pivotal tally, with the judge a scripted ChatModel or a real OpenAI-compatible server."""

from __future__ import annotations

import json
import re

import jsonschema
import numpy as np
import pytest

from openai_server import ScriptedServer, text_reply
from prover.chat import ChatError, ChatModel, ChatReply, LiteLLMSettings
from prover.config_load import load_config
from prover.credit.base import CreditContext
from prover.credit.criticsearch import labels_schema
from prover.credit.grpo import GRPO
from prover.credit.triage import (
    ROLES,
    TRIAGE,
    TriageConfig,
    label_truth,
    pivotal_tally,
    read_roles,
)
from prover.types import Batch, Group


class ScriptedJudge(ChatModel):
    """Answers for the trajectory named in the prompt, from ``table``: a list of labels, a raw reply text,
    or an exception to raise."""

    def __init__(self, table: dict[str, object]) -> None:
        self.table, self.asked = table, []

    def chat(self, messages, tools=None):
        traj_id = re.search(r"trajectory '([^']+)'", messages[1]["content"]).group(1)
        self.asked.append(traj_id)
        answer = self.table[traj_id]
        if isinstance(answer, Exception):
            raise answer
        text = answer if isinstance(answer, str) else json.dumps({"labels": answer})
        return ChatReply(text, prompt_tokens=20, completion_tokens=5)


def flat_values(adv) -> list[list[float]]:
    """One value per turn (checking every token of a turn carries it)."""
    out = []
    for group in adv.values:
        for traj in group:
            assert all(np.all(tokens == tokens[0]) for tokens in traj if len(tokens))
            out.append([float(tokens[0]) for tokens in traj])
    return out


def test_worked_example_by_hand_default_settings(make_batch, train_cfg):
    # One group of 4: the winner (3 turns), losers of 2, 2 and 1 turns. 1 win of 4 is eligible (1-3 of 8 is
    # 1-1 of 4). reward.scale = 10 -> R = [10, 0, 0, 0]; norm=mean: mean 2.5 -> A^GRPO = [7.5, -2.5, -2.5, -2.5].
    # lam = 0.2; b = decisive 1.0, exploration 0.5, no-progress -0.1, regression -0.5, so lam * b =
    # 0.2, 0.1, -0.02, -0.1.
    batch = make_batch([[(True, 3, None), (False, 2, None), (False, 2, None), (False, 1, None)]])
    judge = ScriptedJudge({"g0-t0": ["decisive_progress", "no_progress", "decisive_progress"],
                           "g0-t1": ["useful_exploration", "regression"],
                           "g0-t2": ["No progress", "Regression"],  # as a model may write them
                           "g0-t3": ["regression"]})
    method = TRIAGE(critic=judge)
    adv = method.assign(batch, CreditContext(config=train_cfg))
    expected = [[7.5 + 0.2, 7.5 - 0.02, 7.5 + 0.2],   # 7.7, 7.48, 7.7
                [-2.5 + 0.1, -2.5 - 0.1],             # -2.4, -2.6
                [-2.5 - 0.02, -2.5 - 0.1],            # -2.52, -2.6
                [-2.5 - 0.1]]                         # -2.6
    got = flat_values(adv)
    assert [len(v) for v in got] == [3, 2, 2, 1]
    for g, e in zip(got, expected):
        assert np.allclose(g, e, atol=1e-5), (g, e)
    m = adv.metrics
    assert (m["credit/critic_labelled_groups"], m["credit/critic_failures"], m["credit/critic_calls"]) == (1, 0, 4)
    # decisive 2 (t0), exploration 1 (t1), no-progress 2 (t0, t2), regression 3 (t1, t2, t3)
    assert [m[f"credit/triage_labels/{r}"] for r in ROLES] == [2, 1, 2, 3]
    assert m["cost/judge_tokens"] == 4 * 25
    assert method.last_labels["g0-t2"] == ["no_progress", "regression"]


def test_worked_example_by_hand_std_and_overridden_constants(make_batch):
    # The Search-QA lam = 0.4, a stronger regression penalty b = -1.0, norm=std.
    # One group of 2 (1 win, eligible: 1-1 of 2), 2 turns each: R = [10, 0], mean 5, unbiased std
    # sqrt((25 + 25) / 1) = sqrt(50), so A^GRPO = +-5 / sqrt(50) = +-1/sqrt(2) = +-0.70711 (eps 1e-6 aside).
    cfg = load_config(overrides=["credit.name=triage", "credit.lam=0.4", "credit.bonus.regression=-1.0",
                                 "credit.norm=std"])
    method = TRIAGE(TRIAGE.parse_config(cfg), critic=ScriptedJudge({
        "g0-t0": ["regression", "decisive_progress"], "g0-t1": ["useful_exploration", "no_progress"]}))
    adv = method.assign(make_batch([[(True, 2, None), (False, 2, None)]]), CreditContext(config=cfg))
    a = 1 / np.sqrt(2)
    # winner: a + 0.4 * -1.0, a + 0.4 * 1.0 = 0.30711, 1.10711; loser: -a + 0.4 * 0.5, -a + 0.4 * -0.1 =
    # -0.50711, -0.74711
    expected = [[a - 0.4, a + 0.4], [-a + 0.2, -a - 0.04]]
    for g, e in zip(flat_values(adv), expected):
        assert np.allclose(g, e, atol=1e-5), (g, e)


def test_the_schema_allows_exactly_one_of_the_four_roles_per_turn():
    schema = labels_schema(3, ROLES)
    jsonschema.validate({"labels": ["decisive_progress", "useful_exploration", "regression"]}, schema)
    jsonschema.validate({"labels": ["no_progress"] * 3}, schema)
    for bad in ({"labels": ["decisive_progress"] * 2},           # too few
                {"labels": ["decisive_progress"] * 4},           # too many
                {"labels": ["Good", "Bad", "Good"]},             # CriticSearch's labels are not roles
                {"labels": ["no_progress"] * 3, "why": "x"},     # nothing beside the labels
                {}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
    assert set(schema["properties"]["labels"]["items"]["enum"]) == set(ROLES) and len(ROLES) == 4


def test_read_roles():
    assert read_roles('```json\n{"labels": ["Decisive progress", "no-progress"]}\n```', 2) == \
        ["decisive_progress", "no_progress"]
    assert read_roles('{"labels": ["exploration"]}', 1) == ["useful_exploration"]  # a short name
    assert "3 labels for 2 turns" in read_roles('{"labels": ["regression", "regression", "regression"]}', 2)
    assert "'Good' is not a role" in read_roles('{"labels": ["Good", "regression"]}', 2)
    assert "no JSON" in read_roles("turn 0 was decisive", 1)


@pytest.fixture
def server():
    pytest.importorskip("litellm")
    with ScriptedServer() as srv:
        yield srv


def test_a_structured_judge_sends_the_role_schema(server, make_batch, train_cfg):
    batch = make_batch([[(True, 2, None), (False, 1, None)]])
    server.push(text_reply('{"labels": ["useful_exploration", "decisive_progress"]}'),
                text_reply('{"labels": ["regression"]}'))
    critic = {"litellm": LiteLLMSettings(model="openai/judge", api_base=server.url, cache=False, max_retries=0,
                                         structured=True), "concurrency": 1}
    adv = TRIAGE(TriageConfig(critic=critic)).assign(batch, CreditContext(config=train_cfg))
    bodies = [r["body"] for r in server.requests]
    assert [b["response_format"]["json_schema"]["schema"] for b in bodies] == \
        [labels_schema(2, ROLES), labels_schema(1, ROLES)]
    assert "decisive_progress" in bodies[0]["messages"][0]["content"]  # the roles are defined to the judge
    # R = [10, 0], mean 5: [5 + 0.1, 5 + 0.2], [-5 - 0.1]
    assert np.allclose(flat_values(adv)[0], [5.1, 5.2]) and np.allclose(flat_values(adv)[1], [-5.1])


@pytest.mark.parametrize("bad_answer", [
    ["decisive_progress"],                              # one label for two turns
    ["decisive_progress", "Good"],                      # not a role
    "Turn 0 made decisive progress.",                   # no JSON at all
    ChatError("judge down"),                            # the request fails
])
def test_a_judge_failure_leaves_the_group_at_grpo(make_batch, train_cfg, bad_answer):
    batch = make_batch([[(True, 2, None), (False, 2, None)], [(True, 1, None), (False, 2, None)]])
    judge = ScriptedJudge({"g0-t0": ["decisive_progress", "regression"], "g0-t1": bad_answer,
                           "g1-t0": ["decisive_progress"], "g1-t1": ["useful_exploration", "no_progress"]})
    ctx = CreditContext(config=train_cfg)
    adv, grpo = TRIAGE(critic=judge).assign(batch, ctx), GRPO().assign(batch, ctx)
    for a, g in zip(adv.values[0], grpo.values[0]):  # group 0: exactly GRPO
        assert all(np.array_equal(x, y) for x, y in zip(a, g))
    # group 1 was labelled: R = [10, 0], mean 5 -> [5 + 0.2], [-5 + 0.1, -5 - 0.02]
    assert np.allclose(flat_values(adv)[2], [5.2]) and np.allclose(flat_values(adv)[3], [-4.9, -5.02])
    m = adv.metrics
    assert m["credit/critic_failures"] == 1 and m["credit/critic_labelled_groups"] == 1
    # only group 1's labels are counted
    assert [m[f"credit/triage_labels/{r}"] for r in ROLES] == [1, 1, 1, 0]


def test_a_repair_can_save_the_group(server, make_batch, train_cfg):
    batch = make_batch([[(True, 1, None), (False, 1, None)]])
    server.push(text_reply('{"labels": ["Good"]}'), text_reply('{"labels": ["decisive_progress"]}'),
                text_reply('{"labels": ["no_progress"]}'))
    critic = {"litellm": LiteLLMSettings(model="openai/judge", api_base=server.url, cache=False, max_retries=0),
              "concurrency": 1, "max_repairs": 1}
    adv = TRIAGE(TriageConfig(critic=critic)).assign(batch, CreditContext(config=train_cfg))
    assert "'Good' is not a role" in server.requests[1]["body"]["messages"][-1]["content"]
    assert adv.metrics["credit/critic_labelled_groups"] == 1 and adv.metrics["credit/critic_errors"] == 1
    assert np.allclose(flat_values(adv), [[5.2], [-5.02]])  # R = [10, 0], mean 5


@pytest.mark.parametrize("groups", ["eligible", "mixed"])
def test_groups_without_outcome_signal_give_zeros_and_ask_nothing(make_batch, train_cfg, groups):
    # all won (zero variance), all failed, an empty group, and one with no turns at all: no judge call and
    # exactly zero advantages, never NaN, with either group rule
    batch = make_batch([[(True, 2, None), (True, 1, None)], [(False, 3, None), (False, 2, None)],
                        [(False, 0, None), (False, 0, None)]])
    batch = Batch(batch.groups + [Group("empty", [])])
    judge = ScriptedJudge({})  # any call would raise KeyError
    adv = TRIAGE(TriageConfig(groups=groups), critic=judge).assign(batch, CreditContext(config=train_cfg))
    assert judge.asked == [] and adv.metrics["credit/critic_calls"] == 0
    assert all(np.all(v == 0.0) for v in adv.flat()) and len(adv.flat()) == len(batch.turns())


def test_every_call_failing_gives_plain_grpo(make_batch, train_cfg):
    batch = make_batch([[(True, 2, None), (False, 2, None), (False, 1, None)]])
    judge = ScriptedJudge({k: ChatError("down") for k in ("g0-t0", "g0-t1", "g0-t2")})
    ctx = CreditContext(config=train_cfg)
    adv = TRIAGE(critic=judge).assign(batch, ctx)
    assert all(np.array_equal(a, b) for a, b in zip(adv.flat(), GRPO().assign(batch, ctx).flat()))
    assert all(np.isfinite(v).all() for v in adv.flat())
    assert adv.metrics["credit/critic_failures"] == 1 and adv.metrics["credit/critic_errors"] == 3


def test_mixed_labels_groups_outside_the_win_range(make_batch, train_cfg):
    # 2 wins of 4 is outside 1-1 of 4: eligible leaves it at GRPO, mixed labels it
    batch = make_batch([[(True, 1, None), (True, 1, None), (False, 1, None), (False, 1, None)]])
    table = {f"g0-t{i}": ["useful_exploration"] for i in range(4)}
    ctx = CreditContext(config=train_cfg)
    assert TRIAGE(critic=ScriptedJudge(table)).assign(batch, ctx).metrics["credit/critic_calls"] == 0
    adv = TRIAGE(TriageConfig(groups="mixed"), critic=ScriptedJudge(table)).assign(batch, ctx)
    assert [v[0] for v in flat_values(adv)] == pytest.approx([5.1, 5.1, -4.9, -4.9])  # +-5 + 0.2 * 0.5


def test_label_vs_pivotal_tally_by_hand(make_batch):
    labels = {"a": ["decisive_progress", "no_progress", "regression", "decisive_progress"],
              "b": ["useful_exploration", "decisive_progress"],
              "c": ["regression"]}
    pivotal = {"a": [0, 3], "b": [0], "c": None}  # c: the env cannot tell -> skipped
    # decisive: a0 (pivotal), a3 (pivotal), b1 (not) -> 3 turns, 2 pivotal; exploration: b0 (pivotal) -> 1, 1;
    # no-progress: a1 -> 1, 0; regression: a2 -> 1, 0 (c's turn is not counted)
    assert pivotal_tally(labels, pivotal) == {"decisive_progress": {"turns": 3, "pivotal": 2},
                                              "useful_exploration": {"turns": 1, "pivotal": 1},
                                              "no_progress": {"turns": 1, "pivotal": 0},
                                              "regression": {"turns": 1, "pivotal": 0}}
    batch = make_batch([[(True, 2, None), (False, 1, None)]])
    got = label_truth(batch, {"g0-t0": ["no_progress", "decisive_progress"], "g0-t1": ["regression"]},
                      lambda tr: [1] if tr.won else [])
    assert got["decisive_progress"] == {"turns": 1, "pivotal": 1} and got["no_progress"] == {"turns": 1, "pivotal": 0}
    assert got["regression"] == {"turns": 1, "pivotal": 0}


def test_config_from_overrides_and_registration():
    from prover.registry import CREDIT

    assert CREDIT.get("triage") is TRIAGE
    cfg = load_config(overrides=["credit.name=triage", "credit.lam=0.4", "credit.bonus.useful_exploration=0.3",
                                 "credit.critic.backend=local", "credit.critic.local.model_path=/models/q"])
    method = TRIAGE.from_train_config(cfg)
    assert method.config.lam == 0.4 and method.config.bonus.useful_exploration == 0.3
    assert method.config.bonus.decisive_progress == 1.0 and method.config.critic.local.model_path == "/models/q"
    assert method.config.norm == "mean" and method.config.eligible == (1, 3)
    from prover.errors import ConfigError

    with pytest.raises(ConfigError, match="credit.bonus"):
        load_config(overrides=["credit.name=triage", "credit.bonus.bogus=1"])
    with pytest.raises(ConfigError):
        load_config(overrides=["credit.name=triage", "credit.groups=all"])
