"""``searchqa-sim``: Search-R1's search-and-answer loop over a generated, fictional knowledge base.

The agent writes ``<search>query</search>`` and gets ``<information>`` with the top-3 passages in
Search-R1's ``Doc i(Title: "T") text`` form, from a real retriever over the base's passages (BM25 by
default; ``retriever="dense"`` or ``"pyserini"`` pick another ``prover.retrieval`` backend); or it writes
``<answer>text</answer>``, which ends the episode with reward 1.0 (and ``won``) when the answer
exact-matches a gold alias after SQuAD normalisation, else 0.0. Text with neither tag is a no-op
(``is_action_valid`` False) that still uses a turn, as in Search-R1 where every generation counts.
Default cap: 4 searches and 5 turns in all (Search-R1's nq_hotpotqa ``max_turns=4``, plus the answer).

The episode rules are Search-R1's, set out with their sources in ``rules``: the first action span
counts, an empty ``<answer></answer>`` ends the episode with 0 and an empty ``<search></search>``
searches for "" (switch ``empty_action``, default ``"act"``; ``"invalid"`` makes either a no-op),
generation stops at ``</search>`` / ``</answer>``, later prompts keep the whole response (switch
``history``, default ``"response"``; ``"action"`` shows only the span), and documents are shown as
Search-R1's ``_passages2string`` shows their stored ``contents``. Only the answer action is scored:
Search-R1's scorer bug of reading any ``<answer>`` span in the sequence is not copied.

Tasks: ``reset(seed=s)`` uses knowledge base ``s % n_kbs`` of the split and draws a question kind,
then a question, from the seeded RNG. Train and test bases come from disjoint generator seeds
("train-i" vs "test-i"), so no test entity or fact is ever seen in training. Each base is built
and indexed once per process (and the index once per machine, in the retrieval disk cache). Many
bases (default 200) matter for learning: on a few, a small policy memorises their names and answers
instead of learning to search and read.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from prover.envs.base import TextEnv
from prover.envs.searchqa_sim.kb import KnowledgeBase, generate
from prover.envs.searchqa_sim.prompts import PRESETS
from prover.envs.searchqa_sim.questions import KINDS, Question, exact_match, questions
from prover.envs.searchqa_sim.rules import EMPTY_ACTIONS, HISTORIES, first_action, information
from prover.errors import ConfigError, ContractError
from prover.retrieval import Retriever, check_backend, make_retriever

SPLITS = ("train", "test")
INVALID = ("Invalid action. To search, put the query between <search> and </search>. To give the "
           "final answer, put it between <answer> and </answer>. Try again.")
NO_SEARCHES = "No searches left. Give the final answer between <answer> and </answer>."
ANSWERED = "Answer received."

_BASES: dict[tuple[str, str, str], tuple[KnowledgeBase, dict[str, list[Question]], Retriever]] = {}


def load_base(tag: str, cache_dir: str | Path | bool | None = None, retriever: str = "bm25"):
    """The knowledge base ``tag``, its questions and its ``retriever`` index, built once per process."""
    key = (tag, str(cache_dir), retriever)
    if key not in _BASES:
        kb = generate(tag)
        _BASES[key] = (kb, questions(kb), make_retriever(retriever, kb.passages, cache_dir=cache_dir))
    return _BASES[key]


def canonical_query(query: str) -> str:
    """Queries that BM25 cannot tell apart (case, punctuation, spacing) are one state."""
    return " ".join(re.findall(r"\w+", query.lower()))


def spaced_query(query: str) -> str:
    """A dense or Lucene retriever can tell punctuation apart, so only spacing is normalised."""
    return " ".join(query.split())


@dataclass(frozen=True)
class Snapshot:
    """A native snapshot: every field is immutable, so taking one is a tuple copy."""

    question: Question
    tag: str
    queries: tuple[str, ...]
    seen: frozenset
    steps: int
    done: bool
    won: bool
    rng_state: dict
    replay: tuple


class SearchqaSimEnv(TextEnv):
    """Search-R1's interface on a fictional knowledge base; see the module docstring."""

    native_snapshot = True
    # The tiny policy learns single-hop questions from a long warm start (held-out 0.16 after it, 0.22
    # after 12 GRPO steps, seed 0); on bridge and comparison questions it stays at 0.
    train_recipe: ClassVar[dict[str, Any]] = {"env.kwargs.question_types": ["single"], "warmstart.episodes": 3000,
                                              "warmstart.epochs": 3}

    def __init__(self, *, question_types: Sequence[str] = KINDS, n_kbs: int = 200, max_turns: int = 5,
                 max_searches: int = 4, topk: int = 3, prompt: str = "compact",
                 cache_dir: str | Path | None = None, retriever: str = "bm25", empty_action: str = "act",
                 history: str = "response") -> None:
        question_types = (question_types,) if isinstance(question_types, str) else tuple(question_types)
        bad = sorted(set(question_types) - set(KINDS))
        if bad or not question_types:
            raise ConfigError(f"searchqa-sim: question_types {bad or '()'} invalid; choose from {KINDS}")
        self._check_rules(prompt, empty_action, history)
        for name, value in (("n_kbs", n_kbs), ("max_turns", max_turns), ("topk", topk)):
            if value < 1:
                raise ConfigError(f"searchqa-sim: {name}={value} must be at least 1")
        if max_searches < 0:
            raise ConfigError(f"searchqa-sim: max_searches={max_searches} must be 0 or more")
        check_backend(retriever)  # an unknown name or a missing extra fails here, not at the first reset
        self.retriever_name = retriever
        # the state key must separate queries whose results may differ under this backend
        self.query_key = canonical_query if retriever == "bm25" else spaced_query
        self.question_types, self.n_kbs, self.topk = question_types, n_kbs, topk
        self.max_turns, self.max_searches, self.cache_dir = max_turns, max_searches, cache_dir
        self.empty_action = empty_action
        # the whole episode fits in the history window, so the transcript always shows the question
        self.agent_spec = dataclasses.replace(PRESETS[prompt], history_window=max_turns, history=history)
        self.question: Question | None = None

    @staticmethod
    def _check_rules(prompt: str, empty_action: str, history: str) -> None:
        for name, value, choices in (("prompt", prompt, sorted(PRESETS)), ("empty_action", empty_action,
                                     EMPTY_ACTIONS), ("history", history, HISTORIES)):
            if value not in choices:
                raise ConfigError(f"searchqa-sim: unknown {name} {value!r}; choose one of {tuple(choices)}")

    # -- the gym API -----------------------------------------------------------------------------
    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        split = options.get("split", "train")
        if split not in SPLITS:
            raise ConfigError(f"searchqa-sim: unknown split {split!r}; choose one of {SPLITS}")
        self.tag = f"{split}-{seed % self.n_kbs}"
        _kb, by_kind, self.retriever = load_base(self.tag, self.cache_dir, self.retriever_name)
        kind = self.question_types[int(self.np_random.integers(len(self.question_types)))]
        pool = by_kind[kind]
        self.question = pool[int(self.np_random.integers(len(pool)))]
        self.queries: tuple[str, ...] = ()
        self.seen: frozenset = frozenset()
        self.steps, self.done, self.won = 0, False, False
        return f"Question: {self.question.text}", self.step_info(True)

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        tag, text = first_action(action) or (None, "")
        reward, valid = 0.0, tag is not None and (bool(text) or self.empty_action == "act")
        if not valid:
            obs = INVALID
        elif tag == "answer":
            self.done, self.won = True, exact_match(text, self.question.answers)
            reward, obs = (1.0 if self.won else 0.0), ANSWERED
        elif len(self.queries) >= self.max_searches:
            obs, valid = NO_SEARCHES, False
        else:
            found = self.retriever.search(text, self.topk)
            self.queries += (self.query_key(text),)
            self.seen = self.seen | {p.id for p in found}
            obs = information([p.contents for p in found])  # each as its corpus stores it
        self.steps += 1
        truncated = not self.done and self.steps >= self.max_turns
        return obs, reward, self.done, truncated, self.step_info(valid)

    def step_info(self, valid: bool) -> dict:
        """The info dict of a reset (``valid=True``) or a step; public for subclasses (prover-searchr1)."""
        q = self.question
        return {"won": self.won, "is_action_valid": valid, "task": q.text, "task_id": q.qid,
                "task_type": q.kind, "data_source": q.data_source,
                "searches_left": self.max_searches - len(self.queries)}

    def gold(self) -> str:
        self.require_reset("gold")
        return "gold answer (any alias): " + " | ".join(self.question.answers)

    def state_key(self) -> Hashable:
        """The question and the queries so far, as far as the retriever tells them apart (they fix
        what was retrieved); the turn count is left out so that GiGPO can group equal states
        reached at different steps."""
        self.require_reset("state_key")
        return (self.question.qid, self.queries, self.done)

    # -- snapshots -------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        self.require_reset("snapshot")
        return Snapshot(self.question, self.tag, self.queries, self.seen, self.steps, self.done, self.won,
                        self.np_random.bit_generator.state,
                        self.replay_record())

    def restore(self, snapshot: object) -> None:
        if not isinstance(snapshot, Snapshot):
            raise ContractError(f"SearchqaSimEnv.restore() got {type(snapshot).__name__}, "
                                "expected a Snapshot from SearchqaSimEnv.snapshot()")
        self.tag, self.question = snapshot.tag, snapshot.question
        _, _, self.retriever = load_base(self.tag, self.cache_dir, self.retriever_name)
        self.queries, self.seen, self.steps = snapshot.queries, snapshot.seen, snapshot.steps
        self.done, self.won = snapshot.done, snapshot.won
        self.np_random.bit_generator.state = snapshot.rng_state
        self.set_replay_record(snapshot.replay)

    # -- the oracle ------------------------------------------------------------------------------
    def expert_action(self) -> str | None:
        """The oracle hop chain, grounded in what retrieval returned: search each hop's query (the
        first entity, then the bridge entity) until its evidence passage has been shown, then answer
        with the gold name. If a hop's query did not surface its passage, or turns run out, the
        expert does not know and answers "unknown", so its success rate measures the retriever."""
        self.require_reset("expert_action")
        if self.done:
            return None
        turns_left = self.max_turns - self.steps
        for hop in self.question.hops:
            if hop.passage_id in self.seen:
                continue
            tried = self.query_key(hop.query) in self.queries
            if tried or turns_left <= 1 or len(self.queries) >= self.max_searches:
                return "<answer>unknown</answer>"
            return f"<search>{hop.query}</search>"
        return f"<answer>{self.question.answers[0]}</answer>"

    def require_reset(self, what: str) -> None:
        """ContractError unless a question is set: ``what`` (a method name) was called before reset()."""
        if self.question is None:
            raise ContractError(f"SearchqaSimEnv.{what}() called before reset()")
