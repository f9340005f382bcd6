"""prover-webshop reads WebShop's own files and plays them with webshop-sim's pages and WebShop's reward.

The data here are a few records written in WebShop's schemas (items_shuffle, items_ins_v2,
items_human_ins). Expected scores are worked out by hand from WebShop's get_reward:

    score = (n_attr + n_opt + [price <= upper]) / (|goal attrs| + |goal opts| + 1) * r_type
"""

from __future__ import annotations

import json

import pytest

from prover.envs import check_env, make_env
from prover.envs.webshop_sim.engine import SEP
from prover.errors import ConfigError

from prover_webshop import WebshopEnv

JACKET, PACKABLE, UMBRELLA, MUG = "B000RAIN01", "B000RAIN02", "B000UMBR01", "B000MUG001"


def option(*values: str) -> list[dict]:
    return [{"value": v, "image": None} for v in values]


PRODUCTS = [
    {"asin": JACKET, "name": "Norvale Waterproof Hooded Rain Jacket for Men",
     "full_description": "A light shell with taped seams.",
     "small_description": ["Packs into its own pocket", "Adjustable drawcord"], "pricing": "$35.99",
     "customization_options": {"Color": option("Navy", "Dark Navy", "Navy/White", "Black"),
                               "Size": option("Large", "X-Large")},
     "query": "Rain Jacket ", "category": "fashion", "product_category": "fashion › men › rain jackets",
     "images": ["a.jpg"]},
    {"asin": PACKABLE, "name": "Kestrix Packable Rain Jacket", "full_description": "A shell for showers.",
     "small_description": ["Folds small"], "pricing": "$20.00 to $30.00",
     "customization_options": {"Color": option("Olive", "Navy"), "Size": option("Large")},
     "query": "rain jacket", "category": "fashion", "product_category": "fashion › men › rain jackets",
     "images": []},
    {"asin": UMBRELLA, "name": "Bramlow Compact Travel Umbrella for Rain", "full_description": "Opens fast.",
     "small_description": ["Auto open"], "pricing": "$12.5", "customization_options": {},
     "query": "umbrella", "category": "fashion", "product_category": "fashion › accessories › umbrellas",
     "images": []},
    {"asin": MUG, "name": "Ostera Ceramic Coffee Mug", "full_description": "Holds 12 ounces.",
     "small_description": "Dishwasher safe", "customization_options": None,
     "query": "coffee mug", "category": "home", "product_category": "home › kitchen › mugs",
     "images": []},
    {**{"asin": JACKET, "name": "a repeated asin: WebShop keeps the first record"},
     "query": "x", "product_category": "x"},
    {"asin": "nan", "name": "WebShop drops asin nan", "query": "x", "product_category": "x"},
]
ATTRIBUTES = {
    JACKET: {"attributes": ["waterproof", "machine wash"], "instruction": "i want a waterproof rain jacket",
             "instruction_attributes": ["waterproof"]},
    PACKABLE: {"attributes": ["packable"], "instruction": "i want a packable rain jacket",
               "instruction_attributes": ["packable"]},
    UMBRELLA: {"attributes": ["windproof"]},
}
HUMAN = {
    JACKET: [{"instruction": "i need a waterproof hooded rain jacket in navy, size large.",
              "instruction_attributes": ["waterproof", "hooded"], "instruction_options": ["navy", "large"]}],
    UMBRELLA: [{"instruction": "a windproof travel umbrella", "instruction_attributes": ["windproof"],
                "instruction_options": []},
               {"instruction": "no attributes: WebShop skips it", "instruction_attributes": [],
                "instruction_options": []}],
    MUG: [{"instruction": "a ceramic mug", "instruction_attributes": ["ceramic"], "instruction_options": []}],
}


def write_data(folder, products, attributes, human):
    """WebShop's three data files, under the names its loader reads, in ``folder``."""
    for name, content in (("items_shuffle_1000.json", products), ("items_ins_v2_1000.json", attributes),
                          ("items_human_ins.json", human)):
        (folder / name).write_text(json.dumps(content, ensure_ascii=False))
    return folder


@pytest.fixture
def data_dir(tmp_path):
    return write_data(tmp_path, PRODUCTS, ATTRIBUTES, HUMAN)


def shop(data_dir, **kwargs) -> WebshopEnv:
    defaults = {"data_dir": str(data_dir), "noun_tagger": "words", "n_test_goals": 1}
    return make_env("webshop", **{**defaults, **kwargs})


def reset_to(env: WebshopEnv, asin: str) -> str:
    """Reset to the (only) goal for ``asin``, whichever split the shuffle put it in."""
    for split, goals in env.shop.goals.items():
        for seed, goal in enumerate(goals):
            if goal.asin == asin:
                return env.reset(seed=seed, options={"split": split})[0]
    raise AssertionError(f"no goal for {asin}")


def play(env: WebshopEnv, actions: list[str]) -> tuple[float, dict]:
    for action in actions:
        _, reward, terminated, _, info = env.step(action)
        assert info["is_action_valid"], (action, env.page)
    assert terminated
    return reward, info


