"""BM25 ranks and caches by content; the Search-R1 HTTP client fails fast and in one line."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from prover.errors import ProverError, RetrievalError
from prover.retrieval import Passage, Retriever, format_documents
from prover.retrieval.bm25 import BM25Retriever, corpus_hash
from prover.retrieval.http import HttpRetriever
from retrieval_corpus import CORPUS


def test_bm25_ranks_the_gold_passage_first(tmp_path):
    bm25 = BM25Retriever(CORPUS, cache_dir=tmp_path)
    assert isinstance(bm25, Retriever)
    assert bm25.search("who founded Orsk Textiles", 3)[0].id == "d1"
    assert bm25.search("Amber Tide director", 1)[0].id == "d3"
    assert [r[0].id for r in bm25.search_many(["capital of Dravia", "Ilsa Korven born"], 2)] == ["d4", "d2"]
    assert len(bm25.search("lighthouse", 50)) == len(CORPUS)  # k is clamped to the corpus
    assert len(bm25.search("zzzz unknown words", 3)) == 3  # no match is not an error


def test_bm25_cache_is_reused_and_keyed_by_content(tmp_path):
    first = BM25Retriever(CORPUS, cache_dir=tmp_path)
    second = BM25Retriever(CORPUS, cache_dir=tmp_path)
    assert not first.loaded_from_cache and second.loaded_from_cache
    query = "Velmora lighthouse"
    assert [p.id for p in second.search(query, 3)] == [p.id for p in first.search(query, 3)]
    changed = CORPUS[:-1] + [Passage("d4", "Dravia", "Dravia is a sovereign state whose capital is Orn.")]
    assert corpus_hash(changed) != corpus_hash(CORPUS)
    third = BM25Retriever(changed, cache_dir=tmp_path)
    assert not third.loaded_from_cache
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([corpus_hash(CORPUS), corpus_hash(changed)])


def test_bm25_default_cache_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PROVER_INDEX_DIR", str(tmp_path / "idx"))
    assert BM25Retriever(CORPUS).index_dir.parent == tmp_path / "idx"
    assert BM25Retriever(CORPUS, cache_dir=False).index_dir is None


def test_retrievers_are_a_registry_of_their_own(tmp_path):
    from prover.errors import ConfigError, PluginLoadError
    from prover.registry import REGISTRIES
    from prover.retrieval import RETRIEVERS, make_retriever

    assert REGISTRIES["retrievers"] is RETRIEVERS and RETRIEVERS.group == "prover.retrievers"
    by_string = make_retriever("prover.retrieval.bm25:BM25Retriever", CORPUS, cache_dir=tmp_path)
    assert type(by_string) is BM25Retriever and by_string.search("Amber Tide director", 1)[0].id == "d3"
    with pytest.raises(PluginLoadError) as wrong:  # a class without search/search_many
        make_retriever("collections:OrderedDict", CORPUS)
    assert str(wrong.value).startswith("retriever 'collections:OrderedDict' (from module:Object string): "
                                       "collections.OrderedDict does not implement prover.retrieval.base.Retriever")
    with pytest.raises(ConfigError, match=r"unknown retriever 'bm52'; choose one of \[.*'bm25'.*did you mean 'bm25'"):
        make_retriever("bm52", CORPUS)


def test_format_documents_is_search_r1s():
    text = format_documents(CORPUS[:2])
    assert text.startswith('Doc 1(Title: "Velmora") Velmora is a port city')
    assert '\nDoc 2(Title: "Orsk Textiles") Orsk' in text and text.endswith("\n")
    assert Passage.from_contents("d1", CORPUS[1].contents) == CORPUS[1]


# -- the HTTP client ----------------------------------------------------------------------------------


def _serve(reply):
    """A real server on 127.0.0.1; ``reply(request_json) -> bytes`` decides what it answers."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # the stdlib's name, hence not snake_case
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            try:
                out = reply(body, self.path)
            except Exception:  # noqa: BLE001 - the client went away while we slept
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            try:
                self.wfile.write(out)
            except OSError:
                pass

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def _search_r1_reply(body, path):
    assert path == "/retrieve" and body["return_scores"] is True
    rows = [[{"document": {"id": f"{q}-{i}", "contents": f'"T{i}"\ntext about {q}'}, "score": 1.0 / (i + 1)}
             for i in range(body["topk"])] for q in body["queries"]]
    return json.dumps({"result": rows}).encode()


