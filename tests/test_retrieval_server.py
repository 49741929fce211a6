"""The retrieval server on a real loopback port, and the HTTP client against it and a flaky server."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from conftest import serve_app

from awarl.cli import main as cli_main
from awarl.retrieval import Passage, RetrievalClient, RetrievalClientError, load_index
from awarl.retrieval.server import make_app

QUERIES = ["Horatio Hale ethnologist", "Evan Morris lobbyist Genentech", "tappet camshaft wear",
           "Danish bishop Absalon", "economy of Chittagong"]


def wire(p: Passage, scores: bool = True) -> dict:
    doc = {"id": p.id, "contents": p.contents}
    return {"document": doc, "score": p.score} if scores else doc


@pytest.fixture(scope="module")
def bm25(bm25_index: Path):
    return load_index(bm25_index)


def test_answers_match_direct_calls(bm25) -> None:
    with serve_app(make_app(bm25)) as url:
        r = httpx.post(url + "/retrieve", json={"queries": QUERIES, "topk": 4, "return_scores": True})
        assert r.status_code == 200
        assert r.json() == {"result": [[wire(p) for p in row] for row in bm25.search(QUERIES, 4)]}
        # Search-R1's shape without scores: bare document dicts; no topk -> the default 3
        r = httpx.post(url + "/retrieve", json={"queries": QUERIES[:2]})
        assert r.json() == {"result": [[wire(p, False) for p in row] for row in bm25.search(QUERIES[:2], 3)]}
        health = httpx.get(url + "/health").json()
        assert health["status"] == "ok" and health["kind"] == "bm25" and health["passage_count"] == 300
        assert health["meta"]["corpus_sha256"] == bm25.meta["corpus_sha256"]
        assert health["queries_served"] == 7 and health["requests_served"] == 2


def test_served_contents_are_the_corpus_lines_verbatim(bm25, wiki18_small: Path) -> None:
    """Search-R1's server returns the corpus document unchanged: `contents` is the line's own, not one rebuilt
    from title and text (wiki-18 has unquoted titles: `Apus\\nhas ...`, not `"Apus"\\nhas ...`)."""
    corpus = {r["id"]: r["contents"] for r in map(json.loads, wiki18_small.read_text(encoding="utf-8").splitlines())}
    unquoted = [pid for pid, c in corpus.items() if not c.startswith('"')]
    assert len(unquoted) >= 5  # the sample's first 300 lines hold some
    assert all(bm25.docstore.get(i).contents == corpus[bm25.docstore.get(i).id] for i in range(len(bm25.docstore)))
    queries = [" ".join(corpus[pid].split()[:12]) for pid in unquoted]
    with serve_app(make_app(bm25)) as url:
        scored = httpx.post(url + "/retrieve", json={"queries": queries, "topk": 5, "return_scores": True}).json()
        bare = httpx.post(url + "/retrieve", json={"queries": queries, "topk": 5}).json()
        served = [h["document"] for row in scored["result"] for h in row] + [d for row in bare["result"] for d in row]
        assert unquoted[0] in {d["id"] for d in served}
        assert all(d["contents"] == corpus[d["id"]] for d in served)
        # the client reads them back as the same passages (title and text split as the agent shows them)
        got = RetrievalClient(url, retries=0).search(queries, 5)
    assert got == bm25.search(queries, 5)
    for p in (p for row in got for p in row):
        want = Passage.from_contents(p.id, corpus[p.id])
        assert (p.title, p.text, p.contents) == (want.title, want.text, corpus[p.id])


@pytest.mark.slow
def test_dense_answers_match_direct_calls(dense_index: Path) -> None:
    dense = load_index(dense_index)
    with serve_app(make_app(dense)) as url:
        r = httpx.post(url + "/retrieve", json={"queries": QUERIES, "topk": 5, "return_scores": True})
        assert r.json() == {"result": [[wire(p) for p in row] for row in dense.search(QUERIES, 5)]}


def test_a_blank_query_gets_no_passages_and_a_search_r1_batch_fits_one_request(bm25) -> None:
    """Search-R1's agent posts every query of a generation batch (256 at validation) in one request, the empty
    query a model wrote among them: the server refused more than 64 queries (413) and any blank one (422), and
    Search-R1's client then fails on the missing `result`, so the README's "awarl speaks that contract both
    ways" did not hold with the defaults."""
    queries = ["Horatio Hale", "", "   ", "Horatio Hale"] * 64
    with serve_app(make_app(bm25)) as url:
        r = httpx.post(url + "/retrieve", json={"queries": queries, "topk": 2, "return_scores": True}, timeout=60)
    assert r.status_code == 200, r.text
    result = r.json()["result"]
    assert len(result) == 256 and result[1] == result[2] == []
    assert result[0] == result[3] == [wire(p) for p in bm25.search(["Horatio Hale"], 2)[0]]


