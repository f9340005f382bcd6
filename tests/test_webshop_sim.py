"""webshop-sim: the env contract, WebShop's exact reward (by hand), pages, actions, expert, splits."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prover.envs import check_env, make_env
from prover.envs.webshop_sim import WebshopSimEnv
from prover.envs.webshop_sim.catalog import Goal, Product, build_catalog
from prover.envs.webshop_sim.engine import SEP
from prover.envs.webshop_sim.prompts import PRESETS
from prover.envs.webshop_sim.reward import get_reward, goal_option_texts, normalize_color, token_set_ratio
from prover.envs.webshop_sim.rules import Rules
from prover.envs.webshop_sim.search import BM25
from prover.envs.webshop_sim.vocab import OPTION_VALUES, TYPES
from prover.errors import ConfigError

BAD = ("do a barrel roll", "", "click[search]", "search[]", "buy now", "click[]", "click[nothing here]",
       "CLICK[buy now]", "Search[hoodie]")


# -- the contract ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs", [{}, {"prompt": "verl-agent", "catalog_size": 30, "n_distractors": 1}])
def test_check_env(kwargs):
    check_env(make_env("webshop-sim", **kwargs))


def test_bad_arguments():
    for bad in ({"prompt": "x"}, {"n_distractors": -1}, {"catalog_size": 2}, {"max_steps": 0},
                {"option_match": "names"}, {"type_nouns": "set"}, {"pages": "v1"}, {"codes": "B0"}):
        with pytest.raises(ConfigError):
            WebshopSimEnv(**bad)
    with pytest.raises(ConfigError):
        WebshopSimEnv().reset(seed=0, options={"split": "valid"})


# -- WebShop's reward, computed by hand from get_reward ---------------------------------------------
# princeton-nlp/WebShop web_agent_site/engine/goal.py get_reward:
# score = (n_attr + n_opt + [price <= upper]) / (|attrs| + |opts| + 1) * r_type
GOAL = Goal(asin="B0TARGET00", instruction="i need a waterproof hooded rain jacket",
            attributes=("waterproof", "hooded"), options=(("color", "navy"), ("size", "large")),
            price_upper=50.0, name="Norvale waterproof hooded rain jacket", query="rain jacket",
            product_category="fashion › clothing › rain jacket",
            nouns=frozenset({"rain", "jacket", "norvale"}), type_name="rain jacket")


def product(**changes) -> Product:
    fields = dict(asin="B0TARGET00", title="Norvale waterproof hooded rain jacket",
                  description="A rain jacket.", bullets=("Packable design.",), reviews=(),
                  options=(("color", ("navy", "black")), ("size", ("large",))),
                  price=42.0, attributes=("waterproof", "hooded", "packable"), instruction_attributes=(),
                  query="rain jacket", product_category="fashion › clothing › rain jacket",
                  nouns=frozenset({"rain", "jacket", "norvale"}), type_name="rain jacket", kind="target")
    fields.update(changes)
    return Product(**fields)


RIGHT = {"color": "navy", "size": "large"}


def test_reward_exact_match():
    assert get_reward(product(), GOAL, RIGHT) == 1.0  # (2 + 2 + 1) / 5 * 1


def test_reward_missing_attribute():
    p = product(title="Norvale waterproof rain jacket", attributes=("waterproof", "packable"))
    assert get_reward(p, GOAL, RIGHT) == pytest.approx(4 / 5)  # (1 + 2 + 1) / 5
    # "hooded" found only as a substring of the description, "waterproof" nowhere: (1 + 2 + 1) / 5
    p = product(title="Norvale rain jacket", attributes=("packable",), description="Fully Hooded.")
    assert get_reward(p, GOAL, RIGHT) == pytest.approx(4 / 5)
    # ... and the fuzzy match on the attribute list: token sets {hooded} within {hooded, detachable} -> 100
    p = product(title="Norvale rain jacket", attributes=("waterproof", "Hooded, Detachable"))
    assert get_reward(p, GOAL, RIGHT) == 1.0


def test_reward_wrong_or_missing_option():
    assert get_reward(product(), GOAL, {"color": "black", "size": "large"}) == pytest.approx(4 / 5)
    assert get_reward(product(), GOAL, {"size": "large"}) == pytest.approx(4 / 5)  # never chose a colour
    assert get_reward(product(), GOAL, {}) == pytest.approx(3 / 5)
    # these goals are WebShop's synthetic kind, whose options get_option_reward sees as (name, value)
    # tuples. ('color', 'grey'): "grey" equals an element, so normalize_color gives "grey", as it does for
    # "dark grey" (our colour list has no "dark") -> match. ('size', 'large') stays a tuple, read as
    # "size large"; "x-large" -> {x, large}: sect "large", rests "large x" / "large size": 10/12 = 83,
    # 10/15 = 67, LCS("large x", "large size") = 6 -> 12/17 = 71; best 83 <= 85, no match: (2 + 1 + 1) / 5
    goal = Goal(**{**GOAL.__dict__, "options": (("color", "grey"), ("size", "large"))})
    assert get_reward(product(), goal, {"color": "dark grey", "size": "x-large"}) == pytest.approx(4 / 5)
    # a human goal lists bare values: "x-large" {x, large} vs "large" {large}: sect "large" is all of the
    # goal side -> 100, match: (2 + 2 + 1) / 5. option_match="values" reads every goal that way.
    human = Goal(**{**goal.__dict__, "option_form": "values"})
    assert get_reward(product(), human, {"color": "dark grey", "size": "x-large"}) == 1.0
    assert get_reward(product(), goal, {"color": "dark grey", "size": "x-large"},
                      rules=Rules(option_match="values")) == 1.0


def test_reward_options_as_pairs_or_values():
    """goal.py get_option_reward on the goal's ('size', '18 inch') pair vs the bare value '18 inch'."""
    goal = Goal(**{**GOAL.__dict__, "options": (("color", "navy"), ("size", "18 inch"))})
    assert goal_option_texts(goal) == ["navy", "size 18 inch"]
    bought = {"color": "navy", "size": "14 inch"}
    # "14 inch" vs "size 18 inch": sect "inch", rests "inch 14" / "inch 18 size": 8/11 = 72.7, 8/16 = 50,
    # LCS "inch 1" = 6 -> 12/19 = 63.2; best 73 <= 85: only the colour matches, (2 + 1 + 1) / 5
    assert get_reward(product(), goal, bought) == pytest.approx(4 / 5)
    # as values: "14 inch" vs "18 inch": rests "inch 14" / "inch 18", LCS 6 -> 12/14 = 85.7 -> 86 > 85
    values = Rules(option_match="values")
    assert get_reward(product(), goal, bought, rules=values) == 1.0  # (2 + 2 + 1) / 5
    # "18 inch" vs "size 18 inch": sect "18 inch" is all of the bought side -> 100
    assert get_reward(product(), goal, {"color": "navy", "size": "18 inch"}) == 1.0


