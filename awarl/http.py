"""HTTP plumbing shared by the clients of outside services (the retrieval server, the LLM judge and grader).

- **One deadline per request.** httpx's timeouts bound each socket operation, so an endpoint that trickles a
  byte a second never trips them. `deadline_client` gives an httpx client whose every connect, read and
  write is cut to what is left of the running request's deadline (set by `capped_request`, per thread).
- **Capped answers.** `capped_request` reads the answer as a stream and refuses it (`ResponseTooLarge`) once
  it is larger than the cap, before it is held whole.
- **Retry-After.** `retry_after_s` reads the header (delta-seconds or an HTTP date).
- **One retry loop.** `send_with_retries` retries transport errors, the deadline, 429 and 5xx answers with
  exponential backoff or the server's `Retry-After` (`retry_delay`), through a circuit breaker when given one;
  callers turn what it raises into their own errors, which name their endpoint and options.
- **Circuit breaker.** `CircuitBreaker` stops calling an endpoint after a run of failed attempts, for a
  cool-down, then lets one probe through: a dead endpoint costs a few attempts, not every retry of every item.
"""

from __future__ import annotations

import email.utils
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from awarl.io import ascii_digits, loads_json
from awarl.upstream import httpx as upstream_httpx

_deadline = threading.local()  # the running request's time.monotonic() deadline, per calling thread


class ResponseTooLarge(ValueError):
    """The answer grew past the cap while being read (it was not read further)."""


class CircuitOpen(RuntimeError):
    """The endpoint failed too often recently: not called until its cool-down has passed."""


def _bounded(timeout: float | None) -> float | None:
    """A socket operation's timeout, cut to what is left of the request's deadline."""
    import httpcore

    deadline = getattr(_deadline, "at", None)
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise httpcore.ReadTimeout("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


def _deadline_transport() -> Any:
    """An httpx transport whose every socket read, write and connect is bounded by the request deadline."""
    import httpcore

    class Stream(httpcore.NetworkStream):
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            return self._inner.read(max_bytes, _bounded(timeout))

        def write(self, buffer: bytes, timeout: float | None = None) -> None:
            self._inner.write(buffer, _bounded(timeout))

        def close(self) -> None:
            self._inner.close()

        def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                      timeout: float | None = None) -> Any:
            return Stream(self._inner.start_tls(ssl_context, server_hostname, _bounded(timeout)))

        def get_extra_info(self, info: str) -> Any:
            return self._inner.get_extra_info(info)

    class Backend(httpcore.SyncBackend):
        def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                        socket_options: Any = None) -> Any:
            return Stream(super().connect_tcp(host, port, _bounded(timeout), local_address, socket_options))

    # httpx does not take a network backend: awarl.upstream swaps its transport's pool for one that has ours
    return upstream_httpx.transport_with_backend(Backend())


def deadline_client(timeout_s: float, headers: dict[str, str] | None = None) -> Any:
    """An httpx.Client for `capped_request`: its socket operations obey the per-request deadline."""
    import httpx

    return httpx.Client(timeout=timeout_s, transport=_deadline_transport(), headers=headers)


class Answer:
    """A status, headers and the whole (capped) body."""

    def __init__(self, status: int, headers: Any, body: bytes) -> None:
        self.status_code, self.headers, self.body = status, headers, body

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return loads_json(self.body)


def capped_request(http: Any, method: str, url: str, *, timeout_s: float, max_bytes: int,
                   json_body: Any = None) -> Answer:
    """One request under one deadline of `timeout_s` (connect, send, headers and body together), its answer
    read as a stream and refused once larger than `max_bytes`. `http` is a `deadline_client`. Transport
    errors and the deadline raise httpx.TransportError subclasses; a too-large answer ResponseTooLarge."""
    _deadline.at = time.monotonic() + timeout_s
    try:
        with http.stream(method, url, json=json_body) as r:
            body = bytearray()
            for chunk in r.iter_bytes():
                body += chunk
                if len(body) > max_bytes:
                    raise ResponseTooLarge(f"{url}: answer larger than {max_bytes} bytes (max_response_bytes); "
                                           "refused")
            return Answer(r.status_code, r.headers, bytes(body))
    finally:
        _deadline.at = None


def retry_after_s(value: str | None) -> float | None:
    """Seconds a `Retry-After` header asks to wait (delta-seconds or an HTTP date); None if absent/invalid.

    Delta-seconds are ASCII digits (RFC 9110): `str.isdigit` also takes "²" or "٣", which `float` refuses or
    reads as a number no server meant, so a malformed header is ignored rather than raised."""
    if not value:
        return None
    value = value.strip()
    if ascii_digits(value):
        return float(value)
    try:  # an HTTP date; a year or zone offset out of range overflows
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time()) if when is not None else None
    except (TypeError, ValueError, OverflowError, IndexError):
        return None


