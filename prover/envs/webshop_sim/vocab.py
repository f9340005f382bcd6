"""The word lists the catalog is drawn from: five WebShop-like categories, their product types,
attribute vocabularies, option schemas and price ranges, and the text templates.

Rules these lists keep (tests check them): within a type no attribute is a substring of another or
fuzzy-matches it, and within an option no two values match under WebShop's option matcher, so that a
near-miss distractor really misses. Each type's words are its nouns (for ``r_type``).
"""

from __future__ import annotations

from typing import NamedTuple


class ProductType(NamedTuple):
    category: str
    subcategory: str
    name: str  # the head phrase, e.g. "running shoes"; its words are the type's nouns
    attributes: tuple[str, ...]
    options: tuple[str, ...]  # option names, in display order
    price: tuple[float, float]


# The colour words the scorer's ``normalize_color`` looks for (ours, not WebShop's list: reward.py, departure 3)
# and the catalog's default ``Catalog.colors``: a word list, so it lives here with the others.
COLORS = ("beige", "black", "blue", "brown", "burgundy", "charcoal", "coral", "cream", "gold", "gray",
          "green", "grey", "ivory", "khaki", "lavender", "maroon", "navy", "olive", "orange", "pink",
          "purple", "red", "silver", "tan", "teal", "white", "yellow")

OPTION_VALUES: dict[str, tuple[str, ...]] = {
    "color": ("black", "white", "navy", "red", "green", "grey", "pink", "beige", "purple", "yellow",
              "brown", "teal"),
    "size": ("small", "medium", "large", "xl", "2xl"),
    "shoe size": ("7", "8", "9", "10", "11", "12"),
    "bed size": ("twin", "full", "queen", "king"),
    "pack": ("2 pack", "4 pack", "6 pack", "10 pack"),
    "flavor": ("vanilla", "chocolate", "peanut butter", "strawberry", "salted caramel", "cinnamon",
               "blueberry", "coconut"),
}

TYPES: tuple[ProductType, ...] = (
    ProductType("fashion", "clothing", "hoodie",
                ("fleece lined", "machine washable", "relaxed fit", "long sleeve", "zip up"),
                ("color", "size"), (18, 60)),
    ProductType("fashion", "clothing", "rain jacket",
                ("waterproof", "hooded", "packable", "breathable", "reflective trim"),
                ("color", "size"), (30, 120)),
    ProductType("fashion", "shoes", "running shoes",
                ("lightweight", "slip resistant", "memory foam", "wide toe box", "knit upper"),
                ("color", "shoe size"), (35, 140)),
    ProductType("fashion", "shoes", "hiking boots",
                ("ankle support", "vibram sole", "insulated", "leather upper", "quick lacing"),
                ("color", "shoe size"), (50, 190)),
    ProductType("beauty", "skin care", "face moisturizer",
                ("fragrance free", "hyaluronic acid", "sensitive skin", "non comedogenic", "spf 30"),
                ("pack",), (8, 45)),
    ProductType("beauty", "makeup", "lipstick",
                ("long lasting", "cruelty free", "matte finish", "vegan", "hydrating"),
                ("color", "pack"), (5, 30)),
    ProductType("beauty", "hair care", "shampoo",
                ("sulfate free", "color safe", "dandruff control", "tea tree", "argan oil"),
                ("pack",), (6, 35)),
    ProductType("electronics", "audio", "wireless earbuds",
                ("noise cancelling", "water resistant", "long battery life", "touch control",
                 "charging case"),
                ("color",), (20, 150)),
    ProductType("electronics", "accessories", "phone case",
                ("shockproof", "slim", "kickstand", "card holder", "raised edges"),
                ("color", "pack"), (6, 35)),
    ProductType("electronics", "computers", "wireless mouse",
                ("ergonomic", "silent click", "rechargeable", "usb receiver", "adjustable dpi"),
                ("color",), (10, 60)),
    ProductType("furniture", "living room", "throw pillow cover",
                ("velvet", "hidden zipper", "farmhouse", "double sided", "linen"),
                ("color", "size"), (9, 40)),
    ProductType("furniture", "bedroom", "bed sheet set",
                ("deep pocket", "microfiber", "wrinkle free", "cooling", "hypoallergenic"),
                ("color", "bed size"), (20, 110)),
    ProductType("furniture", "office", "desk lamp",
                ("dimmable", "usb port", "eye caring", "adjustable arm", "clamp mount"),
                ("color",), (15, 80)),
    ProductType("food", "snacks", "protein bar",
                ("gluten free", "high protein", "low sugar", "keto friendly", "non gmo"),
                ("flavor", "pack"), (10, 45)),
    ProductType("food", "beverages", "cold brew coffee",
                ("organic", "ready to drink", "unsweetened", "low acid", "fair trade"),
                ("flavor", "pack"), (12, 50)),
    ProductType("food", "snacks", "trail mix",
                ("roasted nuts", "dark chocolate chips", "resealable bag", "no added salt", "kosher"),
                ("flavor", "pack"), (8, 40)),
)

BRANDS = ("Norvale", "Kestrix", "Bramlow", "Quillon", "Ostera", "Vantori", "Helmbrook", "Zephra",
          "Calder", "Miravon", "Tessaly", "Orbeck", "Lunaro", "Fennick", "Duvall", "Pexa")

# Titles mention the type and some attributes; {attrs} is a space-joined list.
TITLE_TEMPLATES = ("{brand} {attrs} {type}", "{brand} {type} - {attrs}", "{attrs} {type} by {brand}")
DESCRIPTION_TEMPLATES = (
    "This {type} from {brand} is {attrs}. Made to hold up to daily use.",
    "Meet the {brand} {type}: {attrs}, and backed by a one year warranty.",
    "A {type} that is {attrs}. {brand} tests every unit before it ships.",
)
BULLET_TEMPLATES = ("{Attr}: a detail our customers ask for.", "Built {attr} for everyday routines.",
                    "{Attr} design.")
REVIEW_TEMPLATES = ("Rating 5: the {attr} part is exactly as described.", "Rating 4: good {type}, "
                    "arrived on time.", "Rating 3: decent, though I expected more for the price.")
INSTRUCTION_TEMPLATES = (
    "i am looking for {a}{attrs} {type} with {opts}, and price lower than {price:.2f} dollars",
    "i need {a}{type} that is {attrs}, with {opts}, and price lower than {price:.2f} dollars",
    "find me {a}{attrs} {type} with {opts}, and price lower than {price:.2f} dollars",
    "i want to buy {a}{type}, {attrs}, with {opts}, and price lower than {price:.2f} dollars",
)