def test_reward_over_price():
    assert get_reward(product(price=50.0), GOAL, RIGHT) == 1.0  # the bound is inclusive
    assert get_reward(product(price=55.0), GOAL, RIGHT) == pytest.approx(4 / 5)  # (2 + 2 + 0) / 5


def test_reward_type_factor():
    # a hoodie: two breadcrumb levels shared, but no noun shared -> title_score 0 -> r_type 0
    hoodie = product(title="Kestrix waterproof hooded hoodie", query="hoodie",
                     nouns=frozenset({"hoodie", "kestrix"}),
                     product_category="fashion › clothing › hoodie")
    assert get_reward(hoodie, GOAL, RIGHT) == 0.0
    # one of six goal nouns shared (1/6 in [0.1, 0.2]), other query, one breadcrumb level -> r_type 0.5
    goal6 = Goal(**{**GOAL.__dict__, "nouns": frozenset("a b c d e jacket".split())})
    other = product(query="coat", product_category="fashion › outerwear › coat",
                    nouns=frozenset({"jacket", "z"}))
    assert get_reward(other, goal6, RIGHT) == pytest.approx(0.5)
    # one of eleven (1/11 < 0.1) -> r_type 0.1
    goal11 = Goal(**{**GOAL.__dict__, "nouns": frozenset("a b c d e f g h i j jacket".split())})
    assert get_reward(other, goal11, RIGHT) == pytest.approx(0.1)
    # the same query lifts 0.5 to 1 (title_score 1/6 > 0.1)
    assert get_reward(product(nouns=frozenset({"jacket"})), goal6, RIGHT) == 1.0