# -- the contract and loading --------------------------------------------------------------------
@pytest.mark.parametrize("name", ["webshop", "webshop-v0"])
def test_check_env_passes_on_the_entry_point_env(data_dir, name):
    env = make_env(name, data_dir=str(data_dir), noun_tagger="words", n_test_goals=1)
    assert isinstance(env, WebshopEnv)
    check_env(env, seeds=(0, 1, 2, 3))


def test_loads_webshops_records_and_goals(data_dir):
    env = shop(data_dir)
    catalog = env.shop.catalog
    assert [p.asin for p in catalog.products] == [JACKET, PACKABLE, UMBRELLA, MUG]  # repeat and nan dropped
    jacket, packable = catalog.by_asin[JACKET], catalog.by_asin[PACKABLE]
    assert jacket.title == "Norvale Waterproof Hooded Rain Jacket for Men" and jacket.query == "rain jacket"
    assert jacket.options == (("color", ("navy", "dark navy", "navy | white", "black")),
                              ("size", ("large", "x-large")))
    assert (jacket.price, jacket.price_tag) == (35.99, "$35.99")
    assert 20.0 <= packable.price <= 30.0 and packable.price_tag == "$20.0 to $30.0"
    assert catalog.by_asin[UMBRELLA].price_tag == "$12.5"
    mug = catalog.by_asin[MUG]
    assert (mug.price, mug.price_tag, mug.bullets, mug.options) == (100.0, "$100.0", ("Dishwasher safe",), ())
    assert mug.attributes == ("DUMMY_ATTR",) and jacket.attributes == ("waterproof", "machine wash")
    goals = env.shop.goals["test"] + env.shop.goals["train"]
    assert len(env.shop.goals["test"]) == 1 and sorted(g.asin for g in goals) == [MUG, JACKET, UMBRELLA]
    goal = next(g for g in goals if g.asin == JACKET)
    assert goal.price_upper in (50.0, 60.0, 70.0)  # the larger of two of the four tens above 35.99
    assert goal.instruction == ("i need a waterproof hooded rain jacket in navy, size large"
                                f", and price lower than {goal.price_upper:.2f} dollars")
    assert goal.options == (("color", "navy"), ("size", "large"))
    assert next(g for g in goals if g.asin == MUG).price_upper in (120.0, 130.0, 140.0)


def test_pages_show_webshops_price_text(data_dir):
    env = shop(data_dir)
    reset_to(env, JACKET)
    obs = env.step("search[rain jacket]")[0].split(SEP)
    assert obs[obs.index(JACKET) + 2] == "$35.99"
    assert obs[obs.index(PACKABLE) + 2] == "$20.0 to $30.0"
    obs = env.step(f"click[{JACKET.lower()}]")[0]
    assert f"color{SEP}navy{SEP}dark navy{SEP}navy | white{SEP}black{SEP}size{SEP}large{SEP}x-large" in obs
    assert f"Price: $35.99{SEP}Rating: N.A." in obs


# -- playing -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("split", ["train", "test"])
def test_expert_wins_every_goal_with_score_one(data_dir, split):
    env = shop(data_dir)
    for seed in range(len(env.shop.goals[split])):
        env.reset(seed=seed, options={"split": split})
        reward, done, info = 0.0, False, {}
        while not done:
            _, reward, term, trunc, info = env.step(env.expert_action())
            done = term or trunc
        assert reward == 1.0 and info["won"] and info["task_score"] == 1.0, env.goal


BUY_JACKET = ["search[waterproof rain jacket]", f"click[{JACKET.lower()}]"]


@pytest.mark.parametrize("asin, actions, expected", [
    # the right jacket in the right size but colour "dark navy": normalize_color takes the first word
    # of WebShop's alphabetical colour list found in it, "dark", which does not match "navy".
    # attrs: waterproof (attribute list), hooded (title) = 2; opts: large = 1; price 35.99 <= bound: 1;
    # r_type 1 (same query) -> (2 + 1 + 1) / (2 + 2 + 1) = 0.8
    (JACKET, BUY_JACKET + ["click[dark navy]", "click[large]", "click[buy now]"], 0.8),
    # the right jacket, no option chosen: (2 + 0 + 1) / 5 = 0.6
    (JACKET, BUY_JACKET + ["click[buy now]"], 0.6),
    # another rain jacket in navy, large: attrs 0 (not waterproof, not hooded); opts 2; price 1;
    # same query -> r_type 1: (0 + 2 + 1) / 5 = 0.6
    (PACKABLE, ["search[kestrix packable rain jacket]", f"click[{PACKABLE.lower()}]", "click[navy]",
                "click[large]", "click[buy now]"], 0.6),
    # an umbrella: attrs 0 ("windproof" vs "waterproof": token_set_ratio 63 <= 85), opts 0, price 1;
    # other query, one shared breadcrumb level (fashion), title nouns share {rain} of the goal's six
    # {norvale, waterproof, hooded, rain, jacket, men}: 1/6 is not > 0.2 but not < 0.1 -> r_type 0.5;
    # (0 + 0 + 1) / 5 * 0.5 = 0.1
    (UMBRELLA, ["search[bramlow umbrella]", f"click[{UMBRELLA.lower()}]", "click[buy now]"], 0.1),
])
def test_near_misses_score_as_webshop_defines(data_dir, asin, actions, expected):
    env = shop(data_dir)
    reset_to(env, JACKET)
    reward, info = play(env, actions)
    assert env.page.asin == asin
    assert reward == pytest.approx(expected) and info["task_score"] == pytest.approx(expected)
    assert not info["won"]


