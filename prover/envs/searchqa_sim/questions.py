"""Questions over a knowledge base, their hop chains, and Search-R1's exact-match reward.

Three kinds, mirroring the datasets Search-R1 trains and tests on: ``single`` (one fact, NQ-like),
``bridge`` (the answer to hop 1 names the entity of hop 2, HotpotQA-like) and ``comparison`` (two
independent lookups, then a choice). Each question carries its hop chain: the oracle's queries and
the passage each one must surface, which is what ``expert_action`` follows and recall measures.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass

from prover.envs.searchqa_sim.kb import Entity, KnowledgeBase

KINDS = ("single", "bridge", "comparison")
DATA_SOURCE = {"single": "nq-like", "bridge": "hotpotqa-like", "comparison": "hotpotqa-like"}
# the words the oracle adds to an entity's name so BM25 finds the passage that states the relation
_REL_WORDS = {("person", "born_in"): "born", ("person", "year"): "born", ("city", "country"): "city in",
              ("company", "founder"): "founded by", ("company", "year"): "founded in",
              ("company", "hq"): "headquarters", ("film", "director"): "directed by",
              ("film", "year"): "film", ("country", "capital"): "capital"}


@dataclass(frozen=True)
class Hop:
    query: str  # what the oracle searches for
    passage_id: str  # the passage that states the fact this hop needs


@dataclass(frozen=True)
class Question:
    qid: str
    text: str
    kind: str
    answers: tuple[str, ...]  # gold aliases; exact match against any one wins
    hops: tuple[Hop, ...]
    source: str = ""  # Search-R1's data_source of a question loaded from a file; "" derives it from kind

    @property
    def data_source(self) -> str:
        return self.source or DATA_SOURCE[self.kind]


def normalize_answer(text: str) -> str:
    """SQuAD normalisation as in Search-R1's qa_em.py: lower-case, drop punctuation, drop the
    articles a/an/the, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(prediction: str, answers: tuple[str, ...] | list[str]) -> bool:
    pred = normalize_answer(prediction)
    return any(pred == normalize_answer(a) for a in answers)


def _hop(kb: KnowledgeBase, ent: Entity, rel: str) -> Hop:
    return Hop(f"{ent.name} {_REL_WORDS[(ent.kind, rel)]}", kb.evidence[(ent.id, rel)])


def questions(kb: KnowledgeBase) -> dict[str, list[Question]]:
    """Every question the base supports, grouped by kind, in a fixed order (the ids say where from)."""
    E = kb.entities
    out: dict[str, list[Question]] = {k: [] for k in KINDS}

    def ask(kind: str, text: str, answer: Entity | int, hops: list[Hop]) -> None:
        answers = (str(answer),) if isinstance(answer, int) else answer.aliases
        qid = f"{kb.tag}/{kind}/{len(out[kind])}"
        out[kind].append(Question(qid, text, kind, answers, tuple(hops)))

    for p in kb.of_kind("person"):
        ask("single", f"Where was {p.name} born?", E[p.facts["born_in"]], [_hop(kb, p, "born_in")])
        city = E[p.facts["born_in"]]
        ask("bridge", f"In which country was {p.name} born?", E[city.facts["country"]],
            [_hop(kb, p, "born_in"), _hop(kb, city, "country")])
    for c in kb.of_kind("city"):
        ask("single", f"In which country is {c.name}?", E[c.facts["country"]], [_hop(kb, c, "country")])
    for c in kb.of_kind("company"):
        founder, hq = E[c.facts["founder"]], E[c.facts["hq"]]
        ask("single", f"Who founded {c.name}?", founder, [_hop(kb, c, "founder")])
        ask("single", f"In which city is {c.name} headquartered?", hq, [_hop(kb, c, "hq")])
        ask("single", f"In what year was {c.name} founded?", c.facts["year"], [_hop(kb, c, "year")])
        ask("bridge", f"Where was the founder of {c.name} born?", E[founder.facts["born_in"]],
            [_hop(kb, c, "founder"), _hop(kb, founder, "born_in")])
        ask("bridge", f"In which country is the headquarters of {c.name}?", E[hq.facts["country"]],
            [_hop(kb, c, "hq"), _hop(kb, hq, "country")])
    for f in kb.of_kind("film"):
        director = E[f.facts["director"]]
        ask("single", f"Who directed the film {f.name}?", director, [_hop(kb, f, "director")])
        ask("bridge", f"Where was the director of {f.name} born?", E[director.facts["born_in"]],
            [_hop(kb, f, "director"), _hop(kb, director, "born_in")])
        ask("bridge", f"In what year was the director of {f.name} born?", director.facts["year"],
            [_hop(kb, f, "director"), _hop(kb, director, "year")])
    for kind, verb in (("company", "was founded earlier"), ("person", "was born first")):
        ents = kb.of_kind(kind)
        for a, b in zip(ents[0::2], ents[1::2]):
            if a.facts["year"] == b.facts["year"]:
                continue  # a tie has no answer
            first = a if a.facts["year"] < b.facts["year"] else b
            who = "Which company" if kind == "company" else "Who"
            ask("comparison", f"{who} {verb}, {a.name} or {b.name}?", first,
                [_hop(kb, a, "year"), _hop(kb, b, "year")])
    return out
