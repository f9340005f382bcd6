"""webshop-sim's product codes: ``codes="item"`` (a closed pool of one-token codes) beside WebShop's ASINs,
and the tiny-policy recipe that uses them."""

from __future__ import annotations

from prover.envs import check_env
from prover.envs.webshop_sim import WebshopSimEnv
from prover.envs.webshop_sim.catalog import build_catalog
from prover.envs.webshop_sim.engine import SEP


def test_check_env_with_item_codes():
    check_env(WebshopSimEnv(codes="item", catalog_size=8))


def test_item_codes_are_a_closed_pool_on_the_same_catalog():
    """codes="item": each catalog of 60 products is named #item 1 .. #item 60, train and test alike; the
    products, their order and the goals are those of the ASIN catalog."""
    pool = {f"#item {n}" for n in range(1, 61)}
    for split in ("train", "test"):
        for index in (0, 7):
            asin, item = build_catalog(split, 0, 15, 3, index), build_catalog(split, 0, 15, 3, index, "item")
            assert {p.asin for p in item.products} == pool
            # numbered apart from the catalog's order, which search ties follow: a low code is no hint of rank
            assert [p.asin for p in item.products] != [f"#item {n}" for n in range(1, 61)]
            assert [p.title for p in item.products] == [p.title for p in asin.products]
            assert [item.by_asin[a].title for a in item.targets] == [asin.by_asin[a].title for a in asin.targets]
    env_asin, env_item = WebshopSimEnv(), WebshopSimEnv(codes="item")
    for seed in range(5):
        _, info_asin = env_asin.reset(seed=seed, options={"split": "test"})
        _, info_item = env_item.reset(seed=seed, options={"split": "test"})
        assert info_item["task"] == info_asin["task"] and env_item.goal.asin in pool


def test_item_codes_on_the_pages():
    """The results page lists "#item k" where it listed an ASIN; click[#item k] opens that product, and the
    expert wins with these codes as with ASINs."""
    env = WebshopSimEnv(codes="item")
    env.reset(seed=4)
    obs, *_, info = env.step(f"search[{env.goal.type_name}]")
    code = env.page.hits[0]
    p = env.catalog.by_asin[code]
    assert f"Next >{SEP}{code}{SEP}{p.title}{SEP}${p.price:.2f}" in obs
    assert f"click[{code}]" in info["admissible_actions"]
    obs, *_, info = env.step(f"click[{code.upper()}]")  # the argument is lower-cased, as ever
    assert info["is_action_valid"] and env.page.asin == code and p.title in obs
    wins = 0
    for seed in range(20):
        env.reset(seed=seed)
        while (action := env.expert_action()) is not None:
            *_, info = env.step(action)
        wins += info["won"]
    assert wins == 20


def test_item_codes_are_one_token_each_the_same_on_the_page_and_in_the_action():
    """The point of codes="item": the tiny tokenizer, trained on the env's text, gives every code one token,
    and the same one on the results page (after a space) and in an action (after the bracket), so a policy
    copies a code by attending to it; the '#' keeps the space out of the code's token."""
    from prover.policy.tiny import env_corpus, train_tokenizer

    tok = train_tokenizer(env_corpus(lambda: WebshopSimEnv(codes="item"), 60, 0), 2048)

    def pieces(text: str) -> list[str]:
        return [tok.decode([i]) for i in tok(text)["input_ids"]]

    for n in range(1, 61):
        page = pieces(f"Next >{SEP}#item {n}{SEP}")
        assert f"item {n}" in page and page[page.index(f"item {n}") - 1] == " #"
        assert pieces(f"click[#item {n}]") == ["click", "[#", f"item {n}", "]"]


def test_the_tiny_recipe_uses_item_codes_on_many_catalogs():
    from prover.config_load import load_config

    env = load_config(None, ["env.name=webshop-sim"]).env
    assert env.kwargs.get("codes") == "item" and env.kwargs.get("n_catalogs", 200) >= 100
    assert WebshopSimEnv().codes == "asin"  # without the recipe (a real checkpoint): WebShop's ASINs
