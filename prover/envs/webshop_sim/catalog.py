"""A WebShop-like catalog and its goals, drawn from a seed.

A catalog is a list of families. A family is one target product plus near-miss distractors of the
same type that each fail the family's goal in one way (WebShop's hard cases): ``missing-attribute``
lacks one instruction attribute (in its record and its text), ``wrong-options`` offers none of the
target's values for one option, ``over-budget`` costs more than any price bound the goal can draw.
Families of other types share words with the query, so BM25 returns them too. Goals are drawn only
for targets, so buying a distractor never scores 1.0, and which result is opened matters.

Each split has its own catalog seed, so train and test share no product and no goal (with ``"item"``
codes, below, they share the codes and nothing else).

Product codes (``codes``): ``"asin"`` gives WebShop's form, ``B0`` and eight random letters or digits,
unique across catalogs. ``"item"`` renames the same catalog's products ``#item 1`` .. ``#item N`` (N its
size) in a shuffled order: a closed pool that every catalog of a size reuses, with no hint of the
product or its kind. The tiny policy's pre-tokenizer keeps ``<word> <number>`` in one piece, so each
code becomes one token; the ``#`` takes the space before a code on the page (`` [SEP] #item 7``) into its
own piece, so the page and ``click[#item 7]`` hold the same token and a policy copies a code by
attending to it (with ``item 7`` the page's token would be `` item 7`` and the action's ``item 7``).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from string import ascii_uppercase, digits

from prover.envs.webshop_sim.vocab import (
    BRANDS,
    BULLET_TEMPLATES,
    COLORS,
    DESCRIPTION_TEMPLATES,
    INSTRUCTION_TEMPLATES,
    OPTION_VALUES,
    REVIEW_TEMPLATES,
    TITLE_TEMPLATES,
    TYPES,
    ProductType,
)

DISTRACTOR_KINDS = ("missing-attribute", "wrong-options", "over-budget")
CODE_FORMS = ("asin", "item")


@dataclass(frozen=True)
class Product:
    """One product record, with the fields WebShop's reward and search read."""

    asin: str
    title: str
    description: str
    bullets: tuple[str, ...]
    reviews: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]  # (option name, values) in display order
    price: float
    attributes: tuple[str, ...]
    instruction_attributes: tuple[str, ...]  # what a goal for this product asks for
    query: str  # WebShop's scrape query: here the type name
    product_category: str  # "category › subcategory › type", as WebShop's breadcrumb
    nouns: tuple[str, ...]  # what spaCy would tag NOUN/PROPN in the title, in order, repeats kept
    type_name: str
    kind: str  # "target" or one of DISTRACTOR_KINDS
    price_tag: str = ""  # the price as the pages show it (WebShop's "$a to $b"); "" shows ``price``

    def document(self) -> str:
        """The text BM25 indexes: WebShop's title + description + first bullet + option values."""
        values = [v for _, vs in self.options for v in vs]
        first_bullet = self.bullets[0] if self.bullets else ""
        return " ".join([self.title, self.description, first_bullet, *values]).lower()


@dataclass(frozen=True)
class Goal:
    """A shopping task: WebShop's goal dict (asin, name, query, product_category, attributes,
    goal_options, price_upper, instruction_text) as a record. ``option_form`` is how goal.py holds the
    goal's options: ``"pairs"`` for a synthetic goal (a dict, whose (name, value) items the option
    reward compares) and ``"values"`` for a human goal (a list of bare values)."""

    asin: str
    instruction: str
    attributes: tuple[str, ...]
    options: tuple[tuple[str, str], ...]  # (option name, value), one per option of the target
    price_upper: float
    name: str  # the target's title
    query: str
    product_category: str
    nouns: tuple[str, ...]
    type_name: str
    option_form: str = "pairs"


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: one object per cache entry
class Catalog:
    products: tuple[Product, ...]
    by_asin: dict
    targets: tuple[str, ...]  # asins that goals are drawn for
    colors: tuple[str, ...] = COLORS  # the reward's colour words (``reward.normalize_color``)


def _asin(rng: random.Random, taken: set[str]) -> str:
    while True:
        asin = "B0" + "".join(rng.choice(ascii_uppercase + digits) for _ in range(8))
        if asin not in taken:
            taken.add(asin)
            return asin


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _title_nouns(title: str, ptype: ProductType, brand: str) -> tuple[str, ...]:
    """The title's nouns as a tagger lists them (in order, repeats kept): its type words and brand."""
    nouns = set(ptype.name.split()) | {brand.lower()}
    return tuple(w for w in re.findall(r"[0-9a-z]+", title.lower()) if w in nouns)


