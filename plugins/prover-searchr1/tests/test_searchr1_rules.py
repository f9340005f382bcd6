"""Whole episodes of ``searchr1`` against Search-R1's own rules (PeterGriffinJin/Search-R1).

Each test plays hand-written episodes through prover's real ``Rollout`` (a scripted engine stands in
for the policy) on question rows in FlashRAG's jsonl layout and a real retrieval server on 127.0.0.1
that speaks Search-R1's schema over corpus rows in wiki-18's layout. Every expected value was worked
out by hand from the original's rule, named in the test; none was taken from running prover.
"""

from __future__ import annotations

import json

import pytest

from prover.config import RewardConfig
from prover.config_load import load_config
from prover.credit.base import turn_scores
from prover.envs import make_env
from prover.policy.tiny import train_tokenizer
from prover.rollout import Rollout
from prover.types import Generation, SamplingParams
from test_searchr1 import RetrievalServer, write_jsonl

ROWS = [  # FlashRAG's jsonl rows, as Search-R1's data_process scripts read them
    {"id": "train_0", "question": "who founded orsk textiles", "golden_answers": ["Ilsa Korven"]},
    {"id": "train_1", "question": "中国的首都是哪里", "golden_answers": ["北京"]},
    {"id": "train_2", "question": "what is the capital of dravia", "golden_answers": ["Halvik"]},
]
CORPUS = [  # wiki-18's {"id", "contents"} rows; the last three are stored without wiki-18's quoting
    {"id": "0", "contents": '"Orsk Textiles"\nOrsk Textiles was founded in 1931 by Ilsa Korven.'},
    {"id": "1", "contents": "Velmora\nVelmora is a port city in Dravia."},
    {"id": "2", "contents": "Halvik is the capital of Dravia."},
    {"id": "3", "contents": '"Dravia"\nDravia is a state.\nIts capital is Halvik.'},
]


@pytest.fixture(scope="module")
def tokenizer():
    """A byte-level BPE (the tiny policy's kind): every text, Chinese included, round-trips exactly."""
    texts = [json.dumps(r, ensure_ascii=False) for r in ROWS + CORPUS]
    texts.append("<search>Orsk Textiles</search> <answer>Ilsa Korven</answer>")
    return train_tokenizer(iter(texts * 20), 300)


@pytest.fixture
def server():
    srv = RetrievalServer(CORPUS)
    yield srv
    srv.close()


@pytest.fixture
def data_dir(tmp_path):
    write_jsonl(tmp_path / "nq" / "train.jsonl", ROWS)
    return tmp_path / "nq"


class ScriptedEngine:
    """Answers each generate() call with the next scripted text, tokenized, then the end-of-turn id."""

    def __init__(self, tokenizer, texts: list[str]) -> None:
        self.tokenizer, self.texts, self.prompts, self.ids = tokenizer, list(texts), [], []

    def generate(self, prompts, params, seed=None):
        self.prompts.extend(self.tokenizer.decode(p) for p in prompts)
        tok = self.tokenizer
        ids = tok.encode(self.texts.pop(0), add_special_tokens=False) + [tok.eos_token_id]
        self.ids.append(ids)
        return [Generation(ids, [-0.01 * (j + 1) for j in range(len(ids))], "stop") for _ in prompts]


def play(data_dir, server, tokenizer, seed: int, texts: list[str], **kwargs):
    """One episode of question ``seed``; returns the trajectory and the engine (its prompts and ids)."""
    engine = ScriptedEngine(tokenizer, texts)
    rollout = Rollout(lambda: make_env("searchr1", data_dir=str(data_dir), url=server.url, **kwargs), engine,
                      max_turns=5, sampling=SamplingParams(64))
    return rollout.run([seed], 1).groups[0].trajectories[0], engine