def test_http_client_reads_the_search_r1_schema():
    server, url = _serve(_search_r1_reply)
    try:
        client = HttpRetriever(url, timeout=5)
        out = client.search_many(["alpha", "beta"], k=3)
        assert [[p.id for p in row] for row in out] == [["alpha-0", "alpha-1", "alpha-2"],
                                                          ["beta-0", "beta-1", "beta-2"]]
        assert out[0][1] == Passage("alpha-1", "T1", "text about alpha")
        assert HttpRetriever(url + "/retrieve").search("gamma", 1)[0].title == "T0"
    finally:
        server.shutdown()


def test_http_client_server_down_fails_fast():
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(RetrievalError, match="cannot reach retrieval server") as err:
        HttpRetriever(f"http://127.0.0.1:{port}", timeout=5).search("q")
    assert time.monotonic() - start < 2 and "\n" not in str(err.value)
    assert isinstance(err.value, ProverError)


def test_http_client_slow_server_times_out():
    server, url = _serve(lambda body, path: (time.sleep(2), b'{"result": [[]]}')[1])
    try:
        start = time.monotonic()
        with pytest.raises(RetrievalError, match="did not answer within 0.3 s"):
            HttpRetriever(url, timeout=0.3).search("q")
        assert time.monotonic() - start < 1.5
    finally:
        server.shutdown()


@pytest.mark.parametrize("reply", [b"not json", b'{"results": []}', b'{"result": [[{"document": {}}]]}',
                                   b'{"result": [[], []]}'])
def test_http_client_malformed_reply_is_a_retrieval_error(reply):
    server, url = _serve(lambda body, path: reply)
    try:
        with pytest.raises(RetrievalError, match="not the Search-R1 schema"):
            HttpRetriever(url, timeout=5).search("q")
    finally:
        server.shutdown()


# -- the HTTP client against servers that misbehave below the HTTP layer ---------------------------------


def _raw_server(handle):
    """A bare TCP server on 127.0.0.1: ``handle(conn)`` writes whatever bytes the test wants."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)

    def loop():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # the test closed the listener
                return
            with conn:
                conn.recv(65536)  # the request; its content does not matter here
                try:
                    handle(conn)
                except OSError:  # the client gave up first
                    pass

    threading.Thread(target=loop, daemon=True).start()
    return listener, f"http://127.0.0.1:{listener.getsockname()[1]}"


def test_http_client_server_that_never_accepts_times_out():
    listener = socket.socket()  # the kernel completes the handshake; nobody ever reads or answers
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    try:
        start = time.monotonic()
        with pytest.raises(RetrievalError, match="did not answer within 0.3 s") as err:
            HttpRetriever(f"http://127.0.0.1:{listener.getsockname()[1]}", timeout=0.3).search("q")
        assert time.monotonic() - start < 1.5 and "\n" not in str(err.value)
    finally:
        listener.close()


def test_http_client_trickling_server_is_cut_at_the_timeout():
    def trickle(conn):  # a valid header, then one body byte every 50 ms for up to 4 s
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 80\r\n\r\n")
        for _ in range(80):
            conn.sendall(b" ")
            time.sleep(0.05)

    listener, url = _raw_server(trickle)
    try:
        start = time.monotonic()
        with pytest.raises(RetrievalError, match="did not answer within 0.5 s"):
            HttpRetriever(url, timeout=0.5).search("q")
        # each byte arrives well within the socket timeout, so only the whole-read deadline stops it
        assert time.monotonic() - start < 2.0
    finally:
        listener.close()


@pytest.mark.parametrize("reply, message", [
    (b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n", "answered HTTP 503"),
    (b"garbage without a status line\r\n\r\n", "broke the HTTP exchange"),
    (b"", "broke the HTTP exchange"),  # hangs up without a word
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"result\"", "broke the HTTP exchange"),  # cut short
])
def test_http_client_broken_replies_are_one_line_errors(reply, message):
    listener, url = _raw_server(lambda conn: conn.sendall(reply))
    try:
        with pytest.raises(RetrievalError, match=message) as err:
            HttpRetriever(url, timeout=5).search("q")
        assert "\n" not in str(err.value)
    finally:
        listener.close()