def test_reward_type_counts_repeated_goal_nouns():
    """get_type_reward divides by the goal title's noun list, repeats included."""
    repeats = ("rain", "jacket", "rain", "jacket", "shell", "rain", "jacket", "hood", "rain", "jacket",
               "rain")
    goal = Goal(**{**GOAL.__dict__, "nouns": repeats})  # 11 nouns, 4 distinct
    other = product(query="coat", product_category="fashion › outerwear › coat", nouns=("jacket", "z"))
    # other query, one breadcrumb level; shared {jacket}: 1/11 = 0.09 < 0.1 -> r_type 0.1; base 5/5
    assert get_reward(other, goal, RIGHT) == pytest.approx(0.1)
    # type_nouns="unique": 1/4 = 0.25 > 0.2 -> r_type 1.0
    assert get_reward(other, goal, RIGHT, rules=Rules(type_nouns="unique")) == 1.0


def test_fuzzy_matching_by_hand():
    # "2 count" vs "6 count": sect "count", combined "count 2" / "count 6"; LCS 6 -> 2*6/14 = 85.7 -> 86
    assert token_set_ratio("2 count", "6 count") == 86
    assert token_set_ratio("Navy", "navy") == 100 and token_set_ratio("", "navy") == 0
    assert token_set_ratio("gluten free", "sugar free") <= 85
    assert normalize_color("dark grey") == "grey" and normalize_color("queen") == "queen"


# -- catalog rules ----------------------------------------------------------------------------------
def test_vocabularies_keep_near_misses_apart():
    for t in TYPES:
        for a in t.attributes:
            for b in t.attributes:
                if a != b:
                    assert a not in b and token_set_ratio(a, b) <= 85, (t.name, a, b)
    for vocab, values in OPTION_VALUES.items():
        for a in values:
            for b in values:
                if a != b:
                    assert token_set_ratio(normalize_color(a), normalize_color(b)) <= 85, (vocab, a, b)
                    pair = Goal(**{**GOAL.__dict__, "options": ((vocab.split()[-1], b),)})
                    assert token_set_ratio(normalize_color(a), goal_option_texts(pair)[0]) <= 85, (a, b)


def test_only_targets_score_one_and_splits_are_disjoint():
    env = WebshopSimEnv()
    for seed in range(30):
        env.reset(seed=seed)
        goal, catalog = env.goal, env.catalog
        for p in catalog.products:
            values = dict(p.options)
            chosen = {n: v for n, v in goal.options if v in values.get(n, ())}
            if get_reward(p, goal, chosen) == 1.0:
                assert p.kind == "target", (seed, p)
        assert get_reward(catalog.by_asin[goal.asin], goal, dict(goal.options)) == 1.0
    train, test = build_catalog("train", 0, 15, 3), build_catalog("test", 0, 15, 3)
    assert not {p.asin for p in train.products} & {p.asin for p in test.products}
    kinds = [p.kind for p in train.products]
    assert kinds.count("target") == 15 and len(kinds) == 60


# -- pages, actions, text ---------------------------------------------------------------------------
def test_pages_and_text():
    env = WebshopSimEnv()
    obs, info = env.reset(seed=4)
    assert obs == f"WebShop{SEP}Instruction:{SEP}{info['task']}{SEP}Search"
    assert info["admissible_actions"] == ["search[<your query>]"]
    assert info["available_actions"] == {"has_search_bar": True, "clickables": ["search"]}
    assert info["task"].endswith(f"and price lower than {env.goal.price_upper:.2f} dollars")
    obs, _reward, _term, _trunc, info = env.step(f"search[{env.goal.type_name}]")
    assert f"{SEP}Back to Search{SEP}Page 1 (Total results: " in obs and info["is_action_valid"]
    assert obs.startswith(f"Instruction:{SEP}")  # WebShop's heading is on search_page.html only
    asin = env.page.hits[0]
    assert f"click[{asin.lower()}]" in info["admissible_actions"]
    obs, *_, info = env.step(f"click[{asin.lower()}]")
    p = env.catalog.by_asin[asin]
    # web_agent_text_env.py get_available_actions: the buttons in page order, then the option values
    values = [v for _, vs in p.options for v in vs]
    assert info["available_actions"]["clickables"] == ["back to search", "< prev", "description", "features",
                                                       "reviews", "buy now", *values]
    tail = [p.title, f"Price: ${p.price:.2f}", "Rating: N.A.", "Description", "Features", "Reviews",
            "Buy Now"]
    assert obs.endswith(SEP.join(tail)) and "Back to Search [SEP] < Prev" in obs
    for sub, text in (("description", p.description), ("features", p.bullets[0]), ("reviews", p.reviews[0])):
        obs, *_, info = env.step(f"click[{sub}]")
        assert text in obs and info["admissible_actions"] == ["click[< prev]", "click[back to search]"]
        obs, *_ = env.step("click[< prev]")
        assert obs.endswith("Buy Now")
    obs, *_, info = env.step("click[back to search]")
    assert obs.endswith(f"{SEP}Search") and env.page.name == "search"


