"""The ``compact`` prompt preset, built by one factory (``agent_spec.compact_preset``) for every bundled env:
its renders pinned against hand-written text, so the factory cannot change a prompt unnoticed."""

from __future__ import annotations

from prover.envs.alfworld_sim.prompts import PRESETS as ALFWORLD
from prover.envs.searchqa_sim.prompts import PRESETS as SEARCHQA
from prover.envs.webshop_sim.prompts import PRESETS as WEBSHOP

HISTORY = [("You are in the kitchen.", "go to sink 1"), ("You see a sink.", "look"), ("Nothing new.", "take mug 1")]


def test_alfworld_compact_prompt_text():
    spec = ALFWORLD["compact"]
    first = spec.render("put a mug in the sink", "You are in the kitchen.", ["help", "look", "go to sink 1"], [], 0)
    assert first == "Task: put a mug in the sink\nObservation: You are in the kitchen.\nActions: look, go to sink 1"
    later = spec.render("put a mug in the sink", "You hold mug 1.", ["look", "put mug 1 in sink 1"], HISTORY, 3)
    assert later == ("Task: put a mug in the sink\n"
                     "You see a sink.\n> look\n"  # the window is the last two (observation, action) pairs
                     "Nothing new.\n> take mug 1\n"
                     "Observation: You hold mug 1.\nActions: look, put mug 1 in sink 1")


def test_webshop_compact_prompt_keeps_past_actions_only():
    later = WEBSHOP["compact"].render("a red shirt", "page 2", ["click[back]", "click[item]"], HISTORY, 3)
    assert later == ("Task: a red shirt\n> go to sink 1\n> look\n> take mug 1\n"
                     "Observation: page 2\nActions: click[back], click[item]")


def test_searchqa_compact_prompt_has_no_task_line():
    spec = SEARCHQA["compact"]
    reply = "Reply <search>query</search> or <answer>answer</answer>."
    assert spec.render("q", "Question: who?", None, [], 0) == f"Question: who?\n{reply}"
    assert spec.render("q", "<information>x</information>", None, [("Question: who?", "<search>who</search>")], 1) \
        == f"Question: who?\n<search>who</search>\n<information>x</information>\n{reply}"
