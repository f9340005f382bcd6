"""WebShop's purchase score (web_agent_site/engine/goal.py ``get_reward``), reproduced without its deps.

    score = (n_attribute_matches + n_option_matches + [price <= price_upper])
            / (|goal attributes| + |goal options| + 1)  *  r_type

* A goal attribute matches when ``token_set_ratio(product attribute, goal attribute) > 85`` for some
  product attribute, else when it is a substring of the lower-cased title, bullets or description.
* A goal option matches when ``token_set_ratio(normalize_color(bought), normalize_color(goal)) > 85``
  for some bought option value. What "goal" is depends on the goal's form, as in goal.py: a human goal
  lists bare values; a synthetic goal is a dict whose ``.items()`` are passed, so each goal option is a
  ``(name, value)`` pair. ``normalize_color`` then tests ``color in pair`` (equality with the name or the
  value), and thefuzz reads the pair as the text ``"('name', 'value')"``, i.e. the tokens of both. So
  ``14 inch`` does not match ``('size', '18 inch')`` (ratio 73) though it matches ``18 inch`` (86), and
  ``dark grey`` (normalised to ``dark``) matches ``('color', 'dark blue')`` but not ``blue``.
* ``r_type`` from the nouns of the two titles: ``title_score = |set(nouns(bought)) & set(nouns(goal))|
  / len(nouns(goal))``, where the goal's noun list keeps repeats (0.2 when it is empty); 1.0 if the
  queries are equal, or two breadcrumb levels are shared, or title_score > 0.2, else 0.5; then 0.1 if
  title_score < 0.1; 0 if it is 0.

Switches (``rules.Rules``; the defaults are WebShop's): ``option_match="values"`` compares bare values
for every goal; ``type_nouns="unique"`` counts each goal noun once in the denominator.

Departures, each because the original needs something we do not ship:
1. Fuzzy matching is our own ``token_set_ratio`` with thefuzz's semantics (rounded 0-100, Indel ratio
   over sorted token sets), so rapidfuzz is not needed. Its tokens are ASCII letter and digit runs;
   thefuzz also keeps non-ASCII letters above U+00FF and underscores, which product text rarely has.
2. Nouns come from the product record (``Product.nouns``, a list with repeats); webshop-sim fills it
   with the title's type words and brand, the webshop plugin with spaCy's tags, as goal.py does.
3. ``COLORS`` (in ``vocab.py``, with the catalog's other word lists) is our own list of colour words;
   ``normalize_color`` keeps the rule (the first word of the list found in the string) but not the
   original list. A catalog may bring its own list
   (``Catalog.colors``); the real-data webshop plugin brings WebShop's.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from prover.envs.webshop_sim.rules import WEBSHOP, Rules
from prover.envs.webshop_sim.vocab import COLORS

if TYPE_CHECKING:  # pragma: no cover
    from prover.envs.webshop_sim.catalog import Goal, Product

def _tokens(s: str) -> list[str]:
    """thefuzz's default processing: lower-case, every non-alphanumeric char becomes a space."""
    return re.sub(r"[^0-9a-z]+", " ", s.lower()).split()


def _lcs(a: str, b: str) -> int:
    prev = [0] * (len(b) + 1)
    for ca in a:
        cur = [0]
        for j, cb in enumerate(b):
            cur.append(prev[j] + 1 if ca == cb else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def ratio(a: str, b: str) -> float:
    """Indel similarity in percent: 2 * LCS / (|a| + |b|), as Levenshtein.ratio / rapidfuzz compute it."""
    if not a and not b:
        return 100.0
    return 200.0 * _lcs(a, b) / (len(a) + len(b))


def token_set_ratio(s1: str, s2: str) -> int:
    """thefuzz's ``token_set_ratio``: compare the shared tokens with each side's full token set."""
    t1, t2 = set(_tokens(s1)), set(_tokens(s2))
    if not t1 or not t2:
        return 0
    sect = " ".join(sorted(t1 & t2))
    c1 = " ".join(sorted(t1 & t2) + sorted(t1 - t2))
    c2 = " ".join(sorted(t1 & t2) + sorted(t2 - t1))
    best = max(ratio(sect, c1) if sect else 0.0, ratio(sect, c2) if sect else 0.0, ratio(c1, c2))
    return round(best)


def normalize_color(value: str, colors: tuple[str, ...] = COLORS) -> str:
    for color in colors:
        if color in value:
            return color
    return value


def _pair_text(name: str, value: str, colors: tuple[str, ...]) -> str:
    """A synthetic goal's option as get_option_reward sees it: normalize_color on a (name, value) tuple,
    where ``color in pair`` is true only for an element equal to a colour word, and then thefuzz's
    ``str(pair)``, whose tokens are those of ``"name value"`` (quotes, commas and brackets are dropped)."""
    for color in colors:
        if color in (name, value):
            return color
    return f"{name} {value}"


def goal_option_texts(goal: Goal, colors: tuple[str, ...] = COLORS, rules: Rules = WEBSHOP) -> list[str]:
    """The goal's options, normalised, as the option matcher compares them (see the module docstring)."""
    if goal.option_form == "pairs" and rules.option_match == "webshop":
        return [_pair_text(name, value, colors) for name, value in goal.options]
    return [normalize_color(value, colors) for _, value in goal.options]


def attribute_matches(product: Product, attributes: tuple[str, ...]) -> int:
    text = (product.title.lower(), " ".join(product.bullets).lower(), product.description.lower())
    n = 0
    for g in attributes:
        if any(token_set_ratio(p, g) > 85 for p in product.attributes) or any(g in t for t in text):
            n += 1
    return n


def option_matches(bought: list[str], wanted: list[str], colors: tuple[str, ...] = COLORS) -> int:
    """How many of the ``wanted`` texts (already normalised, see ``goal_option_texts``) some bought
    value matches."""
    bought = [normalize_color(v, colors) for v in bought]
    return sum(any(token_set_ratio(p, g) > 85 for p in bought) for g in wanted)


def type_reward(product: Product, goal: Goal, rules: Rules = WEBSHOP) -> float:
    query_match = product.query == goal.query
    shared = {c.strip() for c in product.product_category.split("›")} & \
             {c.strip() for c in goal.product_category.split("›")}
    # goal.py divides by the goal's noun list, repeats included; "unique" is prover's earlier count
    goal_nouns = list(goal.nouns) if rules.type_nouns == "webshop" else list(dict.fromkeys(goal.nouns))
    title_score = len(set(product.nouns) & set(goal.nouns)) / len(goal_nouns) if goal_nouns else 0.2
    r_type = 1.0 if (query_match or len(shared) >= 2 or title_score > 0.2) else 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type


def get_reward(product: Product, goal: Goal, options: dict[str, str],
               colors: tuple[str, ...] = COLORS, rules: Rules = WEBSHOP) -> float:
    """The score of buying ``product`` with the chosen ``options`` ({name: value}) for ``goal``;
    ``colors`` is the word list of ``normalize_color`` (a real-data catalog brings WebShop's own) and
    ``rules`` the switches (WebShop's behaviour by default)."""
    n_attr = attribute_matches(product, goal.attributes)
    n_opt = option_matches(list(options.values()), goal_option_texts(goal, colors, rules), colors)
    r_price = product.price <= goal.price_upper
    total = (n_attr + n_opt + r_price) / (len(goal.attributes) + len(goal.options) + 1)
    return total * type_reward(product, goal, rules)
