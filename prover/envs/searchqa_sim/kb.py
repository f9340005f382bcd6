"""A fictional knowledge base: invented entities, typed relations, and Wikipedia-style passages.

Why fictional: a model cannot answer "Where was Ilvara Tesk born?" from memory, so reward needs
retrieval, as it does on Search-R1's NQ/HotpotQA for facts the model does not know. Why the
distractors: real Wikipedia is full of near-misses (namesakes, a city and its football club, people
sharing a surname), which is what makes the query wording and the hop to the bridge entity matter.

Entity kinds and relations: country (capital); city (in country, founded year); person (born in
city, birth year, occupation); company (founded by person, founded year, headquartered in city);
film (directed by person, release year, filmed in city). Every fact is stated in exactly one
"evidence" passage, recorded in ``KnowledgeBase.evidence``, so the oracle knows which passage a hop
needs and recall can be measured.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from prover.retrieval import Passage

_ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "kr",
           "st", "th", "tr", "vel", "mor", "cal", "sor", "hal", "quin", "jor", "ess", "orn", "yr"]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "io", "y", "au"]
_CODAS = ["", "n", "r", "s", "th", "x", "l", "m", "nd", "sk", "v", "rn"]
_CITY_PREFIX = [("Port ", ()), ("New ", ()), ("Saint ", ("St. ", "St ")), ("Fort ", ("Ft. ",)), ("", ())]
_COMPANY_SUFFIX = ["Industries", "Holdings", "Analytics", "Shipping", "Foods", "Robotics", "Textiles",
                   "Pharmaceuticals", "Motors", "Media"]
_OCCUPATIONS = ["engineer", "novelist", "architect", "chemist", "film director", "entrepreneur",
                "painter", "economist", "composer", "physician"]
_FILM_WORDS = ["Silent", "Harbor", "Winter", "Glass", "River", "Iron", "Last", "Hollow", "Amber",
               "Northern", "Paper", "Crimson", "Quiet", "Salt", "Echo", "Lantern"]
_FILM_NOUNS = ["Tide", "Garden", "Letters", "Crossing", "Season", "Orchard", "Signal", "Bridge",
               "Archive", "Summer", "Machine", "Voyage"]
_GENRES = ["drama", "comedy", "thriller", "documentary", "science fiction film", "historical epic"]


@dataclass(frozen=True)
class Entity:
    id: str
    kind: str  # country | city | person | company | film
    name: str
    aliases: tuple[str, ...]  # every accepted surface form of the name, the name first
    facts: dict = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class KnowledgeBase:
    tag: str
    entities: dict[str, Entity]
    passages: tuple[Passage, ...]
    evidence: dict[tuple[str, str], str]  # (entity id, relation) -> id of the passage stating it

    def of_kind(self, kind: str) -> list[Entity]:
        return [e for e in self.entities.values() if e.kind == kind]


def _a(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


class _Names:
    """Unique pronounceable invented words, so no name collides by accident (only on purpose)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng, self.used = rng, set()

    def word(self, syllables: tuple[int, int] = (2, 3)) -> str:
        while True:
            n = self.rng.randint(*syllables)
            w = "".join(self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) for _ in range(n))
            w = (w + self.rng.choice(_CODAS)).capitalize()
            if w not in self.used and 4 <= len(w) <= 11:
                self.used.add(w)
                return w