def _product(rng: random.Random, taken: set[str], ptype: ProductType, brand: str, attributes: list[str],
             instruction_attributes: list[str], options: tuple, price: float, kind: str) -> Product:
    in_title = [a for a in attributes if a in instruction_attributes]
    in_title += [a for a in attributes if a not in in_title][:1]
    title = rng.choice(TITLE_TEMPLATES).format(brand=brand, attrs=" ".join(in_title), type=ptype.name)
    title = title[0].upper() + title[1:]
    described = _join(rng.sample(attributes, k=min(len(attributes), 2)))
    description = rng.choice(DESCRIPTION_TEMPLATES).format(type=ptype.name, brand=brand, attrs=described)
    bullets = tuple(rng.choice(BULLET_TEMPLATES).format(attr=a, Attr=a.capitalize()) for a in attributes)
    reviews = tuple(t.format(attr=rng.choice(attributes), type=ptype.name) for t in REVIEW_TEMPLATES[:2])
    return Product(asin=_asin(rng, taken), title=title, description=description, bullets=bullets,
                   reviews=reviews, options=options, price=price, attributes=tuple(attributes),
                   instruction_attributes=tuple(instruction_attributes), query=ptype.name,
                   product_category=f"{ptype.category} › {ptype.subcategory} › {ptype.name}",
                   nouns=_title_nouns(title, ptype, brand), type_name=ptype.name, kind=kind)


def _family(rng: random.Random, taken: set[str], ptype: ProductType, n_distractors: int) -> list[Product]:
    attributes = rng.sample(ptype.attributes, k=rng.randint(3, 4))
    wanted = attributes[:rng.randint(1, 3)]
    options = []
    for vocab in ptype.options:
        values = OPTION_VALUES[vocab]
        options.append((vocab.split()[-1], tuple(sorted(rng.sample(values, k=min(len(values) - 2, 3)),
                                                        key=values.index))))
    options = tuple(options)
    price = round(rng.uniform(*ptype.price), 2)
    brands = rng.sample(BRANDS, k=1 + n_distractors)
    family = [_product(rng, taken, ptype, brands[0], attributes, wanted, options, price, "target")]
    for i in range(n_distractors):
        kind = DISTRACTOR_KINDS[i % len(DISTRACTOR_KINDS)]
        d_attrs, d_opts, d_price = list(attributes), options, price
        if kind == "missing-attribute":
            d_attrs.remove(rng.choice(wanted))
        elif kind == "wrong-options":
            name, values = options[0]
            vocab = OPTION_VALUES[ptype.options[0]]
            others = [v for v in vocab if v not in values]
            d_opts = ((name, tuple(sorted(rng.sample(others, k=min(len(others), 2)), key=vocab.index))),
                      *options[1:])
        else:  # over-budget: the bound is at most 40 above the price (the 4th ten above it)
            d_price = round(price + rng.uniform(45, 80), 2)
        family.append(_product(rng, taken, ptype, brands[1 + i], d_attrs, [a for a in wanted if a in d_attrs],
                               d_opts, d_price, kind))
    return family


def _item_codes(products: list[Product], key: str) -> list[Product]:
    """The same products renamed ``#item 1`` .. ``#item N`` in a shuffled order. Its own random stream, so
    the products, their order and the goals are those of the ``"asin"`` catalog."""
    numbers = list(range(1, len(products) + 1))
    random.Random(f"webshop-sim/codes/{key}").shuffle(numbers)
    return [replace(p, asin=f"#item {n}") for p, n in zip(products, numbers)]


@lru_cache(maxsize=512)
def build_catalog(split: str, catalog_seed: int, n_families: int, n_distractors: int,
                  index: int = 0, codes: str = "asin") -> Catalog:
    """Catalog ``index`` of a split; the same arguments always give the same catalog (cached, immutable).
    ``codes`` is the form of the product codes (see the module docstring)."""
    key = f"{split}/{catalog_seed}/{index}"
    rng = random.Random(f"webshop-sim/catalog/{key}")
    taken: set[str] = set()
    types = list(TYPES)
    rng.shuffle(types)
    products: list[Product] = []
    for i in range(n_families):
        products += _family(rng, taken, types[i % len(types)], n_distractors)
    rng.shuffle(products)
    if codes == "item":
        products = _item_codes(products, key)
    targets = tuple(p.asin for p in products if p.kind == "target")
    return Catalog(tuple(products), {p.asin: p for p in products}, targets)


def _article(type_name: str, attrs_first: bool, attrs: str) -> str:
    if type_name.endswith("s") and not type_name.endswith("ss"):
        return ""
    first = (attrs if attrs_first else type_name)[0]
    return "an " if first in "aeiou" else "a "


def draw_goal(catalog: Catalog, split: str, seed: int) -> Goal:
    """The goal of ``seed``: a target, one value per option, and WebShop's price bound rule (take the
    four smallest multiples of ten above the price, sample two, keep the larger). Its options are
    WebShop's synthetic kind, one value per option named in the instruction (``option_form="pairs"``)."""
    rng = random.Random(f"webshop-sim/goal/{split}/{seed}")
    product = catalog.by_asin[rng.choice(catalog.targets)]
    options = tuple((name, rng.choice(values)) for name, values in product.options)
    above = [t for t in range(10, 1000, 10) if t > product.price][:4]
    price_upper = float(max(rng.sample(above, 2)))
    template = rng.choice(INSTRUCTION_TEMPLATES)
    attrs = _join(list(product.instruction_attributes))
    a = _article(product.type_name, template.index("{attrs}") < template.index("{type}"), attrs)
    opts = ", and ".join(f"{name}: {value}" for name, value in options)
    instruction = template.format(a=a, attrs=attrs, type=product.type_name, opts=opts, price=price_upper)
    return Goal(asin=product.asin, instruction=instruction, attributes=product.instruction_attributes,
                options=options, price_upper=price_upper, name=product.title, query=product.query,
                product_category=product.product_category, nouns=product.nouns, type_name=product.type_name)