# -- generation.py execute_predictions + qa_em.py compute_score_em: an empty answer is an answer ----------
def test_an_empty_answer_ends_the_episode_with_zero(data_dir, server, tokenizer):
    # By hand: "<answer></answer>" is action "answer" with content "" -> done; em_check("", ["Ilsa
    # Korven"]) compares "" with "ilsa korven" -> 0. The second scripted answer is never asked for.
    traj, _ = play(data_dir, server, tokenizer, 0, ["<answer></answer>", "<answer>Ilsa Korven</answer>"])
    assert (len(traj.turns), traj.env_return, traj.won) == (1, 0.0, False)
    # the switch: empty spans are invalid no-ops (prover's old rule), so the later answer counts
    traj, _ = play(data_dir, server, tokenizer, 0, ["<answer> </answer>", "<answer>Ilsa Korven</answer>"],
                   empty_action="invalid")
    assert (len(traj.turns), traj.env_return, traj.turns[0].action_valid) == (2, 1.0, False)


def test_an_empty_search_searches_for_nothing(data_dir, server, tokenizer):
    # By hand (postprocess_predictions strips the content; execute_predictions searches it): the server
    # is asked for "" and the turn is valid; no word is shared, so the top 3 come in corpus order.
    traj, _ = play(data_dir, server, tokenizer, 0, ["<search>  </search>", "<answer>Ilsa Korven</answer>"])
    assert server.requests == [{"queries": [""], "topk": 3, "return_scores": True}]
    assert traj.turns[0].action_valid and traj.turns[1].observation.startswith("<information>Doc 1(Title: ")
    server.requests.clear()
    traj, _ = play(data_dir, server, tokenizer, 0, ["<search></search>", "<answer>Ilsa Korven</answer>"],
                   empty_action="invalid")
    assert server.requests == [] and not traj.turns[0].action_valid


# -- generation.py _postprocess_responses: cut after the first </search>, else after the first </answer> ---
@pytest.mark.parametrize("response, kept, turns, ret", [
    # a search, then text that Search-R1 drops before training and before the next prompt
    ("<search>Orsk Textiles</search> then <answer>x</answer>", "<search>Orsk Textiles</search>", 2, 1.0),
    # </search> takes precedence even after an answer: the cut keeps both, the first span (the answer) acts
    ("<answer>Ilsa Korven</answer> or <search>Orsk</search> and more",
     "<answer>Ilsa Korven</answer> or <search>Orsk</search>", 1, 1.0),
    ("<answer>Ilsa Korven</answer> because I searched", "<answer>Ilsa Korven</answer>", 1, 1.0),
])
def test_generation_stops_at_the_close_tag(data_dir, server, tokenizer, response, kept, turns, ret):
    # By hand: ``kept`` is the response cut by Search-R1's rule; the episode then acts on its first span
    traj, engine = play(data_dir, server, tokenizer, 0, [response, "<answer>Ilsa Korven</answer>"])
    turn = traj.turns[0]
    n = len(tokenizer.encode(kept, add_special_tokens=False))  # each case splits at a space after the tag
    assert turn.completion_text == kept and turn.completion_ids == engine.ids[0][:n]
    assert turn.logprobs == [-0.01 * (j + 1) for j in range(n)]  # the engine's own, not recomputed
    assert (len(traj.turns), traj.env_return) == (turns, ret)
    if turns == 2:  # the next prompt shows the response only up to the tag
        assert kept in engine.prompts[1] and " then <answer>x" not in engine.prompts[1]


def test_a_response_without_a_stop_string_is_kept_whole(data_dir, server, tokenizer):
    # _postprocess_responses leaves a response with neither close tag as it is
    traj, engine = play(data_dir, server, tokenizer, 0, ["I do not know"] * 5)
    assert traj.turns[0].completion_ids == engine.ids[0]  # the end-of-turn id included, as before
    assert traj.turns[0].completion_text == "I do not know" and not traj.turns[0].format_valid


