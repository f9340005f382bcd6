"""webshop-sim's ground-truth pivotal turns on a two-product catalog, each answer worked out by hand.

The catalog: a target T (``b0t``: "Norvale waterproof rain jacket", colour navy or black, $40) and a
distractor D (``b0d``: "Kestrix hooded rain jacket", same colours and price, not waterproof). The goal:
a waterproof rain jacket, colour navy, under $50. By get_reward, only T with navy scores 1.0 (T with
black or none: 2/3; D lacks the attribute). So the shortest win from the search page is 4 steps:
search, click T, click navy, buy now; from any results page a fresh search plus those three also wins,
so a results page with k steps left can win whenever k >= 4, and a listing of T whenever k >= 3.
"""

from __future__ import annotations

import itertools

import pytest

from prover.envs import make_env
from prover.envs.webshop_sim import WebshopSimEnv
from prover.envs.webshop_sim.catalog import Catalog, Goal, Product
from prover.envs.webshop_sim.engine import Page, apply
from prover.envs.webshop_sim.search import tokenize
from prover.envs.webshop_sim.truth import NO_HITS, Oracle
from prover.errors import ContractError
from prover.types import Trajectory, Turn

CATEGORY = "fashion › clothing › rain jacket"


def _product(asin: str, brand: str, attribute: str, price: float = 40.0) -> Product:
    return Product(asin=asin, title=f"{brand} {attribute} rain jacket", description="A rain jacket.",
                   bullets=(f"{attribute.capitalize()} design.",), reviews=(),
                   options=(("color", ("navy", "black")),), price=price, attributes=(attribute,),
                   instruction_attributes=(attribute,), query="rain jacket", product_category=CATEGORY,
                   nouns=(brand.lower(), "rain", "jacket"), type_name="rain jacket", kind="target")


T = _product("B0T", "Norvale", "waterproof")
D = _product("B0D", "Kestrix", "hooded")
GOAL = Goal(asin="B0T", instruction="i need a waterproof rain jacket with color: navy, and price lower than "
            "50.00 dollars", attributes=("waterproof",), options=(("color", "navy"),), price_upper=50.0,
            name=T.title, query="rain jacket", product_category=CATEGORY, nouns=T.nouns, type_name="rain jacket")


def _catalog(products: tuple[Product, ...]) -> Catalog:
    return Catalog(products, {p.asin: p for p in products}, ("B0T",))


TINY = _catalog((D, T))


class TinyShop(WebshopSimEnv):
    """webshop-sim on the hand-built catalog: every seed is the same task."""

    catalog_products = TINY

    def _draw_task(self, seed: int, options: dict) -> tuple[Catalog, Goal, str]:
        split = options.get("split", "train")
        return self.catalog_products, GOAL, f"{split}/tiny-{id(self.catalog_products)}/seed-{seed}"


def _turn(action: str) -> Turn:
    return Turn(prompt_ids=[1], completion_ids=[2], logprobs=[0.0], observation="", completion_text=action,
                action=action, format_valid=True, action_valid=True, reward=0.0, state_key=0)


def _traj(actions: list[str], task_id: str = "train/0") -> Trajectory:
    return Trajectory(traj_id="t#0", task_id=task_id, task_text="t", turns=[_turn(a) for a in actions])


WRONG_FIRST = ["search[rain jacket]", "click[b0d]", "click[< prev]", "click[b0t]", "click[navy]"]
EXPERT = ["search[rain jacket]", "click[b0t]", "click[navy]", "click[buy now]"]


def test_opening_the_wrong_product_is_pivotal_only_when_the_cap_leaves_no_time_to_go_back():
    # max_steps 5 (one step of slack). Turn 0, search page, 5 left: every search reaches a results page
    # with 4 left, which still wins by a fresh search -> not pivotal. Turn 1, results, 4 left: T leaves 3
    # (navy, buy) -> 1; D leaves 3, but from D's page a win needs 4 (back, T, navy, buy) -> 0: pivotal.
    # Turns 2-4 (D's page with 3 left, results with 2, T with no colour and 1): nothing can win -> not.
    traj = _traj(WRONG_FIRST)
    assert TinyShop(max_steps=5).pivotal_turns(traj) == [1]
    assert TinyShop(max_steps=5).value_trace(traj) == [True, True, False, False, False, False]
    # max_steps 15: every turn off an item page can afford anything. Turn 2 (D's page, 13 left) and
    # turn 4 (T without a colour, 11 left): buy now loses, anything else still wins -> pivotal.
    assert TinyShop(max_steps=15).pivotal_turns(traj) == [2, 4]


def test_a_cap_with_no_slack_makes_every_turn_pivotal():
    # max_steps 4 = the shortest win. Turn 0: the no-hit search leaves an empty page with 3 left, which
    # needs 4 -> 0, a search listing T -> 1. Turn 1: D -> 0, T -> 1. Turn 2 (T, 2 left): black leaves
    # 1 step, buy scores 2/3 -> 0; navy -> 1. Turn 3 (navy, 1 left): buy -> 1, any other click -> 0.
    assert TinyShop(max_steps=4).pivotal_turns(_traj(EXPERT)) == [0, 1, 2, 3]
    # max_steps 15: only turn 2 (buy now before navy loses); at turn 3 every other action still
    # leaves time to buy T with navy -> not pivotal.
    assert TinyShop(max_steps=15).pivotal_turns(_traj(EXPERT)) == [2]