def test_pagination():
    env = WebshopSimEnv(catalog_size=120)
    env.reset(seed=0)
    everything = " ".join(t.name for t in TYPES)
    obs, *_, info = env.step(f"search[{everything}]")
    assert "Page 1 (Total results: 50) [SEP] Next > [SEP] B0" in obs and "< Prev" not in obs
    pages = [env.page.hits[:10]]
    assert sum(f"click[{a.lower()}]" in info["admissible_actions"] for a in pages[0]) == 10
    for n in range(2, 6):
        obs, *_, info = env.step("click[next >]")
        assert f"Page {n} (Total results: 50) [SEP] < Prev" in obs
        pages.append(env.page.hits[(n - 1) * 10:n * 10])
    assert len({a for page in pages for a in page}) == 50
    # results_page.html draws Next > on every page, the last too; past it comes an empty page
    assert obs.split(SEP)[3:6] == ["Page 5 (Total results: 50)", "< Prev", "Next >"]
    assert "click[next >]" in info["admissible_actions"]
    obs, *_, info = env.step("click[next >]")
    assert obs.endswith(f"Page 6 (Total results: 50){SEP}< Prev{SEP}Next >") and info["is_action_valid"]
    env.step("click[< prev]")
    env.step("click[< prev]")
    env.step(f"click[{pages[3][2].lower()}]")  # an item opened from page 4 goes back to page 4
    obs, *_ = env.step("click[< prev]")
    assert "Page 4 (Total results: 50)" in obs


def test_prover_v0_pages():
    """pages="prover-v0": the heading on every page, Next > only while more results follow."""
    env = WebshopSimEnv(catalog_size=120, pages="prover-v0")
    env.reset(seed=0)
    obs, *_ = env.step(f"search[{' '.join(t.name for t in TYPES)}]")
    assert obs.startswith(f"WebShop{SEP}Instruction:") and "Next >" in obs
    for _ in range(4):
        obs, *_, info = env.step("click[next >]")
    assert "Next >" not in obs and "click[next >]" not in info["admissible_actions"]
    key = env.state_key()
    *_, info = env.step("click[next >]")
    assert not info["is_action_valid"] and env.state_key() == key
    *_, info = env.step(f"click[{env.page.hits[40].lower()}]")
    assert info["available_actions"]["clickables"][-4:] == ["description", "features", "reviews", "buy now"]


def test_lower_casing():
    env = WebshopSimEnv()
    env.reset(seed=2)
    env.step("search[HOODIE Fleece]")
    hits = env.page.hits
    env.step("search[hoodie fleece]")
    assert env.page.hits == hits
    *_, info = env.step(f"click[{hits[0]}]")  # upper-case id: the argument is lower-cased
    assert info["is_action_valid"] and env.page.asin == hits[0]
    assert all(a == a.lower() for a in info["admissible_actions"])
    *_, info = env.step("CLICK[buy now]")  # the action name is not lower-cased, as in WebShop
    assert not info["is_action_valid"]
    obs, _reward, term, _, info = env.step("click[Buy Now]")
    assert info["is_action_valid"] and term and obs.startswith("Thank you for shopping with us!")


def test_malformed_actions_are_no_ops():
    env = WebshopSimEnv()
    for prefix in ([], ["search[shoes]"], ["search[shoes]", "click[next >]"]):
        obs, info = env.reset(seed=1)
        for a in prefix:
            obs, *_, info = env.step(a)
        for action in BAD:
            key = env.state_key()
            out = env.step(action)
            assert out[:4] == (obs, 0.0, False, False) and not out[4]["is_action_valid"], action
            assert env.state_key() == key and out[4]["admissible_actions"] == info["admissible_actions"]


