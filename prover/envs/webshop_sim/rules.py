"""The switches where webshop-sim and the ``webshop`` plugin may depart from WebShop on purpose.

Every default is WebShop's own behaviour (princeton-nlp/WebShop); the other value of each switch is
prover's earlier behaviour, kept so that runs recorded before the sims followed WebShop (2026-12-02) can be reproduced.

* ``option_match``: ``"webshop"`` compares each bought option with the goal's options as goal.py's
  ``get_reward`` hands them to ``get_option_reward``: a synthetic goal's ``(name, value)`` pairs, a human
  goal's bare values (``Goal.option_form`` says which). ``"values"`` compares bare values for every goal.
* ``type_nouns``: ``"webshop"`` divides the shared title nouns by the goal title's noun count with
  repeats, as ``get_type_reward`` does; ``"unique"`` counts each goal noun once.
* ``pages``: ``"webshop"`` renders the pages as WebShop's templates do (the ``WebShop`` heading only on
  the search page; ``Next >`` on every results page; item-page clickables list the buttons before the
  option values; the whole done page after ``Buy Now``). ``"prover-v0"`` renders them as prover did
  before: the heading on every page, ``Next >`` only while more results follow, the option values before
  ``Description``, and a five-string done page.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from prover.errors import ConfigError

CHOICES: dict[str, tuple[str, ...]] = {
    "option_match": ("webshop", "values"),
    "type_nouns": ("webshop", "unique"),
    "pages": ("webshop", "prover-v0"),
}


@dataclass(frozen=True)
class Rules:
    """One env's choice on each switch; ``Rules()`` is WebShop's behaviour throughout."""

    option_match: str = "webshop"
    type_nouns: str = "webshop"
    pages: str = "webshop"

    def __post_init__(self) -> None:
        for f in fields(self):
            if getattr(self, f.name) not in CHOICES[f.name]:
                raise ConfigError(f"webshop rules: {f.name}={getattr(self, f.name)!r}; "
                                  f"choose one of {CHOICES[f.name]}")


WEBSHOP = Rules()