def test_a_wrong_option_caps_the_success_only_when_there_is_no_time_to_fix_it():
    # max_steps 5, the agent picks black first. Turn 0: results with 4 left still win -> not pivotal.
    # Turn 1 (4 left): D -> 0 (needs 4 from its page). Turn 2 (T, 3 left): buy -> 0. Turn 3 (black, 2
    # left): navy then buy -> 1, buy -> 0. Turn 4 (navy, 1 left): buy -> 1, else 0. All but turn 0.
    actions = ["search[rain jacket]", "click[b0t]", "click[black]", "click[navy]", "click[buy now]"]
    assert TinyShop(max_steps=5).pivotal_turns(_traj(actions)) == [1, 2, 3, 4]
    env = TinyShop(max_steps=4)
    env.reset(seed=0)
    oracle = Oracle(env.catalog, env.index, GOAL)
    item = Page("item", hits=("B0D", "B0T"), asin="B0T")
    # T without a colour: with 2 steps left black cannot be undone; with 3 it can (black, navy, buy)
    tight, loose = oracle.q_values(item, 2), oracle.q_values(item, 3)
    assert (tight["click[navy]"], tight["click[black]"], tight["click[buy now]"]) == (True, False, False)
    assert (loose["click[navy]"], loose["click[black]"], loose["click[buy now]"]) == (True, True, False)


def _all_searches(env: WebshopSimEnv) -> dict[str, Page]:
    """One query per distinct result list that a query of up to three of the catalog's words gives."""
    words = sorted({w for p in env.catalog.products for w in tokenize(p.document())})
    pages = {}
    for n in range(1, 4):
        for combo in itertools.combinations_with_replacement(words, n):
            page = apply(env.catalog, env.index, env.goal, Page(), f"search[{' '.join(combo)}]", env.rules)
            pages.setdefault(page.hits, page)
    return {f"search[{' '.join(h)}]": page for h, page in pages.items()}


def test_the_two_searches_and_the_bounds_give_the_values_of_every_search():
    env = TinyShop()
    env.reset(seed=0)
    full = Oracle(env.catalog, env.index, GOAL, bounds=False)
    full.searches = {NO_HITS: full.searches[NO_HITS], **_all_searches(env)}  # every distinct result list
    assert len(full.searches) >= 5  # (), T alone, D alone, and both in each order
    fast = Oracle(env.catalog, env.index, GOAL)
    pages = set(full.searches.values())
    for page in list(pages):  # everything two moves from a results page
        for nxt in full.moves(page).values():
            pages |= {nxt, *full.moves(nxt).values()}
    for page, k in itertools.product(pages, range(9)):
        assert fast.value(page, k) == full.value(page, k), (page, k)
        assert fast.is_pivotal(page, k) == full.is_pivotal(page, k), (page, k)


def test_no_witness_raises_rather_than_guess():
    # ten over-budget copies of T's text come first in index order: every query ties them with T
    # and lists T eleventh, so no search puts a winnable product on the first page
    copies = tuple(_product(f"B0C{i}", "Norvale", "waterproof", price=99.0) for i in range(10))
    env = TinyShop()
    env.catalog_products = _catalog((*copies, T))
    with pytest.raises(ContractError, match="not certified"):
        env.pivotal_turns(_traj(EXPERT))


def test_pivotal_turns_reject_foreign_trajectories_and_leave_the_env_untouched():
    env = TinyShop()
    env.reset(seed=3)
    env.step("search[jacket]")
    before, steps = env.state_key(), env.steps
    env.pivotal_turns(_traj(EXPERT))
    assert (env.state_key(), env.steps) == (before, steps)
    with pytest.raises(ContractError, match="split/seed"):
        env.pivotal_turns(_traj(["look"], task_id="alfworld/3"))
    with pytest.raises(ContractError, match="after its episode ended"):
        env.pivotal_turns(_traj([*EXPERT, "click[back to search]"]))


def test_default_config_expert_success():
    env = make_env("webshop-sim")
    env.reset(seed=0)
    actions, pages, done = [], [], False
    while not done:
        pages.append(env.page.name)
        actions.append(env.expert_action())
        _, _, terminated, truncated, info = env.step(actions[-1])
        done = terminated or truncated
    assert info["won"] and len(actions) <= 8  # 7 steps of slack or more under the cap of 15
    assert env.value_trace(_traj(actions)) == [True] * (len(actions) + 1)  # the expert never loses the win
    # With that slack no search or results turn matters, and on an item page buy now loses unless the
    # product and options are right: the expert's item turns are pivotal except the final buy.
    expected = [t for t, (name, a) in enumerate(zip(pages, actions)) if name == "item" and a != "click[buy now]"]
    assert env.pivotal_turns(_traj(actions)) == expected