def test_buy_ends_the_episode_and_the_step_cap_truncates():
    env = WebshopSimEnv()
    env.reset(seed=5)
    while True:
        _obs, reward, term, _trunc, info = env.step(env.expert_action())
        if term:
            break
    assert reward == info["task_score"] == 1.0 and info["won"] and env.expert_action() is None
    assert info["admissible_actions"] == []
    env.reset(seed=5)
    outs = [env.step("nonsense") for _ in range(15)]
    assert [o[3] for o in outs] == [False] * 14 + [True] and not any(o[2] for o in outs)


def test_a_premature_purchase_scores_partially():
    env = WebshopSimEnv()
    env.reset(seed=3)
    env.step(env.expert_action())
    while env.page.name != "item":
        env.step(env.expert_action())
    _, reward, term, _, info = env.step("click[buy now]")  # no options chosen
    n_opts, n_attrs = len(env.goal.options), len(env.goal.attributes)
    assert term and not info["won"] and reward == pytest.approx((n_attrs + 1) / (n_attrs + n_opts + 1))


# -- expert, search, prompts, replay ----------------------------------------------------------------
@pytest.mark.parametrize("split", ["train", "test"])
def test_expert_wins_nearly_always(split):
    env, wins, n = WebshopSimEnv(), 0, 100
    for seed in range(n):
        env.reset(seed=seed, options={"split": split})
        for _ in range(15):
            *_, term, trunc, info = env.step(env.expert_action())
            if term or trunc:
                break
        wins += info["won"]
    assert wins / n >= 0.95  # measured: 1.0 on seeds 0-299 of both splits


def test_bm25_by_hand():
    docs = ["red shoe", "red red shoe", "blue hat"]
    index = BM25(docs)
    idf, avgdl = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5)), 7 / 3
    s0 = idf * 1 * 1.9 / (1 + 0.9 * (0.6 + 0.4 * 2 / avgdl))
    s1 = idf * 2 * 1.9 / (2 + 0.9 * (0.6 + 0.4 * 3 / avgdl))
    assert index.scores("red").tolist() == pytest.approx([s0, s1, 0.0])
    assert index.search("red") == [1, 0] and index.search("the") == [] and index.search("hat", k=1) == [2]


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_prompt_presets(name):
    env = WebshopSimEnv(prompt=name)
    obs, info = env.reset(seed=0)
    spec = env.agent_spec
    text = spec.render(info["task"], obs, info["admissible_actions"], [], 0)
    assert info["task"] in text and "search[<your query>]" in text
    assert spec.parse(spec.format_action("search[hoodie]")).action == "search[hoodie]"
    if name == "compact":
        assert len(text) < 400


WORDS = ["hoodie", "shoes", "vegan", "bar", "lamp", "xyz"]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 50), split=st.sampled_from(["train", "test"]),
       picks=st.lists(st.integers(0, 200), min_size=2, max_size=16), cut=st.integers(0, 15))
def test_restore_snapshot_replays_exactly(seed, split, picks, cut):
    env = WebshopSimEnv()

    def act(info, k):  # mostly admissible actions, some free searches and some junk
        if k % 7 == 0:
            return f"search[{WORDS[k % len(WORDS)]} {WORDS[(k // 7) % len(WORDS)]}]"
        if k % 11 == 0:
            return "click[nowhere]"
        acts = info["admissible_actions"] or ["noop"]
        return acts[k % len(acts)]

    _, info = env.reset(seed=seed, options={"split": split})
    cut = min(cut, len(picks))
    for k in picks[:cut]:
        *_, term, trunc, info = env.step(act(info, k))
        if term or trunc:
            return
    snap, key, info0 = env.snapshot(), env.state_key(), info

    def tail():
        out, inf = [], info0
        for k in picks[cut:]:
            o, r, te, tr, inf = env.step(act(inf, k))
            out.append((o, r, te, tr, inf, env.state_key()))
            if te or tr:
                break
        return out

    first = tail()
    env.reset(seed=seed + 1)
    env.restore(snap)
    assert env.state_key() == key
    assert tail() == first
