"""An expert a policy can imitate: it decides from what the pages show and what it has opened.

On the search page it searches the goal's key words (instruction attributes and the type). On a
results page it opens the most promising product not yet ruled out, judged from the listed title and
price (type named, attributes named, within budget); it pages on when none is left. On an item page it
checks what the page shows (title, price, option values): if the product fits, it clicks each wanted
option and buys; otherwise it goes back. Products it opened and found wanting stay ruled out.
"""

from __future__ import annotations

from prover.envs.webshop_sim.catalog import Catalog, Goal, Product
from prover.envs.webshop_sim.engine import Page, _page_hits


def query(goal: Goal) -> str:
    return " ".join([*goal.attributes, goal.type_name])


def _listing_score(product: Product, goal: Goal) -> tuple:
    """How good a result looks from its title and price alone (higher is better)."""
    title = product.title.lower()
    return (goal.type_name in title, product.price <= goal.price_upper,
            sum(a in title for a in goal.attributes))


def fits(product: Product, goal: Goal) -> bool:
    """Whether an opened item visibly satisfies the goal."""
    values = dict(product.options)
    title = product.title.lower()
    return (goal.type_name in title and product.price <= goal.price_upper
            and all(a in title for a in goal.attributes)
            and all(v in values.get(n, ()) for n, v in goal.options))


def expert_action(catalog: Catalog, goal: Goal, page: Page, opened: frozenset[str]) -> str | None:
    if page.name == "done":
        return None
    if page.name == "search":
        return f"search[{query(goal)}]"
    if page.name == "sub":
        return "click[< prev]"
    if page.name == "item":
        product = catalog.by_asin[page.asin]
        if not fits(product, goal):
            return "click[< prev]"
        chosen = dict(page.options)
        for name, value in goal.options:
            if chosen.get(name) != value:
                return f"click[{value}]"
        return "click[buy now]"
    # results: rule out opened misfits, open the best-looking remaining one
    full = (True, True, len(goal.attributes))
    candidates = [catalog.by_asin[a] for a in _page_hits(page)
                  if a not in opened or fits(catalog.by_asin[a], goal)]
    best = max(candidates, key=lambda p: _listing_score(p, goal), default=None)
    if best is not None and _listing_score(best, goal) == full:
        return f"click[{best.asin.lower()}]"
    if page.page_num * 10 < len(page.hits):
        return "click[next >]"
    if best is not None:
        return f"click[{best.asin.lower()}]"
    return f"search[{goal.type_name}]"
