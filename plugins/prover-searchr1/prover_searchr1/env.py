"""``searchr1``: Search-R1's search-and-answer task on its real question sets and retrieval server.

Only where the questions and passages come from differs from ``searchqa-sim``: the questions are
Search-R1's (``data``: its parquet files or FlashRAG's jsonl), and every ``<search>`` is a POST to a
Search-R1 retrieval server through prover's ``HttpRetriever``. The step loop is searchqa-sim's, so
the tags, the invalid-output rule, the cap of 4 searches in 5 turns, SQuAD-normalised exact match
against the gold answers (reward 1.0 and ``won``), the prompts (default ``search-r1``) and the native
snapshots are the same, and so are Search-R1's episode rules (``prover.envs.searchqa_sim.rules``, each
with the file and function of the original): the first span is the action, an empty ``<answer>`` ends
the episode with 0, generation stops at ``</search>`` / ``</answer>``, later prompts keep the whole
response, and each document's ``contents``, exactly as the server sent it, is split at its first
newline into ``Doc i(Title: {first line}) {rest}`` (a title unquoted in the corpus stays unquoted).

Departures from Search-R1 (the switches default to the original's behaviour):

1. ``empty_action="invalid"`` (default ``"act"``): an empty ``<search>``/``<answer>`` span is a no-op.
2. ``history="action"`` (default ``"response"``): later prompts show only each action span.
3. Search-R1's scorer (qa_em.py ``extract_solution``) reads the last ``<answer>`` span anywhere in the
   decoded sequence, so a span inside a query or a document can score an episode that never answered;
   this bug is not copied: only the answer action is scored.

Not episode rules, but worth knowing: each turn's prompt is re-rendered as one chat message (Search-R1
grows one sequence), and the cap of 4 searches in 5 turns stands for Search-R1's 4 search turns plus a
last turn whose search returns nothing; either way an episode that has not answered by then scores 0.

A server that is down, too slow or speaks another schema makes ``step`` raise ``RetrievalError``, one
line naming the url, after at most ``timeout`` seconds; nothing waits forever, and a run stops with
that line rather than training on empty results. The env is as deterministic as the server:
Search-R1's (a fixed index) returns the same passages for the same query.

Tasks: ``reset(seed=s, options={"split": "train" | "test"})`` takes question ``s % n`` of that
split's file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from prover.envs.searchqa_sim.env import SPLITS, SearchqaSimEnv, Snapshot
from prover.envs.searchqa_sim.questions import Question
from prover.errors import ConfigError, ContractError
from prover.retrieval import Passage
from prover.retrieval.http import HttpRetriever

from prover_searchr1.data import SPLIT_FILES, find_file, load_questions

DEFAULT_URL = "http://127.0.0.1:8000/retrieve"  # where Search-R1's retrieval_launch.sh serves


def spaced(query: str) -> str:
    """A real retriever may rank ``X?`` and ``X`` apart, so queries are one state only up to spacing."""
    return " ".join(query.split())


@dataclass(frozen=True)
class CorpusPassage(Passage):
    """A passage that remembers its ``contents`` exactly as the server sent them, because Search-R1
    shows them split as stored: prover's ``Passage`` drops quotes that an unquoted title never had."""

    stored: str = ""

    @property
    def contents(self) -> str:
        return self.stored


class CorpusHttpRetriever(HttpRetriever):
    """``HttpRetriever`` whose passages keep the server's ``contents`` verbatim."""

    @staticmethod
    def passage_from(item: Any) -> Passage:
        plain = HttpRetriever.passage_from(item)
        doc = item["document"] if "document" in item else item  # noqa: SIM401 - item may be any JSON value
        return CorpusPassage(plain.id, plain.title, plain.text, stored=str(doc["contents"]))