@pytest.mark.parametrize(("body", "status", "says"), [
    (b'{"queries": ["a", ', 400, "not valid JSON"),
    (b'["just", "a", "list"]', 422, "JSON object"),
    (json.dumps({"queries": []}).encode(), 422, "empty"),
    (json.dumps({"queries": "one string"}).encode(), 422, "list of strings"),
    (json.dumps({"queries": ["ok", 3]}).encode(), 422, "list of strings"),
    (json.dumps({"queries": ["x" * 300]}).encode(), 413, "at most 200"),
    (json.dumps({"queries": ["q"] * 9}).encode(), 413, "at most 8"),
    (json.dumps({"queries": ["q"], "topk": 11}).encode(), 422, "topk"),
    (json.dumps({"queries": ["q"], "topk": -1}).encode(), 422, "topk"),
    (json.dumps({"queries": ["q"], "topk": "3"}).encode(), 422, "integer"),
    (json.dumps({"queries": ["q"], "return_scores": "yes"}).encode(), 422, "return_scores"),
    (json.dumps({"queries": ["q" * 150] * 8, "pad": "p" * 3000}).encode(), 413, "body larger"),
    (b"[" * 1000 + b"]" * 1000, 400, "nested too deeply"),
    (b'{"queries": ["\\ud800 Hale"]}', 422, "lone surrogate"),
    (json.dumps({"queries": ["q"], "topk": list(range(300))}).encode(), 422, "..."),
])
def test_bad_requests_get_4xx_and_server_keeps_serving(bm25, body: bytes, status: int, says: str) -> None:
    app = make_app(bm25, max_batch=8, max_topk=10, max_query_chars=200, max_body_bytes=2048)
    with serve_app(app) as url:
        r = httpx.post(url + "/retrieve", content=body, headers={"content-type": "application/json"})
        assert r.status_code == status, r.text
        assert says in r.json()["detail"]
        ok = httpx.post(url + "/retrieve", json={"queries": ["Horatio Hale"], "topk": 1, "return_scores": True})
        assert ok.status_code == 200 and ok.json()["result"][0][0]["document"]["id"] == "1"


def test_failing_search_answers_500_then_recovers(bm25) -> None:
    class Flaky:
        """The real index, made to fail on one query (fault injection)."""

        def search(self, queries: list[str], k: int) -> list[list[Passage]]:
            if "boom" in queries:
                raise RuntimeError("disk error")
            return bm25.search(queries, k)

    with serve_app(make_app(Flaky(), bm25.meta)) as url:
        r = httpx.post(url + "/retrieve", json={"queries": ["boom"]})
        assert r.status_code == 500 and "disk error" in r.json()["detail"]
        r = httpx.post(url + "/retrieve", json={"queries": ["Horatio Hale"], "topk": 1})
        assert r.status_code == 200 and r.json()["result"][0][0]["id"] == "1"


