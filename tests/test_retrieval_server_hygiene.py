"""The retrieval server and client on real loopback sockets: search workers, the empty-queue path, server
hygiene (issue 16 item 6) and the client's one deadline per request (issue 12 item 6)."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from conftest import serve_app, serve_bytes

from awarl.http import retry_after_s
from awarl.retrieval import Passage, RetrievalClient, RetrievalClientError, load_index
from awarl.retrieval.server import make_app


@pytest.fixture(scope="module")
def bm25(bm25_index: Path):
    return load_index(bm25_index)


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


# --------------------------------------------------------------------------------- workers, empty queue
def test_a_lone_request_is_not_held_for_the_merge_window(bm25) -> None:
    """Nothing else queued or arriving: the request is searched at once, whatever batch_wait_ms says."""
    with serve_app(make_app(bm25, batch_wait_ms=3000)) as url, httpx.Client(timeout=30) as c:
        c.post(url + "/retrieve", json={"queries": ["warm up"]})
        t0 = time.perf_counter()
        for _ in range(3):
            assert c.post(url + "/retrieve", json={"queries": ["Horatio Hale"], "topk": 1}).status_code == 200
        assert time.perf_counter() - t0 < 3.0  # three requests, each would wait 3 s with the old merge window


def test_search_workers_run_searches_concurrently(bm25) -> None:
    """Two searches meet at a barrier inside the retriever: only two concurrent workers can get through."""
    barrier = threading.Barrier(2, timeout=10)

    class Meeting:
        def search(self, queries: list[str], k: int) -> list[list[Passage]]:
            barrier.wait()
            return bm25.search(queries, k)

    app = make_app(Meeting(), bm25.meta, workers=2, max_batch=1)  # max_batch=1: never merged into one call
    answers: list[int] = []
    with serve_app(app) as url:
        def one(q: str) -> None:
            answers.append(httpx.post(url + "/retrieve", json={"queries": [q]}, timeout=30).status_code)

        threads = [threading.Thread(target=one, args=(q,)) for q in ("Horatio Hale", "Evan Morris")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert answers == [200, 200]
    assert app.state.batcher.batch_calls == 2


# ------------------------------------------------------------------------------------ server hygiene
def raw_connection(url: str) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port_of(url)), timeout=10)


def test_client_disconnecting_mid_body_is_one_log_line(bm25, caplog: pytest.LogCaptureFixture) -> None:
    app = make_app(bm25)
    with caplog.at_level(logging.INFO), serve_app(app) as url:
        for _ in range(3):
            s = raw_connection(url)
            s.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 1000\r\n\r\n{\"queries\": [")
            time.sleep(0.1)
            s.close()
        deadline = time.time() + 5
        while app.disconnects < 3 and time.time() < deadline:
            time.sleep(0.05)
        assert httpx.get(url + "/health").json()["client_disconnects"] == 3
    said = [r for r in caplog.records if "disconnected" in r.getMessage()]
    assert len(said) == 3
    assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()
                or "Exception in ASGI" in r.getMessage()]


def test_a_stalled_body_gets_408_within_the_deadline(bm25) -> None:
    with serve_app(make_app(bm25, body_timeout_s=0.5)) as url:
        s = raw_connection(url)
        s.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"que")
        answer = b""
        while b"not received within" not in answer:   # one recv may hold only the status line under load
            chunk = s.recv(4096)
            if not chunk:
                break
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 408") and b"not received within 0.5 s" in answer
        s.close()
        assert httpx.get(url + "/health").json()["body_timeouts"] == 1


def test_health_discloses_no_absolute_path_and_answers_head(bm25, bm25_index: Path) -> None:
    with serve_app(make_app(bm25)) as url:
        r = httpx.get(url + "/health")
        text = r.text
        assert str(Path(bm25.meta["corpus"]).parent) not in text and str(bm25_index) not in text
        assert r.json()["meta"]["corpus"] == Path(bm25.meta["corpus"]).name
        assert r.json()["meta"]["corpus_sha256"] == bm25.meta["corpus_sha256"]
        head = httpx.head(url + "/health")
        assert head.status_code == 200 and head.content == b""
        assert httpx.get(url + "/nothing").status_code == 404
        assert httpx.get(url + "/retrieve").status_code == 405


# ------------------------------------------------------------------------- client deadline, size, retry
def misbehaving_app(state: SimpleNamespace):  # noqa: ANN201 - an ASGI app
    """A bad endpoint: trickles its answer a byte each 0.2 s, floods, or asks to come back later
    (`state.mode`; `state.hits` counts the requests)."""
    from fastapi import FastAPI
    from fastapi.responses import Response, StreamingResponse

    app = FastAPI()

    @app.post("/retrieve", response_model=None)
    async def retrieve(body: dict) -> Response:
        state.hits += 1
        if state.mode == "retry-after" and state.hits == 1:
            return Response(b'{"detail": "busy"}', status_code=503, headers={"Retry-After": "1"})
        if state.mode == "bad-retry-after" and state.hits == 1:  # "²": str.isdigit() says yes, float() no
            return Response(b'{"detail": "busy"}', status_code=503, headers={"Retry-After": "\u00b2"})
        answer = json.dumps({"result": [[{"document": {"id": "1", "contents": '"T"\nx' * (
            200_000 if state.mode == "flood" else 1)}, "score": 1.0}]]}).encode()
        if state.mode != "trickle-body":
            return Response(answer, media_type="application/json")

        async def trickle():  # noqa: ANN202
            for byte in answer:
                yield bytes([byte])
                await asyncio.sleep(0.2)

        return StreamingResponse(trickle(), headers={"Content-Length": str(len(answer))})

    return app


def trickle_head(conn: socket.socket) -> None:
    """The status line itself, a byte each 0.2 s (no HTTP server writes its head so; serve_bytes does)."""
    for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 100:
        conn.sendall(bytes([byte]))
        time.sleep(0.2)


@pytest.fixture()
def bad_endpoint():
    state = SimpleNamespace(mode="trickle-body", hits=0)
    with serve_app(misbehaving_app(state)) as url, serve_bytes(trickle_head) as head_url:
        state.head_url = head_url
        yield state, url


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["trickle-body", "trickle-head"])
def test_a_trickling_endpoint_cannot_hold_a_call_past_its_timeout(bad_endpoint, mode: str) -> None:
    handler, url = bad_endpoint
    handler.mode = mode
    client = RetrievalClient(handler.head_url if mode == "trickle-head" else url, timeout_s=1.0, retries=0)
    t0 = time.perf_counter()
    with pytest.raises(RetrievalClientError, match="no answer after 1 attempts"):
        client.search(["q"], 1)
    assert time.perf_counter() - t0 < 2.5  # each byte arrives well within a per-read timeout of 1 s


def test_an_oversized_answer_is_refused_while_streaming(bad_endpoint) -> None:
    handler, url = bad_endpoint
    handler.mode = "flood"  # about 1.4 MB
    with pytest.raises(RetrievalClientError, match="larger than 100000 bytes"):
        RetrievalClient(url, retries=2, max_response_bytes=100_000).search(["q"], 1)
    assert handler.hits == 1  # not retried
    assert RetrievalClient(url, retries=0).search(["q"], 1)[0][0].id == "1"


@pytest.mark.slow
def test_retry_after_is_honoured(bad_endpoint) -> None:
    handler, url = bad_endpoint
    handler.mode = "retry-after"
    t0 = time.perf_counter()
    [[p]] = RetrievalClient(url, retries=1, backoff_s=0.01).search(["q"], 1)
    assert p.id == "1" and handler.hits == 2
    assert time.perf_counter() - t0 >= 0.95  # waited the server's 1 s, not the 0.01 s backoff
    assert retry_after_s("7") == 7.0 and retry_after_s("soon") is None and retry_after_s(None) is None
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past: at once


def test_a_malformed_retry_after_is_ignored_not_raised(bad_endpoint) -> None:
    """A 503 whose Retry-After is "²" is retried after the usual backoff (the header reads as absent), and the
    call never escapes as a bare ValueError the rollout engine does not catch."""
    handler, url = bad_endpoint
    handler.mode = "bad-retry-after"
    t0 = time.perf_counter()
    [[p]] = RetrievalClient(url, retries=1, backoff_s=0.01).search(["q"], 1)
    assert p.id == "1" and handler.hits == 2 and time.perf_counter() - t0 < 5
    handler.hits = 0
    with pytest.raises(RetrievalClientError, match="no answer after 1 attempts"):
        RetrievalClient(url, retries=0).search(["q"], 1)


@pytest.mark.slow
def test_health_discloses_no_absolute_path_in_the_settings(tmp_path: Path, wiki18_tiny: Path) -> None:
    """A dense index built with a local model folder (`--model /abs/path`) records that path; /health names
    the folder only, as it does the corpus."""
    from conftest import head_lines

    from awarl.retrieval import build_index
    from awarl.retrieval.dense import DEFAULT_MODEL, resolve_model_path

    model = resolve_model_path(DEFAULT_MODEL)
    assert Path(model).is_absolute()
    corpus = head_lines(wiki18_tiny, tmp_path / "c5.jsonl", 5)
    dense = load_index(build_index(corpus, "dense", tmp_path / "idx", model=model, show_progress=False,
                                   device="cpu"), device="cpu")
    assert dense.meta["settings"]["model"] == model
    with serve_app(make_app(dense)) as url:
        r = httpx.get(url + "/health")
    assert r.status_code == 200
    assert str(Path(model).parent) not in r.text and str(tmp_path) not in r.text and '"/' not in r.text
    assert r.json()["meta"]["settings"]["model"] == Path(model).name
    assert r.json()["meta"]["corpus"] == "c5.jsonl"
