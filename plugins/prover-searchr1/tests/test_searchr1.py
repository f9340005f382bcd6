"""prover-searchr1 plays Search-R1's question files against a real retrieval server on 127.0.0.1.

The server below speaks Search-R1's schema (POST /retrieve {"queries", "topk", "return_scores"} ->
{"result": [[{"document": {"id", "contents"}, "score"}]]}) over a corpus of rows in wiki-18's jsonl
layout ({"id", "contents"}; five passages by default); it ranks by the number of shared words, ties in
corpus order, so it is deterministic.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from prover.envs import check_env, make_env
from prover.envs.searchqa_sim.prompts import PRESETS
from prover.errors import ConfigError, RetrievalError

from prover_searchr1 import SearchR1Env

PASSAGES = [
    ("d0", "Velmora", "Velmora is a port city in Dravia, famous for its lighthouse."),
    ("d1", "Orsk Textiles", "Orsk Textiles is a company founded in 1931 by Ilsa Korven."),
    ("d2", "Ilsa Korven", "Ilsa Korven was born in Velmora and became an engineer."),
    ("d3", "The Amber Tide", "The Amber Tide is a 1977 drama directed by Tomas Reyl."),
    ("d4", "Dravia", "Dravia is a sovereign state whose capital is Halvik."),
]
CORPUS = [{"id": pid, "contents": f'"{title}"\n{text}'} for pid, title, text in PASSAGES]  # wiki-18's layout
TRAIN = [  # FlashRAG's jsonl rows; the first and third take data_source from the folder name ("nq")
    {"id": "train_0", "question": "who founded orsk textiles",
     "golden_answers": ["Ilsa Korven", "I. Korven"]},
    {"id": "train_1", "question": "Where was Ilsa Korven born?", "golden_answers": ["Velmora"],
     "data_source": "hotpotqa"},
    {"id": "train_2", "question": "who directed the amber tide", "golden_answers": ["Tomas Reyl"]},
]
PREFIX = "Search when you need to, then answer inside <answer></answer>. Question: "


def words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


class RetrievalServer:
    """A real HTTP server in a thread over ``corpus`` (rows as in wiki-18's jsonl). ``requests`` records
    every body; ``delay`` slows replies."""

    def __init__(self, corpus: list[dict] | None = None) -> None:
        owner = self
        self.corpus = CORPUS if corpus is None else corpus
        self.requests: list[dict] = []
        self.delay = 0.0

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # the stdlib's name, hence not snake_case
                if self.path != "/retrieve":
                    self.send_error(404)
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests.append(body)
                time.sleep(owner.delay)
                result = [owner.rank(q, body["topk"]) for q in body["queries"]]
                out = json.dumps({"result": result}).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(out)))
                    self.end_headers()
                    self.wfile.write(out)
                except OSError:  # the client gave up waiting (the timeout test)
                    pass

            def log_message(self, *args):  # keep the test output clean
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/retrieve"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def rank(self, query: str, k: int) -> list[dict]:
        scored = [(len(words(query) & words(doc["contents"])), -i) for i, doc in enumerate(self.corpus)]
        top = sorted(scored, reverse=True)[:k]  # most shared words first, ties in corpus order
        return [{"document": self.corpus[-neg_i], "score": float(score)} for score, neg_i in top]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    srv = RetrievalServer()
    yield srv
    srv.close()


def write_jsonl(path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def search_r1_row(i: int, question: str, answers: list[str], source: str) -> dict:
    """A row as Search-R1's qa_search_*_merge.py writes it (source columns kept)."""
    return {"id": f"test_{i}", "question": question, "golden_answers": answers, "data_source": source,
            "prompt": [{"role": "user", "content": PREFIX + question + "\n"}], "ability": "fact-reasoning",
            "reward_model": {"style": "rule", "ground_truth": {"target": answers}},
            "extra_info": {"split": "test", "index": i}}


def write_parquet(path, rows) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq  # after the importorskip: pyarrow is optional

    pq.write_table(pa.Table.from_pylist(rows), path)


TEST = [search_r1_row(0, "What is the capital of Dravia?", ["Halvik"], "hotpotqa"),
        search_r1_row(1, "In which country is Velmora?", ["Dravia", "Republic of Dravia"], "nq")]


@pytest.fixture
def data_dir(tmp_path):
    """jsonl only, so that everything but the parquet test runs without pyarrow."""
    folder = tmp_path / "nq"
    write_jsonl(folder / "train.jsonl", TRAIN)
    write_jsonl(folder / "test.jsonl", TEST)
    return folder


def env_for(data_dir, url, **kwargs) -> SearchR1Env:
    return make_env("searchr1", data_dir=str(data_dir), url=url, **kwargs)


# -- the contract --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["searchr1", "searchr1-v0"])
def test_check_env_passes_on_the_entry_point_env(data_dir, server, name):
    env = make_env(name, data_dir=str(data_dir), url=server.url)
    assert isinstance(env, SearchR1Env)
    check_env(env, seeds=(0, 1, 2))


def test_prompt_and_tags_are_searchqa_sims(data_dir, server):
    spec = env_for(data_dir, server.url).agent_spec
    assert spec.first_template == PRESETS["search-r1"].first_template
    assert spec.raw_action_tags == ("search", "answer") and spec.stop == ("</search>", "</answer>")
    parsed = spec.parse("<think>hmm</think> <search>Orsk Textiles</search>")
    assert parsed.action == "<think>hmm</think> <search>Orsk Textiles</search>"  # the whole response
    spec = env_for(data_dir, server.url, history="action").agent_spec
    parsed = spec.parse("<think>hmm</think> <search>Orsk Textiles</search>")
    assert parsed.action == "<search>Orsk Textiles</search>"


def test_snapshot_restore_replays_searches_exactly(data_dir, server):
    env = env_for(data_dir, server.url)
    env.reset(seed=1)
    env.step("<search>Ilsa Korven</search>")
    snap, key = env.snapshot(), env.state_key()
    tail = ("<search>Velmora city</search>", "<answer>Velmora</answer>")
    first = [env.step(a)[:4] + (env.state_key(),) for a in tail]
    env.reset(seed=2)
    env.restore(snap)
    assert env.state_key() == key
    second = [env.step(a)[:4] + (env.state_key(),) for a in tail]
    assert first == second and first[-1][1] == 1.0
    assert [r["queries"] for r in server.requests] == [["Ilsa Korven"], ["Velmora city"], ["Velmora city"]]


# -- playing -----------------------------------------------------------------------------------------
def test_a_correct_answer_after_a_search_wins(data_dir, server):
    env = env_for(data_dir, server.url)
    obs, info = env.reset(seed=0)
    assert obs == "Question: who founded orsk textiles?"  # Search-R1 appends the question mark
    assert info["data_source"] == "nq" and info["task_id"] == "train/0"
    obs, reward, term, trunc, info = env.step("<think>look</think><search>Orsk Textiles founder</search>")
    assert server.requests == [{"queries": ["Orsk Textiles founder"], "topk": 3, "return_scores": True}]
    assert obs.startswith('<information>Doc 1(Title: "Orsk Textiles") Orsk Textiles is a company founded '
                          'in 1931 by Ilsa Korven.\nDoc 2(Title: ') and obs.endswith("</information>")
    assert (reward, term, trunc, info["is_action_valid"]) == (0.0, False, False, True)
    assert info["searches_left"] == 3
    _, reward, term, _, info = env.step("<answer> the ILSA korven. </answer>")  # SQuAD-normalised match
    assert (reward, term, info["won"]) == (1.0, True, True)


def test_a_wrong_answer_loses(data_dir, server):
    env = env_for(data_dir, server.url)
    env.reset(seed=0)
    env.step("<search>Orsk Textiles</search>")
    _, reward, term, _, info = env.step("<answer>Tomas Reyl</answer>")
    assert (reward, term, info["won"]) == (0.0, True, False)


def test_the_turn_and_search_caps(data_dir, server):
    env = env_for(data_dir, server.url, max_turns=3, max_searches=1)
    env.reset(seed=2)
    assert env.step("<search>Amber Tide</search>")[4]["is_action_valid"]
    obs, _, term, trunc, info = env.step("<search>Tomas Reyl</search>")
    assert obs.startswith("No searches left") and not info["is_action_valid"] and not (term or trunc)
    _, reward, term, trunc, info = env.step("no tags at all")
    assert (reward, term, trunc, info["won"]) == (0.0, False, True, False)
    assert len(server.requests) == 1


@pytest.mark.parametrize("split", ["train", "test"])
def test_expert_wins_every_question(data_dir, server, split):
    env = env_for(data_dir, server.url)
    for seed in range(len(env.pools[split])):
        env.reset(seed=seed, options={"split": split})
        done = False
        while not done:
            _, reward, term, trunc, info = env.step(env.expert_action())
            done = term or trunc
        assert reward == 1.0 and info["won"], env.question


def test_parquet_in_search_r1s_schema(server, tmp_path):
    write_parquet(tmp_path / "test.parquet", TEST)  # Search-R1's own format; only a test split here
    env = env_for(tmp_path, server.url)
    assert sorted(env.pools) == ["test"]
    obs, info = env.reset(seed=0, options={"split": "test"})
    assert obs == "Question: What is the capital of Dravia?" and info["data_source"] == "hotpotqa"
    assert env.pools["test"][1].answers == ("Dravia", "Republic of Dravia")
    # rows with only the processed columns: the question from the prompt, the answers from reward_model
    rows = [search_r1_row(0, "Who directed The Amber Tide?", ["Tomas Reyl"], "hotpotqa")]
    for row in rows:
        del row["question"], row["golden_answers"]
    write_parquet(tmp_path / "processed.parquet", rows)
    env = env_for(tmp_path, server.url, test_file="processed.parquet")
    assert env.reset(seed=0, options={"split": "test"})[0] == "Question: Who directed The Amber Tide?"
    env.step("<search>The Amber Tide</search>")
    assert env.step("<answer>tomas reyl</answer>")[1] == 1.0


# -- failures are one line, never a hang ---------------------------------------------------------------
def test_a_server_that_is_down_is_a_one_line_error(data_dir):
    with socket.socket() as sock:  # a port that was free a moment ago and has no listener now
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = env_for(data_dir, f"http://127.0.0.1:{port}", timeout=2.0)
    env.reset(seed=0)
    with pytest.raises(RetrievalError, match=rf"cannot reach retrieval server http://127.0.0.1:{port}/"):
        env.step("<search>Orsk Textiles</search>")


def test_a_slow_server_times_out(data_dir, server):
    server.delay = 3.0
    env = env_for(data_dir, server.url, timeout=0.3)
    env.reset(seed=0)
    with pytest.raises(RetrievalError, match=r"did not answer within 0.3 s"):
        env.step("<search>Orsk Textiles</search>")


def test_missing_or_damaged_data_names_the_file(tmp_path, server):
    with pytest.raises(ConfigError, match="is not a folder"):
        env_for(tmp_path / "nowhere", server.url)
    with pytest.raises(ConfigError, match=r"no question file in .*looked for train.parquet, train.jsonl"):
        env_for(tmp_path, server.url)
    with pytest.raises(ConfigError, match=r"train question file .*mine.jsonl' does not exist"):
        env_for(tmp_path, server.url, train_file="mine.jsonl")
    (tmp_path / "train.jsonl").write_text(json.dumps(TRAIN[0]) + "\n\n{broken\n")
    with pytest.raises(ConfigError, match=r"train.jsonl' line 3 is not valid JSON"):
        env_for(tmp_path, server.url)
    (tmp_path / "train.jsonl").write_text(json.dumps({"question": "q", "answers": ["a"]}) + "\n")
    with pytest.raises(ConfigError, match=r"train.jsonl' line 1 has no gold answers"):
        env_for(tmp_path, server.url)
    (tmp_path / "train.jsonl").write_text(json.dumps(TRAIN[0]) + "\n")
    (tmp_path / "test.parquet").write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(ConfigError, match=r"test.parquet' (is not a readable parquet file|needs pyarrow)"):
        env_for(tmp_path, server.url)
    (tmp_path / "test.parquet").unlink()
    env = env_for(tmp_path, server.url)  # train only: asking for test is the error
    with pytest.raises(ConfigError, match=r"no test question file .*pass test_file"):
        env.reset(seed=0, options={"split": "test"})
