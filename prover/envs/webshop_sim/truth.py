"""Exact optimal success of a webshop-sim task, for the ground-truth pivotal turns (diagnostics only).

The quantity is the env's success, ``won``: a purchase whose WebShop score is exactly 1.0 (the graded
score is the reward; pivot-sim's truth is its success probability, so this one is too). The dynamics
are deterministic, so that probability is 0 or 1. For a page P (``engine.Page``: the search page, a
results list at a page number, an item with its chosen options, a sub-page, or the done page) with k
steps left before the cap, ``Oracle`` computes with ``engine.apply`` itself

    V*(P, k)    = 1 if P is the done page of a purchase scoring 1.0; 0 if P is another done page or k = 0,
    V*(P, k)    = max over the actions a accepted at P of Q*(P, k, a),   Q*(P, k, a) = V*(apply(P, a), k - 1).

The actions accepted at a page are its clickables (``click[search]`` is refused) and ``search[q]`` for
every query q (the engine takes a search on any page). Invalid actions (no-ops that use a step) are
left out, as pivot-sim's menu leaves them out; they never help. The clicks are finite; the queries are
not, but a search leads to page 1 of its hit list H(q) whatever page it leaves, and two queries bound
every other one, so the max and the min over all of them are exact:

* ``NO_HITS`` (all stopwords: no product is a hit) is the worst. The empty results page offers back to
  search, more empty pages and another search; every results page offers the first and the last, and
  an empty page is (by induction on k) worth no more than a results page a search reaches. So
  V*(results(()), k) <= V*(results(H), k) for every H.
* a witness is the best. A win from a results page clicks a listed product w (its options start
  empty), then at least need(w) option values (the fewest clicks to a choice scoring 1.0) and buy now:
  V*(results(H), k) <= [2 + need_min <= k] for every H, need_min the least need of any product. A
  query that lists a product of least need on its first page attains that bound. The witness is the
  first such among candidate queries (each winnable product's title, then its indexed text);
  ``Oracle`` raises when none qualifies rather than guess. Measured: on 200 default-config tasks the
  target's title ranks it first.

Search: depth-first over (page, steps left), memoised, with a sound bound each way. No win is closer
than ``_lower`` steps (the counting above), so k below it gives 0; ``_upper`` is the length of a path
that wins (the witness search from any page, or the missing options and buy now from a winnable item),
so k at or above it gives 1. Only results pages fall between the two, for one step; ``bounds=False``
turns them off (the tests check both agree). V* is monotone in k (a longer cap never hurts).
"""

from __future__ import annotations

from collections import deque

from prover.envs.webshop_sim.catalog import Catalog, Goal
from prover.envs.webshop_sim.engine import PER_PAGE, Page, apply, clickables
from prover.envs.webshop_sim.reward import attribute_matches, get_reward, type_reward
from prover.envs.webshop_sim.rules import WEBSHOP, Rules
from prover.errors import ContractError

NO_HITS = "search[the]"  # "the" is a stopword: the query has no term, so no product is a hit
NEVER = 10**9  # steps to a win from a state that cannot win