def retry_delay(attempt: int, backoff_s: float, retry_after: float | None, max_retry_after_s: float) -> float:
    """Seconds to wait before retry `attempt` (1, 2, ...): exponential backoff, or longer where the server's
    `Retry-After` asked for it, capped at `max_retry_after_s` (a server must not park a client for hours)."""
    delay = backoff_s * 2 ** (attempt - 1)
    return delay if retry_after is None else max(delay, min(retry_after, max_retry_after_s))


@dataclass(frozen=True)
class RetryPolicy:
    """How many times and how patiently one request is retried (the caller's options of the same names)."""

    retries: int
    backoff_s: float
    max_retry_after_s: float


class RetriesExhausted(Exception):
    """Every attempt failed with a transport error, the deadline, a 429 or a 5xx; `last` says how the last one
    failed ("HTTP 503", "ConnectError: ...")."""

    def __init__(self, attempts: int, last: str) -> None:
        super().__init__(f"no answer after {attempts} attempt(s): {last}")
        self.attempts, self.last = attempts, last


def send_with_retries(send: Callable[[], Answer], policy: RetryPolicy, *, breaker: CircuitBreaker | None = None,
                      refused: str = "circuit breaker open; not called",
                      on_retry: Callable[[int, str, float], None] | None = None) -> Answer:
    """`send()` (one `capped_request`) until it gives an answer that is neither a 429 nor a 5xx, and that answer
    (any other status: what a 4xx means is the caller's to say). A transport error (refused, reset, timeouts,
    the request's deadline), a 429 or a 5xx is retried up to `policy.retries` times, after `retry_delay`
    (exponential backoff, or the answer's `Retry-After`); then RetriesExhausted. `on_retry(attempt, last,
    delay_s)` is told before each wait.

    With a `breaker`, each attempt asks it first (CircuitOpen(`refused`) when it is open, nothing sent) and
    tells it how it went: a transport error or a 5xx is a failure; any other answer, a 429 (answered by
    waiting) and a too-large answer too, shows the endpoint alive. ResponseTooLarge is raised at once, not
    retried: the same request would get the same answer."""
    import httpx

    last, wait = "", None
    for attempt in range(policy.retries + 1):
        if attempt:
            delay = retry_delay(attempt, policy.backoff_s, wait, policy.max_retry_after_s)
            if on_retry is not None:
                on_retry(attempt, last, delay)
            time.sleep(delay)
        wait = None
        if breaker is not None and not breaker.allow():
            raise CircuitOpen(refused)
        alive = False
        try:
            r = send()
            alive = r.status_code < 500
        except httpx.TransportError as e:
            last = f"{type(e).__name__}: {e}"
            continue
        except ResponseTooLarge:
            alive = True
            raise
        finally:
            if breaker is not None:
                breaker.record(alive)
        if r.status_code == 429 or r.status_code >= 500:
            last = f"HTTP {r.status_code}"
            wait = retry_after_s(r.headers.get("retry-after"))
            continue
        return r
    raise RetriesExhausted(policy.retries + 1, last)


class CircuitBreaker:
    """Closed: calls go through. After `failures` failed attempts in a row it opens for `cooldown_s`: every
    call is refused at once. Then one probe is let through (half-open): its success closes the breaker, its
    failure opens it again. Thread-safe. `failures=0` disables it."""

    def __init__(self, failures: int, cooldown_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.threshold, self.cooldown_s, self._clock = failures, cooldown_s, clock
        self._lock = threading.Lock()
        self._streak = 0
        self._open_until: float | None = None
        self._probing = False
        self.trips = 0  # times it opened
        self.refused = 0  # calls refused while open

    @property
    def is_open(self) -> bool:
        with self._lock:
            return self._open_until is not None and self._clock() < self._open_until

    def allow(self) -> bool:
        """Whether a call may go out now (counts a refusal when not)."""
        if self.threshold <= 0:
            return True
        with self._lock:
            if self._open_until is None:
                return True
            if self._clock() >= self._open_until and not self._probing:
                self._probing = True  # half-open: this call is the probe
                return True
            self.refused += 1
            return False

    def record(self, ok: bool) -> None:
        if self.threshold <= 0:
            return
        with self._lock:
            was_probe, self._probing = self._probing, False
            if ok:
                self._streak, self._open_until = 0, None
                return
            self._streak += 1
            if was_probe or self._streak >= self.threshold:
                if self._open_until is None or was_probe:
                    self.trips += 1
                self._open_until = self._clock() + self.cooldown_s
