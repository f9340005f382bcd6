"""WebShop's pages, buttons and text, as pure functions of an immutable ``Page``.

The page graph is the real site's: ``search`` -> ``results`` (10 per page from up to 50 hits, with
``Back to Search``, ``< Prev`` after page 1, ``Next >`` and product ids) -> ``item`` (option groups,
``Description``, ``Features``, ``Reviews``, ``Buy Now``, ``< Prev``, ``Back to Search``) -> ``sub`` (one of
the three texts, ``< Prev`` back to the item) -> ``done`` after ``Buy Now``, done_page.html read whole
(``done_page``: the thank-you line, the MTurk-code line, the purchase, the unset target fields, the
score). The text is the visible strings joined by `` [SEP] ``, as WebShop's ``text`` observation mode
renders its templates: the ``WebShop`` heading only on the search page (search_page.html has it, the
others do not), and ``Next >`` on every results page, the last included (results_page.html); clicking it
past the last page shows an empty page, as WebShop does. The clickables are WebShop's
``get_available_actions`` (web_agent_text_env.py) order: the buttons and product links in page order,
then the option values, each text once.

Actions follow WebShop's text env: ``name[arg]`` (regex ``(.+)\\[(.+)\\]``, matched at the start), the
argument lower-cased; ``search[q]`` works from any page; ``click[x]`` needs ``x`` among the page's
lower-cased clickables and not ``search``. Anything else is a no-op.

Switch (``rules.Rules.pages``): ``"prover-v0"`` renders prover's earlier pages (the heading on every
page, ``Next >`` only while more results follow, the option values before ``Description``, and a short
done page: the thank-you line, ``Purchased``, the code and the score to two decimals).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace

from prover.envs.webshop_sim.catalog import Catalog, Goal, Product
from prover.envs.webshop_sim.reward import get_reward
from prover.envs.webshop_sim.rules import WEBSHOP, Rules

SEP = " [SEP] "
PER_PAGE = 10
SEARCH_RETURN_N = 50
SEARCH_PLACEHOLDER = "search[<your query>]"  # how verl-agent lists the search bar
SUB_PAGES = ("description", "features", "reviews")
_ACTION = re.compile(r"(.+)\[(.+)\]")


@dataclass(frozen=True)
class Page:
    """Where the browser is. Immutable, so a snapshot is the object itself."""

    name: str = "search"  # search | results | item | sub | done
    hits: tuple[str, ...] = ()  # the last search's product ids, best first
    page_num: int = 1
    asin: str = ""
    options: tuple[tuple[str, str], ...] = ()  # chosen (option name, value), in display order
    sub: str = ""  # which sub-page
    score: float = 0.0  # the purchase score, on the done page


def parse_action(action: str) -> tuple[str, str | None]:
    m = _ACTION.match(action.strip())
    if m is None:
        return action.strip(), None
    return m.group(1), m.group(2).lower()


def _has_next(page: Page, rules: Rules) -> bool:
    # results_page.html draws Next > on every page; prover-v0 drew it only while more results follow
    return rules.pages == "webshop" or page.page_num * PER_PAGE < len(page.hits)


def clickables(catalog: Catalog, page: Page, rules: Rules = WEBSHOP) -> list[str]:
    """The page's lower-cased button texts, in WebShop's ``clickables`` order, each once."""
    if page.name == "search":
        return ["search"]
    if page.name == "results":
        buttons = ["back to search"] + (["< prev"] if page.page_num > 1 else [])
        buttons += ["next >"] if _has_next(page, rules) else []
        return buttons + [a.lower() for a in _page_hits(page)]
    if page.name == "item":
        values = [v for _, vs in catalog.by_asin[page.asin].options for v in vs]
        if rules.pages == "webshop":  # get_available_actions: buttons first, then the radio options
            return list(dict.fromkeys(["back to search", "< prev", *SUB_PAGES, "buy now", *values]))
        return ["back to search", "< prev", *values, *SUB_PAGES, "buy now"]
    if page.name == "sub":
        return ["back to search", "< prev"]
    return []


def available_actions(catalog: Catalog, page: Page, rules: Rules = WEBSHOP) -> dict:
    return {"has_search_bar": page.name == "search", "clickables": clickables(catalog, page, rules)}


def admissible(catalog: Catalog, page: Page, rules: Rules = WEBSHOP) -> list[str]:
    """verl-agent's list: the search placeholder when there is a search bar, then one click each."""
    acts = [SEARCH_PLACEHOLDER] if page.name == "search" else []
    return sorted(acts + [f"click[{c}]" for c in clickables(catalog, page, rules) if c != "search"])


def _page_hits(page: Page) -> tuple[str, ...]:
    start = (page.page_num - 1) * PER_PAGE
    return page.hits[start:start + PER_PAGE]