def test_a_failing_request_does_not_fail_the_requests_merged_with_it(bm25) -> None:
    class Flaky:
        """The real index, made to fail on any batch holding one query (fault injection)."""

        def search(self, queries: list[str], k: int) -> list[list[Passage]]:
            if "boom" in queries:
                raise RuntimeError("disk error")
            return bm25.search(queries, k)

    n = 6
    app = make_app(Flaky(), bm25.meta, batch_wait_ms=300)
    barrier = threading.Barrier(n)
    answers: dict[int, httpx.Response] = {}

    def worker(i: int, url: str) -> None:
        with httpx.Client(timeout=30) as c:
            barrier.wait()
            answers[i] = c.post(url + "/retrieve", json={"queries": ["boom" if i == 0 else QUERIES[i % 5]],
                                                         "return_scores": True})

    with serve_app(app) as url:
        threads = [threading.Thread(target=worker, args=(i, url)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert app.state.batcher.max_merged >= 2  # the bad request was merged with good ones
    assert answers[0].status_code == 500 and "disk error" in answers[0].json()["detail"]
    for i in range(1, n):
        assert answers[i].status_code == 200
        assert answers[i].json() == {"result": [[wire(p) for p in bm25.search([QUERIES[i % 5]], 3)[0]]]}


def test_concurrent_requests_are_batched_and_answered_correctly(bm25) -> None:
    n_threads = 12
    app = make_app(bm25, batch_wait_ms=300, max_batch=64)
    queries = [[QUERIES[i % len(QUERIES)], f"{QUERIES[(i + 1) % len(QUERIES)]} {i}"] for i in range(n_threads)]
    answers: dict[int, dict] = {}
    barrier = threading.Barrier(n_threads)

    def worker(i: int, url: str) -> None:
        with httpx.Client() as c:
            barrier.wait()
            answers[i] = c.post(url + "/retrieve", json={"queries": queries[i], "topk": 3,
                                                         "return_scores": True}).json()

    with serve_app(app) as url:
        threads = [threading.Thread(target=worker, args=(i, url)) for i in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        health = httpx.get(url + "/health").json()
    for i in range(n_threads):
        assert answers[i] == {"result": [[wire(p) for p in row] for row in bm25.search(queries[i], 3)]}
    assert health["requests_served"] == n_threads and health["queries_served"] == 2 * n_threads
    assert health["batch_calls"] < n_threads  # requests were merged into fewer search calls
    assert health["max_requests_merged"] >= 2
    assert app.state.batcher.batch_calls == health["batch_calls"]


def test_batches_never_exceed_max_batch(bm25) -> None:
    seen: list[int] = []

    class Recording:
        def search(self, queries: list[str], k: int) -> list[list[Passage]]:
            seen.append(len(queries))
            return bm25.search(queries, k)

    app = make_app(Recording(), bm25.meta, max_batch=4, batch_wait_ms=100)
    with serve_app(app) as url:
        client = RetrievalClient(url, max_batch=3)
        threads = [threading.Thread(target=client.search, args=(QUERIES, 2)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert sum(seen) == 4 * len(QUERIES) and max(seen) <= 4


def test_client_matches_direct_calls_and_splits_long_lists(bm25) -> None:
    many = [f"{q} {i}" for i in range(5) for q in QUERIES]  # 25 queries, client sends chunks of 8
    with serve_app(make_app(bm25, max_batch=8)) as url:
        client = RetrievalClient(url + "/retrieve", timeout_s=10, retries=0, max_batch=8)
        assert client.search(many, 3) == bm25.search(many, 3)
        assert client.health()["passage_count"] == 300
        with pytest.raises(RetrievalClientError, match="HTTP 422"):
            client.search(["q"], 1000)
        assert client.search([], 3) == []
        client.close()


def test_client_adapts_to_a_smaller_server_batch_and_never_sends_what_a_server_refuses(bm25) -> None:
    # A server started with --max-batch 4 answers 413 to the client's default 64 queries a request; blank
    # and run-on queries (a degenerate policy writes them) would get 422/413: none may stop a training run.
    many = [f"{q} {i}" for i in range(2) for q in QUERIES]  # 10 queries
    with serve_app(make_app(bm25, max_batch=4, max_query_chars=200)) as url:
        client = RetrievalClient(url, timeout_s=10, retries=0, max_query_chars=200)
        assert client.search(many, 2) == bm25.search(many, 2)
        assert client.max_batch <= 4
        run_on = "Horatio Hale " + "ethnologist " * 100
        got = client.search(["  ", run_on, "", "Evan Morris"], 2)
        assert got == [[], bm25.search([run_on[:200]], 2)[0], [], bm25.search(["Evan Morris"], 2)[0]]
        assert got[1] and got[3]
        assert client.search(["Evan Morris"], 0) == [[]]


def flaky_search_r1_app(state: SimpleNamespace):  # noqa: ANN201 - an ASGI app
    """A stand-in for Search-R1's server (POST /retrieve only): the first `state.fail_first` requests answer
    500, then `state.status_after` (200: one passage per topk, as bare documents with `state.bare_docs`);
    `state.hits` counts them."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    app = FastAPI()

    @app.post("/retrieve")
    def retrieve(req: dict) -> JSONResponse:
        state.hits += 1
        if state.hits <= state.fail_first or state.status_after != 200:
            return JSONResponse({"detail": "nope"}, status_code=500 if state.hits <= state.fail_first
                                else state.status_after)
        docs = [{"id": f"{qi}-{j}", "contents": f'"T{j}"\nanswer to {q}'} for qi, q in
                enumerate(req["queries"]) for j in range(req["topk"])]
        rows = [[d if state.bare_docs else {"document": d, "score": 10.0 - j}
                 for j, d in enumerate(docs[qi * req["topk"]:(qi + 1) * req["topk"]])]
                for qi in range(len(req["queries"]))]
        return JSONResponse({"result": rows})

    return app


def flaky_state() -> SimpleNamespace:
    return SimpleNamespace(fail_first=1, status_after=200, hits=0, bare_docs=False)


@pytest.fixture()
def flaky_server():
    state = flaky_state()
    with serve_app(flaky_search_r1_app(state)) as url:
        yield state, url


def test_client_retries_a_server_that_fails_once(flaky_server) -> None:
    handler, url = flaky_server
    client = RetrievalClient(url, timeout_s=5, retries=2, backoff_s=0.01)
    [res] = client.search(["who?"], 2)
    assert handler.hits == 2
    assert res == [Passage("0-0", "T0", "answer to who?", 10.0), Passage("0-1", "T1", "answer to who?", 9.0)]


def test_client_reads_bare_documents_and_gives_up_on_persistent_errors(flaky_server) -> None:
    handler, url = flaky_server
    handler.fail_first, handler.bare_docs = 0, True
    assert RetrievalClient(url, retries=0).search(["a", "b"], 1) == [[Passage("0-0", "T0", "answer to a")],
                                                                     [Passage("1-0", "T0", "answer to b")]]
    handler.hits, handler.fail_first = 0, 99
    with pytest.raises(RetrievalClientError, match="no answer after 3 attempts"):
        RetrievalClient(url, retries=2, backoff_s=0.01).search(["a"], 1)
    assert handler.hits == 3
    handler.hits, handler.fail_first, handler.status_after = 0, 0, 404
    with pytest.raises(RetrievalClientError, match="HTTP 404"):  # a 4xx is not retried
        RetrievalClient(url, retries=3, backoff_s=0.01).search(["a"], 1)
    assert handler.hits == 1


def test_client_unreachable_server() -> None:
    from conftest import free_port

    client = RetrievalClient(f"http://127.0.0.1:{free_port()}", timeout_s=1, retries=1, backoff_s=0.01)
    with pytest.raises(RetrievalClientError, match="ConnectError"):
        client.search(["q"], 1)
    with pytest.raises(RetrievalClientError, match="cannot reach the retrieval server .*`awarl serve retriever"):
        client.check_reachable()


def test_reachable_check_accepts_a_server_without_health(flaky_server) -> None:
    handler, url = flaky_server  # a Search-R1-style server: POST /retrieve only, GET /health answers 404
    RetrievalClient(url, retries=0).check_reachable()
    assert handler.hits == 0  # no retrieval request was spent on the check


@pytest.mark.slow
def test_reachable_check_waits_for_a_server_that_is_still_starting() -> None:
    import time

    from conftest import free_port

    port = free_port()
    stop = threading.Event()

    def start_late() -> None:  # the port opens only after a second, like a server loading its index
        time.sleep(1.0)
        with serve_app(flaky_search_r1_app(flaky_state()), port=port):
            stop.wait()

    late = threading.Thread(target=start_late, daemon=True)
    late.start()
    try:
        t0 = time.monotonic()
        with pytest.raises(RetrievalClientError, match="cannot reach"):
            RetrievalClient(f"http://127.0.0.1:{port}").check_reachable(wait_s=0)  # not listening yet
        RetrievalClient(f"http://127.0.0.1:{port}").check_reachable(wait_s=20)
        assert time.monotonic() - t0 < 15
    finally:
        stop.set()
        late.join(timeout=15)


def test_eval_stops_before_generating_when_the_server_is_down(tmp_path: Path, tiny_dir: Path,
                                                               capsys: pytest.CaptureFixture) -> None:
    from conftest import free_port

    url = f"http://127.0.0.1:{free_port()}"
    assert cli_main(["eval", "--model", str(tiny_dir), "--retriever-url", url, "--limit", "1", "--out",
                     str(tmp_path / "ev"), "retrieval.wait_s=0"]) == 2
    assert f"cannot reach the retrieval server at {url}" in capsys.readouterr().err
    assert not (tmp_path / "ev" / "predictions.jsonl").exists()


def test_serve_cli_refuses_a_broken_index(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert cli_main(["serve", "retriever", "--index", str(tmp_path / "nothing")]) == 2
    assert "index folder not found" in capsys.readouterr().err
