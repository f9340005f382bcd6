"""``webshop``: WebShop on its real product and goal files, through webshop-sim's pages and reward.

Only where the products and goals come from differs from ``webshop-sim``: this env reads WebShop's
own files (``data``) and hands them to webshop-sim's engine through its ``_draw_task`` seam. The
pages, the `` [SEP] `` text, the action grammar, the step cap, the snapshots, the prompts and WebShop's
``get_reward`` are webshop-sim's, which reproduce the real site's. Two things follow the real data:
prices are shown as WebShop shows them (``$12.5``, ``$20.0 to $30.0``), and the reward normalises
colours with WebShop's own colour list.

Tasks: ``reset(seed=s, options={"split": "train" | "test"})`` takes goal ``s % n`` of that split's
``n`` goals; WebShop's shuffled goal list gives the first ``n_test_goals`` to test, the rest to train.
With 500 (verl-agent's split) a data set of up to 500 goals has no train goals: pass a smaller
``n_test_goals`` for small files.

Switches, passed to webshop-sim's ``rules.Rules``; each default is WebShop's behaviour:
``option_match`` (``"webshop"``: synthetic goals' options are matched as (name, value) pairs and human
goals' as values, as goal.py does; ``"values"``: values for both), ``type_nouns`` (``"webshop"``: repeated
title nouns count in the type score's denominator; ``"unique"``: once) and ``pages`` (``"webshop"`` or
``"prover-v0"``, the pages prover showed before it followed WebShop's).
"""

from __future__ import annotations

import os

from prover.envs.webshop_sim.catalog import Catalog, Goal
from prover.envs.webshop_sim.engine import _page_hits
from prover.envs.webshop_sim.env import SPLITS, WebshopSimEnv
from prover.errors import ConfigError

from prover_webshop.data import GOAL_MODES, Shop, load_shop


class WebshopEnv(WebshopSimEnv):
    """WebShop's text env on the files in ``data_dir``; see the module docstring.

    ``data_dir``: the folder holding WebShop's data files; the ``*_file`` names are relative to it
    (or absolute). ``goals``: ``"human"`` (the 12k human instructions; WebShop's benchmark) or
    ``"synthetic"`` (one per option combination, from the attributes file; verl-agent's default).
    ``num_products``: keep the first N products, as WebShop does. ``noun_tagger``: a spaCy model name
    for the reward's title nouns (WebShop's way), or ``"words"`` to take every non-stop word without
    spaCy. ``data_seed`` seeds the sampled prices and price bounds. ``option_match``, ``type_nouns``
    and ``pages`` are the switches of the module docstring.
    """

    def __init__(self, *, data_dir: str | os.PathLike, products_file: str = "items_shuffle_1000.json",
                 attributes_file: str = "items_ins_v2_1000.json",
                 human_goals_file: str = "items_human_ins.json", goals: str = "human",
                 num_products: int | None = None, n_test_goals: int = 500,
                 noun_tagger: str = "en_core_web_sm", data_seed: int = 0, max_steps: int = 15,
                 prompt: str = "verl-agent", option_match: str = "webshop", type_nouns: str = "webshop",
                 pages: str = "webshop") -> None:
        super().__init__(max_steps=max_steps, prompt=prompt, option_match=option_match,
                         type_nouns=type_nouns, pages=pages)
        if goals not in GOAL_MODES:
            raise ConfigError(f"webshop: goals={goals!r}; choose one of {GOAL_MODES}")
        if n_test_goals < 0:
            raise ConfigError(f"webshop: n_test_goals={n_test_goals} must be 0 or more")
        if num_products is not None and num_products < 1:
            raise ConfigError(f"webshop: num_products={num_products} must be at least 1 (or None for all)")
        self.shop: Shop = load_shop(data_dir, products_file, attributes_file, human_goals_file, goals,
                                    num_products, n_test_goals, noun_tagger, data_seed)

    def _draw_task(self, seed: int, options: dict) -> tuple[Catalog, Goal, str]:
        split = options.get("split", "train")
        if split not in SPLITS:
            raise ConfigError(f"webshop: unknown split {split!r}; choose one of {SPLITS}")
        pool = self.shop.goals[split]
        if not pool:
            n_all = sum(len(g) for g in self.shop.goals.values())
            raise ConfigError(f"webshop: split {split!r} has no goals: {self.shop.source!r} gives {n_all} "
                              f"and n_test_goals keeps {len(self.shop.goals['test'])} for test; "
                              f"pass {'a smaller' if split == 'train' else 'a positive'} "
                              "env.kwargs.n_test_goals")
        index = seed % len(pool)
        return self.shop.catalog, pool[index], f"{split}/{pool[index].asin}/goal-{index}"

    def expert_action(self) -> str | None:
        """An oracle that knows the target: it searches the target's title, opens the target (paging
        to it), clicks each goal option the item offers, and buys. For warm-start data and tests; if
        the search misses the target it buys the first hit, so it always finishes an episode."""
        self._require_reset("expert_action")
        page, goal = self.page, self.goal
        if page.name == "done":
            return None
        if page.name == "search":
            return f"search[{goal.name.replace('[', ' ').replace(']', ' ')}]"
        if page.name == "sub":
            return "click[< prev]"
        if page.name == "results":
            if goal.asin in _page_hits(page):
                return f"click[{goal.asin.lower()}]"
            if goal.asin in page.hits:
                where = page.hits.index(goal.asin) // 10 + 1
                return "click[next >]" if where > page.page_num else "click[< prev]"
            if _page_hits(page):
                return f"click[{_page_hits(page)[0].lower()}]"
            return f"search[{goal.query}]"
        if page.asin != goal.asin and goal.asin in page.hits:
            return "click[< prev]"
        offered = {v for _, values in self.catalog.by_asin[page.asin].options for v in values}
        chosen = set(dict(page.options).values())
        for _, value in goal.options:
            if value.lower() in offered and value.lower() not in chosen:
                return f"click[{value.lower()}]"
        return "click[buy now]"