class Oracle:
    """V* and Q* of one task's pages, memoised across calls (definition in the module docstring)."""

    def __init__(self, catalog: Catalog, index, goal: Goal, rules: Rules = WEBSHOP, bounds: bool = True) -> None:
        self.catalog, self.index, self.goal, self.rules, self.bounds = catalog, index, goal, rules, bounds
        self.values: dict[tuple[Page, int], bool] = {}
        self.need = {p.asin: self._option_needs(p.asin) for p in catalog.products if self._may_win(p)}
        self.need_min = min((n[()] for n in self.need.values()), default=NEVER)
        witness = self._witness()
        # a search's page does not depend on where it is typed: each is built once
        self.searches = {q: apply(catalog, index, goal, Page(), q, rules) for q in (NO_HITS, witness) if q}

    # -- the finite action set -------------------------------------------------------------------
    def _may_win(self, product) -> bool:
        """Whether some options could make ``product`` score 1.0: get_reward's price, type and attribute
        terms do not depend on the options, and each must be full (the option term is checked later)."""
        goal = self.goal
        return (product.price <= goal.price_upper and type_reward(product, goal, self.rules) == 1.0
                and attribute_matches(product, goal.attributes) == len(goal.attributes))

    def _option_needs(self, asin: str) -> dict[tuple, int]:
        """need(options): the fewest option clicks from each reachable choice to one that scores 1.0,
        over the engine's own clicks (a click sets the first option listing the value)."""
        start = Page("item", asin=asin)
        edges: dict[tuple, set[tuple]] = {}
        todo = deque([start])
        while todo:
            page = todo.popleft()
            if page.options in edges:
                continue
            edges[page.options] = set()
            for value in (v for _, vs in self.catalog.by_asin[asin].options for v in vs):
                nxt = apply(self.catalog, self.index, self.goal, page, f"click[{value}]", self.rules)
                if nxt is not None:  # a value with capitals is never clickable (the argument is lower-cased)
                    edges[page.options].add(nxt.options)
                    todo.append(nxt)
        product = self.catalog.by_asin[asin]
        layer = {o for o in edges if get_reward(product, self.goal, dict(o), self.catalog.colors, self.rules) == 1.0}
        dist, d = dict.fromkeys(layer, 0), 0
        while layer:  # backward breadth-first from the winning choices
            d += 1
            layer = {o for o in edges if o not in dist and edges[o] & layer}
            dist.update(dict.fromkeys(layer, d))
        return {o: dist.get(o, NEVER) for o in edges}

    def _witness(self) -> str | None:
        """A query that lists a product of least need on its first page (None when nothing can win)."""
        if self.need_min >= NEVER:
            return None  # no query can win: NO_HITS alone is every search's value
        best = [a for a, n in self.need.items() if n[()] == self.need_min]
        for asin in best:
            product = self.catalog.by_asin[asin]
            for text in (product.title, product.document()):
                query = "search[" + " ".join(text.lower().replace("[", " ").replace("]", " ").split()) + "]"
                page = apply(self.catalog, self.index, self.goal, Page(), query, self.rules)
                if page is not None and asin in page.hits[:PER_PAGE]:
                    return query
        raise ContractError(f"webshop-sim truth: no candidate query lists any of {best} on the first results page, "
                            "so the best search is not certified; the pivotal turns would be a guess")

    def moves(self, page: Page) -> dict[str, Page]:
        """The accepted actions of ``page`` (searches stood for by ``searches``) and the page each leads to."""
        if page.name == "done":
            return {}
        out = {}
        for c in clickables(self.catalog, page, self.rules):
            nxt = apply(self.catalog, self.index, self.goal, page, f"click[{c}]", self.rules)
            if nxt is not None:
                out[f"click[{c}]"] = nxt
        return {**out, **self.searches}

    # -- values ----------------------------------------------------------------------------------
    def _lower(self, page: Page) -> int:
        """No win is fewer steps away (counted in the module docstring)."""
        leave = 3 + self.need_min  # a search or < prev, a click on a product, its options, buy now
        if page.name in ("item", "sub"):
            stay = self.need.get(page.asin, {}).get(page.options, NEVER) + 1 + (page.name == "sub")
            return min(stay, leave)
        return leave - (page.name == "results")

    def _upper(self, page: Page) -> int:
        """A win is this many steps away: the item's own path, or the witness search and its product."""
        if page.name in ("item", "sub"):
            return self._lower(page)  # both of the lower bound's paths exist from an item or its sub-page
        return 3 + self.need_min

    def value(self, page: Page, k: int) -> bool:
        """V*(page, k): whether a purchase scoring 1.0 can still be made within k steps."""
        if page.name == "done":
            return page.score == 1.0
        if k <= 0:
            return False
        if self.bounds:
            if k < self._lower(page):
                return False
            if k >= self._upper(page):
                return True
        key = (page, k)
        known = self.values.get(key)
        if known is None:
            known = self.values[key] = any(self.value(nxt, k - 1) for nxt in self.moves(page).values())
        return known

    def q_values(self, page: Page, k: int) -> dict[str, bool]:
        """Q*(page, k, a) for every action a of ``moves`` (empty once the episode is over)."""
        if page.name == "done" or k <= 0:
            return {}
        return {action: self.value(nxt, k - 1) for action, nxt in self.moves(page).items()}

    def is_pivotal(self, page: Page, k: int) -> bool:
        """Whether the best achievable success depends on the action taken at ``page`` with k steps left."""
        return len(set(self.q_values(page, k).values())) > 1