def test_spacy_noun_tagger_decides_the_type_score(data_dir, tmp_path):
    """WebShop's own noun rule, through a real spaCy pipeline saved to disk (no model download): an
    attribute ruler tags a fixed word list, so the nouns are known. The goal's nouns are then
    {norvale, rain, jacket}; the umbrella's {rain, umbrella}: title score 1/3 > 0.2 -> r_type 1, and
    the umbrella scores (0 + 0 + 1) / 5 * 1 = 0.2 (0.1 with the words tagger, above)."""
    spacy = pytest.importorskip("spacy")
    nlp = spacy.blank("en")
    ruler = nlp.add_pipe("attribute_ruler")
    ruler.add([[{"LOWER": w}] for w in ("rain", "jacket", "umbrella", "mug", "coffee")], {"POS": "NOUN"})
    ruler.add([[{"LOWER": "norvale"}]], {"POS": "PROPN"})
    nlp.to_disk(tmp_path / "tagger")
    env = shop(data_dir, noun_tagger=str(tmp_path / "tagger"))
    assert env.shop.catalog.by_asin[JACKET].nouns == ("norvale", "rain", "jacket")  # title order
    reset_to(env, JACKET)
    reward, _ = play(env, ["search[bramlow umbrella]", f"click[{UMBRELLA.lower()}]", "click[buy now]"])
    assert reward == pytest.approx(0.2)


def test_synthetic_goals_are_one_per_option_combination(data_dir):
    env = shop(data_dir, goals="synthetic", n_test_goals=0)
    goals = env.shop.goals["train"]
    assert len(goals) == 4 * 2 + 2 * 1  # jacket: 4 colours x 2 sizes; packable: 2 x 1; umbrella: none
    goal = next(g for g in goals if g.options == (("color", "navy | white"), ("size", "x-large")))
    assert goal.asin == JACKET and goal.attributes == ("waterproof",)
    assert goal.instruction == ("i want a waterproof rain jacket with color: navy | white, and size: x-large"
                                f", and price lower than {goal.price_upper:.2f} dollars")
    assert len({g.price_upper for g in goals if g.asin == JACKET}) == 1  # one bound per product
    with pytest.raises(ConfigError, match="split 'test' has no goals"):
        env.reset(seed=0, options={"split": "test"})


# -- bad data ------------------------------------------------------------------------------------------
def test_missing_folder_or_file_names_it(data_dir):
    with pytest.raises(ConfigError, match="is not a folder"):
        shop(data_dir / "nowhere")
    (data_dir / "items_human_ins.json").unlink()
    with pytest.raises(ConfigError, match=r"human goals file .*items_human_ins\.json' does not exist"):
        shop(data_dir)
    shop(data_dir, goals="synthetic")  # synthetic goals do not need the human file


def test_corrupt_json_names_the_file_and_line(data_dir):
    (data_dir / "items_ins_v2_1000.json").write_text('{\n  "B000RAIN01": {"attributes": [}\n')
    with pytest.raises(ConfigError, match=r"attributes file .*items_ins_v2_1000\.json' is not valid JSON "
                                          r"\(line 2"):
        shop(data_dir)


def test_wrong_schema_names_the_record(data_dir):
    broken = [dict(PRODUCTS[0]), {"asin": "B000BROKEN", "query": "q", "product_category": "a"}]
    (data_dir / "items_shuffle_1000.json").write_text(json.dumps(broken))
    with pytest.raises(ConfigError, match=r"items_shuffle_1000\.json' product 1: no text field 'name'"):
        shop(data_dir)
    broken[1] = dict(PRODUCTS[1], pricing="$12.3.4")
    (data_dir / "items_shuffle_1000.json").write_text(json.dumps(broken))
    with pytest.raises(ConfigError, match=r"product 1 \(asin B000RAIN02\): ValueError"):
        shop(data_dir)


def test_bad_arguments(data_dir):
    for bad in ({"goals": "both"}, {"n_test_goals": -1}, {"num_products": 0}):
        with pytest.raises(ConfigError):
            shop(data_dir, **bad)
    with pytest.raises(ConfigError, match="choose one of"):
        shop(data_dir).reset(seed=0, options={"split": "eval"})
    # the faithful noun tagger is spaCy; a model that is not installed is a one-line error
    with pytest.raises(ConfigError, match="noun_tagger=words"):
        make_env("webshop", data_dir=str(data_dir), noun_tagger="xx_no_such_spacy_model")
