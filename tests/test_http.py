"""The HTTP plumbing shared by the retrieval client and the LLM judge (awarl/http.py): the one retry loop,
against a real loopback endpoint."""

from __future__ import annotations

import contextlib
import time

import pytest
from conftest import free_port, serve_app

from awarl.http import (
    CircuitBreaker,
    CircuitOpen,
    ResponseTooLarge,
    RetriesExhausted,
    RetryPolicy,
    capped_request,
    deadline_client,
    retry_after_s,
    send_with_retries,
)


def endpoint_app(seen: dict[str, list[float]]):  # noqa: ANN201 - an ASGI app
    """POST /seq answers 429 (Retry-After: 1), then 503, then 200; /down always 503, /odd too with a malformed
    `Retry-After: ²`; /missing 404; /big a 200 of 10 kB. `seen[path]` gets the arrival time of every request."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse, Response

    app = FastAPI()

    @app.post("/{path}", response_model=None)
    def answer(path: str) -> Response:
        seen.setdefault(path, []).append(time.monotonic())
        n = len(seen[path])
        if path == "seq" and n == 1:
            return Response(status_code=429, headers={"Retry-After": "1"})
        if (path == "seq" and n == 2) or path == "down":
            return Response(status_code=503)
        if path == "missing":
            return Response(status_code=404)
        if path == "odd":  # a Retry-After that is no number of seconds a float can read
            return Response(status_code=503, headers={"Retry-After": "\u00b2"})
        return JSONResponse({"n": n, "pad": "x" * (10_000 if path == "big" else 0)})

    return app


@pytest.fixture()
def endpoint():
    seen: dict[str, list[float]] = {}
    with serve_app(endpoint_app(seen)) as url, contextlib.closing(deadline_client(5.0)) as http:
        def send(path: str, max_bytes: int = 100_000):  # noqa: ANN202
            return lambda: capped_request(http, "POST", f"{url}/{path}", timeout_s=5.0, max_bytes=max_bytes)

        yield send, seen


def test_429_with_retry_after_then_503_then_200(endpoint) -> None:
    send, seen = endpoint
    waits: list[tuple[int, str, float]] = []
    r = send_with_retries(send("seq"), RetryPolicy(retries=3, backoff_s=0.05, max_retry_after_s=0.5),
                          on_retry=lambda *a: waits.append(a))
    assert r.status_code == 200 and r.json()["n"] == 3
    # Retry-After: 1 is honoured up to max_retry_after_s (0.5 s, not the 0.05 s backoff); the 503 has none:
    # the second retry waits the doubled backoff
    assert waits == [(1, "HTTP 429", 0.5), (2, "HTTP 503", 0.1)]
    first, second, third = seen["seq"]
    assert second - first >= 0.45 and 0.08 <= third - second < 0.45


def test_the_breaker_counts_a_5xx_not_a_429_and_refuses_once_open(endpoint) -> None:
    send, seen = endpoint
    breaker = CircuitBreaker(failures=1, cooldown_s=60)
    with pytest.raises(CircuitOpen, match="endpoint X is resting"):
        send_with_retries(send("seq"), RetryPolicy(3, 0.01, 0.0), breaker=breaker, refused="endpoint X is resting")
    # the 429 kept it closed, the 503 opened it, the third attempt was refused without a request
    assert len(seen["seq"]) == 2 and breaker.trips == 1 and breaker.refused == 1


def test_what_is_not_retried_and_what_runs_out(endpoint) -> None:
    send, seen = endpoint
    assert send_with_retries(send("missing"), RetryPolicy(3, 0.01, 1.0)).status_code == 404  # the caller's to say
    assert len(seen["missing"]) == 1
    breaker = CircuitBreaker(failures=1, cooldown_s=60)
    with pytest.raises(ResponseTooLarge):
        send_with_retries(send("big", max_bytes=1000), RetryPolicy(3, 0.01, 1.0), breaker=breaker)
    assert len(seen["big"]) == 1 and not breaker.is_open  # not retried; the endpoint is alive
    with pytest.raises(RetriesExhausted, match=r"no answer after 3 attempt\(s\): HTTP 503") as e:
        send_with_retries(send("down"), RetryPolicy(2, 0.01, 1.0))
    assert (e.value.attempts, e.value.last, len(seen["down"])) == (3, "HTTP 503", 3)

    with contextlib.closing(deadline_client(1.0)) as http, pytest.raises(RetriesExhausted) as e:
        url = f"http://127.0.0.1:{free_port()}/x"  # nothing listens: transport errors are retried too
        send_with_retries(lambda: capped_request(http, "POST", url, timeout_s=1.0, max_bytes=100),
                          RetryPolicy(1, 0.01, 1.0))
    assert e.value.attempts == 2 and e.value.last.startswith("ConnectError")


@pytest.mark.parametrize("value", ["\u00b2", "3\u00b2", "\u0663", "\uff15", "1.5", "-3", "soon", " ", "",
                                   "Wed, 21 Oct 99999999999 07:28:00 GMT", "Wed, 21 Oct 2015 07:28:00 +9999999999999"])
def test_a_malformed_retry_after_reads_as_absent(value: str) -> None:
    # "²", "٣" (Arabic-Indic 3) and "５" (fullwidth 5) pass str.isdigit(); float() refuses the first and reads
    # the others as numbers no server meant; an HTTP date's year or zone offset can overflow
    assert retry_after_s(value) is None


def test_retry_after_reads_seconds_and_dates() -> None:
    import email.utils

    assert retry_after_s(" 7 ") == 7.0 and retry_after_s("0") == 0.0
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past: at once
    assert 3000 < retry_after_s(email.utils.formatdate(time.time() + 3600, usegmt=True)) <= 3600


def test_a_malformed_retry_after_is_retried_with_the_backoff(endpoint) -> None:
    send, seen = endpoint
    waits: list[tuple[int, str, float]] = []
    with pytest.raises(RetriesExhausted, match=r"no answer after 3 attempt\(s\): HTTP 503"):
        send_with_retries(send("odd"), RetryPolicy(2, 0.01, 60.0), on_retry=lambda *a: waits.append(a))
    assert waits == [(1, "HTTP 503", 0.01), (2, "HTTP 503", 0.02)] and len(seen["odd"]) == 3