def generate(tag: str, n_countries: int = 5, n_cities: int = 12, n_people: int = 24,
             n_companies: int = 12, n_films: int = 10) -> KnowledgeBase:
    """The knowledge base named ``tag`` (e.g. "train-3"); the same tag always gives the same base."""
    rng = random.Random(f"searchqa-sim/{tag}")
    names = _Names(rng)
    ents: dict[str, Entity] = {}

    def add(kind: str, name: str, aliases: tuple[str, ...] = (), **facts) -> Entity:
        e = Entity(f"{kind}{sum(x.kind == kind for x in ents.values())}", kind, name, (name, *aliases), facts)
        ents[e.id] = e
        return e

    countries = [add("country", f"Republic of {w}", (w,)) if rng.random() < 0.4 else add("country", w)
                 for w in (names.word((2, 2)) for _ in range(n_countries))]
    cities = []
    for i in range(n_cities):
        prefix, short = rng.choice(_CITY_PREFIX)
        root = names.word((1, 2))
        aliases = tuple(s + root for s in short)
        country = countries[i % n_countries]
        cities.append(add("city", prefix + root, aliases, country=country.id, year=rng.randint(900, 1850)))
    for country in countries:  # the capital is the country's first city
        country.facts["capital"] = next(c.id for c in cities if c.facts["country"] == country.id)
    surnames = [names.word((1, 2)) for _ in range(max(3, n_people // 3))]  # shared on purpose
    people = []
    for _ in range(n_people):
        first, last, mid = names.word((1, 2)), rng.choice(surnames), rng.choice("ABCDEFGHJKLMNPRSTW")
        people.append(add("person", f"{first} {mid}. {last}", (f"{first} {last}",),
                          born_in=rng.choice(cities).id, year=rng.randint(1890, 1990),
                          job=rng.choice(_OCCUPATIONS), last=last))
    companies = []
    for _ in range(n_companies):
        root = rng.choice([names.word((1, 2)), rng.choice(surnames), rng.choice(cities).name.split()[-1]])
        name = f"{root} {rng.choice(_COMPANY_SUFFIX)}"
        while any(c.name == name for c in companies):
            name = f"{names.word((1, 2))} {rng.choice(_COMPANY_SUFFIX)}"
        companies.append(add("company", name, (root,) if root != name else (),
                             founder=rng.choice(people).id, year=rng.randint(1900, 2015),
                             hq=rng.choice(cities).id))
    films = []
    for _ in range(n_films):
        title = f"The {rng.choice(_FILM_WORDS)} {rng.choice(_FILM_NOUNS)}"
        while any(f.name == title for f in films):
            title = f"{rng.choice(_FILM_WORDS)} {rng.choice(_FILM_NOUNS)}"
        films.append(add("film", title, director=rng.choice(people).id, year=rng.randint(1930, 2020),
                         place=rng.choice(cities).id, star=rng.choice(people).id, genre=rng.choice(_GENRES)))
    return _write(tag, ents, rng, surnames, names)


def _write(tag: str, ents: dict[str, Entity], rng: random.Random, surnames: list[str],
           names: _Names) -> KnowledgeBase:
    """Render the passages; each ``say(entity, relation, ...)`` marks the passage as that fact's evidence."""
    passages: list[Passage] = []
    evidence: dict[tuple[str, str], str] = {}

    def say(title: str, text: str, *facts: tuple[Entity, str]) -> None:
        pid = f"{tag}-{len(passages)}"
        passages.append(Passage(pid, title, text))
        for ent, rel in facts:
            evidence[(ent.id, rel)] = pid

    def n(eid: str) -> str:
        return ents[eid].name

    for e in list(ents.values()):
        f = e.facts
        if e.kind == "country":
            say(e.name, f"{e.name} is a sovereign state. Its capital and largest city is {n(f['capital'])}, "
                        f"which is also the seat of its parliament.", (e, "capital"))
            cities = [c.name for c in ents.values() if c.kind == "city" and c.facts["country"] == e.id]
            say(e.name, f"The economy of {e.name} rests on trade and light industry. Major urban centres "
                        f"include {', '.join(cities)}.")
        elif e.kind == "city":
            say(e.name, f"{e.name} is a city in {n(f['country'])}. It lies on a river plain and is known "
                        f"for its markets and old stone bridges.", (e, "country"))
            say(e.name, f"{e.name} was founded in {f['year']} as a trading post. Its population grew "
                        f"rapidly in the industrial era.", (e, "year"))
            if rng.random() < 0.5:  # a namesake: same name, another type, another country and year
                other = rng.choice([c for c in ents.values() if c.kind == "country"])
                say(f"{e.name} F.C.", f"{e.name} F.C. is a football club founded in {rng.randint(1880, 1990)}. "
                                      f"It plays its home games in {other.name}.")
        elif e.kind == "person":
            born = ents[f["born_in"]]
            say(e.name, f"{e.name} (born {f['year']}) is {_a(f['job'])}. {e.name.split()[0]} was born in "
                        f"{born.name} and studied at the local academy.",
                (e, "born_in"), (e, "year"))
            moved = rng.choice([c for c in ents.values() if c.kind == "city"])
            say(e.name, f"As {_a(f['job'])}, {e.aliases[1]} worked for many years in {moved.name} and "
                        f"received several national awards.")
            if rng.random() < 0.4:  # a relative sharing the surname, born elsewhere
                kin = f"{names.word((1, 2))} {f['last']}"
                city = rng.choice([c for c in ents.values() if c.kind == "city"])
                say(kin, f"{kin} (born {rng.randint(1880, 1995)}) is {_a(rng.choice(_OCCUPATIONS))} born in "
                         f"{city.name}. {kin.split()[0]} is a relative of {e.aliases[1]}.")
        elif e.kind == "company":
            say(e.name, f"{e.name} is a company founded in {f['year']} by {n(f['founder'])}, who served as "
                        f"its first chief executive.", (e, "founder"), (e, "year"))
            say(e.name, f"{e.name} has its headquarters in {n(f['hq'])}. The company employs thousands of "
                        f"people across several countries.", (e, "hq"))
        elif e.kind == "film":
            say(e.name, f"{e.name} is a {f['year']} {f['genre']} directed by {n(f['director'])}. It starred "
                        f"{n(f['star'])}.", (e, "director"), (e, "year"))
            say(e.name, f"Filming of {e.name} took place in {n(f['place'])}. Critics praised its score "
                        f"and photography.", (e, "place"))
    return KnowledgeBase(tag, ents, tuple(passages), evidence)