# -- generation.py run_llm_loop: the rolling sequence keeps every whole response ----------------------------
def test_later_prompts_keep_the_think_text(data_dir, server, tokenizer):
    first = "<think>need the founder</think><search>Orsk Textiles</search>"
    _, engine = play(data_dir, server, tokenizer, 0, [first, "<answer>Ilsa Korven</answer>"])
    assert first in engine.prompts[1]
    _, engine = play(data_dir, server, tokenizer, 0, [first, "<answer>Ilsa Korven</answer>"],
                     history="action")  # the switch: only the action span
    later = engine.prompts[1]
    assert "<search>Orsk Textiles</search>" in later and "need the founder" not in later


# -- generation.py _passages2string and execute_predictions' strip ------------------------------------------
def test_documents_are_split_as_stored(data_dir, server, tokenizer):
    # By hand: each contents splits at its first newline into title and text, as stored; a document
    # without a newline is all title with an empty text; the joined string is stripped, so no newline
    # before </information>. "zzz" shares no word, so the server returns the corpus in order.
    traj, _ = play(data_dir, server, tokenizer, 0, ["<search>zzz</search>", "<answer>Ilsa Korven</answer>"],
                   topk=4)
    assert traj.turns[1].observation == (
        '<information>Doc 1(Title: "Orsk Textiles") Orsk Textiles was founded in 1931 by Ilsa Korven.\n'
        "Doc 2(Title: Velmora) Velmora is a port city in Dravia.\n"
        "Doc 3(Title: Halvik is the capital of Dravia.) \n"
        'Doc 4(Title: "Dravia") Dravia is a state.\nIts capital is Halvik.</information>')


# -- qa_em.py compute_score_em / normalize_answer: no format rule, Chinese answers included -----------------
def test_a_correct_cjk_answer_is_not_penalised(data_dir, server, tokenizer):
    # By hand: normalize_answer("北京") is "北京" (no ASCII punctuation, no article) -> EM 1; Search-R1
    # has no format penalty, so the turn scores reward.scale * 1.0 = 10.0, not 10.0 - invalid_penalty.
    traj, _ = play(data_dir, server, tokenizer, 1, ["<answer>北京</answer>"])
    assert (traj.env_return, traj.turns[0].format_valid) == (1.0, True)
    assert turn_scores(traj, RewardConfig()).tolist() == [10.0]


# -- qa_em.py extract_solution: a known departure, the scorer bug is not copied -----------------------------
def test_only_the_answer_action_is_scored(data_dir, server, tokenizer):
    # Search-R1's step loop takes the first span, a search for "capital <answer>Halvik</answer>", and the
    # episode never answers. Its scorer would still find two answer spans in prompt plus responses (the
    # prompt's example and "Halvik"), take the last and score 1.0. Ours scores the answer action only: 0.0.
    traj, _ = play(data_dir, server, tokenizer, 2, ["<search>capital <answer>Halvik</answer></search>"]
                   + ["no tags"] * 4)
    assert server.requests[0]["queries"] == ["capital <answer>Halvik</answer>"]
    assert (len(traj.turns), traj.env_return, traj.won, traj.truncated) == (5, 0.0, False, True)


# -- the token limit ----------------------------------------------------------------------------------------
def test_the_tiny_recipe_leaves_room_for_a_whole_search(data_dir):
    # measured: <search>question</search> takes 16-28 SmolLM2 tokens for NQ/HotpotQA-length questions and
    # more under a small tiny-policy vocabulary; 24 would cut the longer ones before </search>
    cfg = load_config(None, ["env.name=searchr1", f"env.kwargs.data_dir={data_dir}"])
    assert cfg.rollout.sampling.max_new_tokens == 64
    cfg = load_config(None, ["env.name=searchr1", f"env.kwargs.data_dir={data_dir}",
                             "rollout.sampling.max_new_tokens=12"])
    assert cfg.rollout.sampling.max_new_tokens == 12  # a user's setting wins over the recipe
