"""searchqa-sim keeps Search-R1's interface and reward, needs retrieval, and snapshots exactly."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prover.envs import AgentSpec, check_env, make_env
from prover.envs.searchqa_sim import KINDS, SearchqaSimEnv, exact_match, normalize_answer
from prover.envs.searchqa_sim.env import ANSWERED, INVALID, load_base
from prover.envs.searchqa_sim.kb import generate
from prover.envs.searchqa_sim.prompts import PRESETS
from prover.errors import ConfigError


@pytest.fixture(autouse=True)
def _index_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("PROVER_INDEX_DIR", str(tmp_path_factory.getbasetemp() / "indexes"))


def _play_expert(env, seed, split="train"):
    _obs, info = env.reset(seed=seed, options={"split": split})
    while True:
        _obs, reward, term, trunc, info = env.step(env.expert_action())
        if term or trunc:
            return reward, info


def test_check_env_passes():
    check_env(SearchqaSimEnv())
    check_env(make_env("searchqa-sim", prompt="search-r1", question_types=["bridge"]))


@pytest.mark.parametrize("pred, gold, hit", [
    ("The Eiffel Tower", "eiffel tower", True),
    ("  new   YORK city. ", "New York City", True),
    ("St. Orvane", "St Orvane", True),
    ("an apple", "Apple", True),
    ("Theatre", "atre", False),  # "the" is dropped only as a word
    ("1987!", "1987", True),
    ("Paris, France", "Paris", False),
])
def test_exact_match_uses_squad_normalisation(pred, gold, hit):
    assert exact_match(pred, [gold]) is hit
    assert normalize_answer("A  man, a plan: THE canal!") == "man plan canal"


def test_the_oracle_answers_correctly_with_bm25():
    env = SearchqaSimEnv()
    for split in ("train", "test"):
        results = [_play_expert(env, seed, split) for seed in range(150)]
        kinds = {info["task_type"] for _, info in results}
        assert kinds == set(KINDS)
        rate = sum(info["won"] for _, info in results) / len(results)
        assert rate >= 0.95, f"{split}: the grounded oracle won only {rate:.0%}"
        assert all(r == (1.0 if info["won"] else 0.0) for r, info in results)


def test_bm25_recall_of_the_first_hop():
    hits = n = 0
    for i in range(4):
        _, by_kind, retriever = load_base(f"train-{i}")
        for kind in KINDS:
            for q in by_kind[kind][:15]:
                n += 1
                hits += q.hops[0].passage_id in {p.id for p in retriever.search(q.hops[0].query, 3)}
    assert n >= 150 and hits / n >= 0.95


def test_wrong_answers_and_bad_output():
    env = SearchqaSimEnv(max_turns=3, max_searches=1)
    obs, info = env.reset(seed=7)
    assert obs.startswith("Question: ") and obs.endswith("?")
    key = env.state_key()
    for junk in ("I think it is Paris", "<answer>x", "<action>look</action>", "</search>"):
        env2 = SearchqaSimEnv()
        env2.reset(seed=7)
        obs2, r, term, trunc, info2 = env2.step(junk)
        assert (obs2, r, term, info2["is_action_valid"], env2.state_key()) == (INVALID, 0.0, False, False, key)
    obs, r, term, trunc, info = env.step("<search>anything at all</search>")
    assert obs.startswith("<information>Doc 1(Title: ") and "Doc 3(Title: " in obs and info["is_action_valid"]
    obs, r, term, trunc, info = env.step("<search>again</search>")  # the one search is spent
    assert not info["is_action_valid"] and not (term or trunc)
    obs, r, term, trunc, info = env.step("<answer>certainly not this</answer>")
    assert (r, term, info["won"]) == (0.0, True, False)
    env.reset(seed=7)
    for _ in range(3):
        obs, r, term, trunc, info = env.step("no tags")
    assert trunc and not term  # invalid turns still use the turn cap


def test_splits_use_disjoint_knowledge_bases():
    train, test = generate("train-0"), generate("test-0")
    assert {e.name for e in train.entities.values()}.isdisjoint({e.name for e in test.entities.values()})
    env = SearchqaSimEnv()
    assert env.reset(seed=3, options={"split": "test"})[1]["task_id"].startswith("test-3/")
    with pytest.raises(ConfigError, match="unknown split"):
        env.reset(seed=0, options={"split": "dev"})
    with pytest.raises(ConfigError, match="question_types"):
        SearchqaSimEnv(question_types=["trivia"])


def test_agent_spec_parses_search_r1_tags():
    # Search-R1's postprocess_predictions (search_r1/llm_agent/generation.py): the first span acts, its
    # content stripped; by default the whole response is the action, so later prompts keep it
    text = "<think>hmm</think> <search>  Who founded\n Orsk? </search> then <answer>x</answer>"
    got = PRESETS["search-r1"].parse(text)
    assert (got.action, got.format_valid) == (text, True)
    spec = dataclasses.replace(PRESETS["search-r1"], history="action")
    assert spec.parse(text).action == "<search>Who founded\n Orsk?</search>"
    assert spec.parse("<answer>Ilsa Korven</answer>").action == "<answer>Ilsa Korven</answer>"
    assert not spec.parse("no tags here").format_valid
    assert spec.parse("<answer>北京</answer>").format_valid  # no CJK rule: Search-R1 has none
    assert spec.format_action("<answer>Halvik</answer>") == "<answer>Halvik</answer>"
    plain = AgentSpec()  # unchanged when raw_action_tags is empty
    assert plain.parse("<search>q</search><action>Go North</action>").action == "go north"
    assert plain.format_action("go north") == "<action>go north</action>"


def test_the_prompt_shows_the_whole_transcript():
    env = SearchqaSimEnv(prompt="search-r1")
    spec = env.agent_spec
    obs0, info = env.reset(seed=2)
    action = env.expert_action()
    obs1, *_ = env.step(action)
    text = spec.render(info["task"], obs1, None, [(obs0, action)], 1)
    assert obs0 in text and action in text and text.endswith("</information>")
    assert spec.parse(spec.format_action(action)).action == action
    # Search-R1's run_llm_loop (generation.py) keeps each whole response, <think> included, in the sequence
    said = "<think>look it up</think>" + action
    assert said in spec.render(info["task"], obs1, None, [(obs0, spec.parse(said).action)], 1)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), split=st.sampled_from(["train", "test"]),
       moves=st.lists(st.sampled_from(["expert", "junk", "search", "answer"]), max_size=6),
       cut=st.integers(0, 6))
def test_snapshot_restore_replays_exactly(seed, split, moves, cut):
    def act(env, move, i):
        if move == "expert":
            return env.expert_action() or "<answer>none</answer>"
        return {"junk": "hello", "search": f"<search>city number {i}</search>",
                "answer": "<answer>Dravia</answer>"}[move]

    def play(env, ms, offset):
        out = []
        for i, m in enumerate(ms):
            o, r, te, tr, info = env.step(act(env, m, i + offset))
            out.append((o, r, te, tr, info, env.state_key()))
            if te or tr:
                break
        return out

    env = SearchqaSimEnv()
    env.reset(seed=seed, options={"split": split})
    head = play(env, moves[:cut], 0)
    if head and (head[-1][2] or head[-1][3]):
        return
    snap, key = env.snapshot(), env.state_key()
    first = play(env, moves[cut:], cut)
    env.reset(seed=seed + 1, options={"split": "test"})
    env.restore(snap)
    assert env.state_key() == key
    assert play(env, moves[cut:], cut) == first


def test_empty_spans_act_as_in_search_r1():
    # search_r1/llm_agent/generation.py execute_predictions: an "answer" action ends the episode whatever
    # its content, and qa_em.py em_check scores "" as 0; a "search" action searches its content, "" too
    env = SearchqaSimEnv()
    env.reset(seed=7)
    obs, r, term, _trunc, info = env.step("<search> </search>")
    assert (obs, info["is_action_valid"], info["searches_left"]) == ("<information></information>", True, 3)
    obs, r, term, _, info = env.step("<answer></answer>")
    assert (obs, r, term, info["won"]) == (ANSWERED, 0.0, True, False)
    env = SearchqaSimEnv(empty_action="invalid")  # the switch: prover's old rule
    env.reset(seed=7)
    for empty in ("<search> </search>", "<answer></answer>"):
        obs, r, term, _trunc, info = env.step(empty)
        assert (obs, r, term, info["is_action_valid"]) == (INVALID, 0.0, False, False)


def test_documents_read_as_search_r1_shows_them():
    # generation.py _passages2string over wiki-18's '"Title"\ntext': the title keeps its quotes, and the
    # joined string is stripped (execute_predictions), so no newline before </information>
    env = SearchqaSimEnv(topk=2)
    env.reset(seed=0)
    obs = env.step("<search>capital</search>")[0]
    first, second = env.retriever.search("capital", 2)
    assert obs == (f'<information>Doc 1(Title: "{first.title}") {first.text}\n'
                   f'Doc 2(Title: "{second.title}") {second.text}</information>')


@pytest.mark.parametrize("kwargs", [{"empty_action": "ignore"}, {"history": "think"}, {"prompt": "long"}])
def test_an_unknown_rule_switch_is_one_line(kwargs):
    with pytest.raises(ConfigError, match=f"unknown {next(iter(kwargs))} ") as err:
        SearchqaSimEnv(**kwargs)
    assert "\n" not in str(err.value)


def test_a_stop_string_cuts_the_completion_token_exactly():
    # Search-R1's _postprocess_responses cuts the text just after the first "</search>", else "</answer>".
    # Here the tokens ">." and ">," are merged, so the stop ends inside one: every id up to and including
    # that one is kept (the engine's own ids and log-probs), and the text is cut right after the tag.
    from prover.episodes.turn_prompts import completion_of
    from prover.policy.tiny import train_tokenizer
    from prover.types import Generation

    tok = train_tokenizer(iter(["<search>q</search>. <answer>a</answer>, x"] * 50), 300)
    text = "<answer>a</answer>, x <search>q</search>. done"
    ids = tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]
    pieces = [tok.decode([i]) for i in ids]
    assert ">." in pieces and ">," in pieces  # the premise of this test
    gen = Generation(ids, [float(-j) for j in range(len(ids))], "stop")
    n = pieces.index(">.") + 1  # by hand: </search> precedes, and ends inside the ">." token
    assert completion_of(tok, gen, ("</search>", "</answer>")) == (
        ids[:n], [float(-j) for j in range(n)], "<answer>a</answer>, x <search>q</search>")
    n = pieces.index(">,") + 1  # without </search>, the first </answer>
    assert completion_of(tok, gen, ("</answer>",))[::2] == (ids[:n], "<answer>a</answer>")
    assert completion_of(tok, gen, ()) == (ids, gen.logprobs, text)  # no stop strings: all, as before