class SearchR1Env(SearchqaSimEnv):
    """Search-R1 on the question files in ``data_dir`` and the retrieval server at ``url``.

    ``train_file`` / ``test_file``: names relative to ``data_dir`` (or absolute); by default the
    first of ``train.parquet``, ``train.jsonl`` (and the same for test) that exists. ``timeout``:
    seconds per retrieval call. ``max_turns``, ``max_searches``, ``topk``, ``prompt``, ``empty_action``
    (default "act") and ``history`` (default "response") as in searchqa-sim.
    """

    # The expert's turn is <search>question</search>: at most 11 tiny-tokenizer tokens on the fixture
    # questions, but 16-28 SmolLM2 tokens on NQ/HotpotQA-length ones and 23-64 under a tiny tokenizer
    # that has not seen their words, so the default 24 would cut real queries before </search>.
    train_recipe: ClassVar[dict[str, Any]] = {"rollout.sampling.max_new_tokens": 64}

    def __init__(self, *, data_dir: str | os.PathLike, url: str = DEFAULT_URL, train_file: str | None = None,
                 test_file: str | None = None, timeout: float = 10.0, max_turns: int = 5,
                 max_searches: int = 4, topk: int = 3, prompt: str = "search-r1", empty_action: str = "act",
                 history: str = "response") -> None:
        super().__init__(max_turns=max_turns, max_searches=max_searches, topk=topk, prompt=prompt,
                         empty_action=empty_action, history=history)
        folder = Path(data_dir).expanduser()
        if not folder.is_dir():
            raise ConfigError(f"searchr1: data_dir {str(folder)!r} is not a folder; point it at the "
                              "folder that holds Search-R1's train/test question files")
        files = {split: find_file(folder, split, name) for split, name in (("train", train_file),
                                                                           ("test", test_file))}
        if not any(files.values()):
            tried = ", ".join(n for names in SPLIT_FILES.values() for n in names)
            raise ConfigError(f"searchr1: no question file in {str(folder)!r} (looked for {tried}); "
                              "pass train_file / test_file")
        # read now, so that a damaged file stops the run before any rollout (cached per process)
        self.pools: dict[str, tuple[Question, ...]] = {
            split: load_questions(path, split) for split, path in files.items() if path is not None}
        self.folder, self.url = folder, url
        self.retriever = CorpusHttpRetriever(url, timeout=timeout)
        self.query_key = spaced

    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        split = options.get("split", "train")
        if split not in SPLITS:
            raise ConfigError(f"searchr1: unknown split {split!r}; choose one of {SPLITS}")
        if split not in self.pools:
            raise ConfigError(f"searchr1: no {split} question file in {str(self.folder)!r} "
                              f"(looked for {', '.join(SPLIT_FILES[split])}); pass {split}_file")
        pool = self.pools[split]
        self.tag, self.question = split, pool[seed % len(pool)]
        self.queries: tuple[str, ...] = ()
        self.seen: frozenset = frozenset()
        self.steps, self.done, self.won = 0, False, False
        return f"Question: {self.question.text}", self.step_info(True)

    def restore(self, snapshot: Any) -> None:
        """As searchqa-sim's, but the retriever stays this env's HTTP client (it holds no state)."""
        if not isinstance(snapshot, Snapshot):
            raise ContractError(f"SearchR1Env.restore() got {type(snapshot).__name__}, "
                                "expected a Snapshot from SearchR1Env.snapshot()")
        self.tag, self.question = snapshot.tag, snapshot.question
        self.queries, self.seen, self.steps = snapshot.queries, snapshot.seen, snapshot.steps
        self.done, self.won = snapshot.done, snapshot.won
        self.np_random.bit_generator.state = snapshot.rng_state
        self.set_replay_record(snapshot.replay)

    def expert_action(self) -> str | None:
        """A format oracle that knows the gold answer: search the question once, then answer it. It
        shows the tags and the search-then-answer rhythm (warm-start data, tests), not how to search."""
        self.require_reset("expert_action")
        if self.done:
            return None
        if not self.queries and self.max_searches > 0 and self.steps < self.max_turns - 1:
            return f"<search>{self.question.text}</search>"
        return f"<answer>{self.question.answers[0]}</answer>"