def _price(product: Product) -> str:
    return product.price_tag or f"${product.price:.2f}"


def render(catalog: Catalog, goal: Goal, page: Page, rules: Rules = WEBSHOP) -> str:
    # only search_page.html carries the WebShop heading; prover-v0 put it on every page
    heading = ["WebShop"] if page.name == "search" or rules.pages == "prover-v0" else []
    parts = [*heading, "Instruction:", goal.instruction]
    if page.name == "search":
        parts.append("Search")
    elif page.name == "results":
        parts += ["Back to Search", f"Page {page.page_num} (Total results: {len(page.hits)})"]
        parts += ["< Prev"] if page.page_num > 1 else []
        parts += ["Next >"] if _has_next(page, rules) else []
        for asin in _page_hits(page):
            product = catalog.by_asin[asin]
            parts += [asin, product.title, _price(product)]
    elif page.name in ("item", "sub"):
        product = catalog.by_asin[page.asin]
        parts += ["Back to Search", "< Prev"]
        if page.name == "item":
            for name, values in product.options:
                parts += [name, *values]
            parts += [product.title, f"Price: {_price(product)}", "Rating: N.A.",
                      "Description", "Features", "Reviews", "Buy Now"]
        elif page.sub == "description":
            parts.append(product.description)
        else:
            parts += list(product.bullets if page.sub == "features" else product.reviews)
    elif rules.pages == "prover-v0":  # done: prover's earlier short form of the confirmation page
        parts = ["Thank you for shopping with us!", "Purchased", page.asin,
                 "Your score (min 0.0, max 1.0)", f"{page.score:.2f}"]
    else:
        parts = done_page(page)
    return SEP.join(parts)


def done_page(page: Page) -> list[str]:
    """done_page.html's strings as WebShop's ``text`` mode reads them. ``SimServer.done`` renders it with
    the reward, ASIN and options only, so the MTurk code, the purchase's attrs, category and queries, and
    ``goal | pprint`` print ``None`` and the ``goal.*`` fields nothing (no string at all); ``tag_visible``
    judges a string by its parent tag's name alone, so the ``display:none`` block and the ``hidden`` h4
    are read too. Options are Flask's ``tojson``: sorted keys (the lower-cased option names), ASCII, and
    ``< > & '`` as ``\\u003c \\u003e \\u0026 \\u0027``; the score is Python's ``str`` of the float."""
    options = json.dumps({name.lower(): value for name, value in page.options}, sort_keys=True)
    for char in "<>&'":
        options = options.replace(char, f"\\u{ord(char):04x}")
    return ["Thank you for shopping with us!", "Your code:", "None", "(Paste it in your MTurk interface.)",
            "Purchased", "asin", page.asin, "options", options, "attrs", "None", "category", "None", "query",
            "None", "product category", "None", "Target", "asin", "options", "attrs", "price upper",
            "instuction text", "category", "product category", "query", "Goal", "None", "Reward",
            "Your score (min 0.0, max 1.0)", str(page.score), "Reward Details", "None"]


def apply(catalog: Catalog, index, goal: Goal, page: Page, action: str,
          rules: Rules = WEBSHOP) -> Page | None:
    """The page after ``action``, or None when the action is not valid here (a no-op)."""
    name, arg = parse_action(action)
    if page.name == "done" or arg is None:
        return None
    if name == "search":
        hits = tuple(catalog.products[i].asin for i in index.search(arg, SEARCH_RETURN_N))
        return Page("results", hits=hits)
    if name != "click" or arg == "search" or arg not in clickables(catalog, page, rules):
        return None
    if arg == "back to search":
        return Page()
    if page.name == "results":
        if arg in ("next >", "< prev"):
            return replace(page, page_num=page.page_num + (1 if arg == "next >" else -1))
        # the listed code that was clicked: WebShop upper-cases the argument, which fits ASINs only
        asin = next(a for a in _page_hits(page) if a.lower() == arg)
        return Page("item", hits=page.hits, page_num=page.page_num, asin=asin)
    if page.name == "sub":  # only "< prev" is left: back to the item, choices kept
        return replace(page, name="item", sub="")
    if arg == "< prev":
        return Page("results", hits=page.hits, page_num=page.page_num)
    if arg in SUB_PAGES:
        return replace(page, name="sub", sub=arg)
    product = catalog.by_asin[page.asin]
    if arg == "buy now":
        score = get_reward(product, goal, dict(page.options), catalog.colors, rules)
        return replace(page, name="done", score=score)
    chosen = dict(page.options)
    chosen[next(n for n, vs in product.options if arg in vs)] = arg
    return replace(page, options=tuple((n, chosen[n]) for n, _ in product.options if n in chosen))
