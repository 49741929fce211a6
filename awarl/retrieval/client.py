"""HTTP client of a retrieval server speaking Search-R1's contract (ours, or Search-R1's own).

`POST {url}/retrieve {"queries": [...], "topk": k, "return_scores": true}` →
`{"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}`. Search-R1's server answers bare
document dicts when `return_scores` is false; both shapes are parsed. Transport errors, timeouts, 429 and
5xx answers are retried with exponential backoff (or after the server's `Retry-After`, up to
`max_retry_after_s`; the loop of `awarl.http.send_with_retries`, shared with the LLM judge); a 413 halves the queries sent per request; other 4xx answers are the caller's fault
and raise at once.

`timeout_s` is one deadline for a whole request (connect, send, headers and body), not a limit per socket
read: an endpoint that trickles a byte a second cannot hold a call past it. Answers are read as a stream
and refused once larger than `max_response_bytes`, before they are held whole (helpers in `awarl.http`, shared
with the LLM judge).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import time
from typing import TYPE_CHECKING, Any

from awarl.http import (
    Answer,
    ResponseTooLarge,
    RetriesExhausted,
    RetryPolicy,
    capped_request,
    deadline_client,
    send_with_retries,
)
from awarl.io import loads_json
from awarl.retrieval.kinds import RetrievalKind
from awarl.retrieval.types import Passage

if TYPE_CHECKING:
    from awarl.config import RetrievalConfig

log = logging.getLogger(__name__)

# The id of a served document that has none: this prefix and 16 hex digits of its title and text's SHA-1.
NO_ID_PREFIX = "sha1:"


class RetrievalClientError(RuntimeError):
    """The retrieval server refused the request, or could not be reached after all retries."""


class _TooLarge(RetrievalClientError):
    """HTTP 413: the request had more (or longer) queries than the server takes."""


def _score(value: Any, where: str) -> float:
    """A passage's score as a finite float: NaN or infinite scores (JSON `NaN`, `1e400`) would poison any
    ranking or average downstream, and an integer too large for a float (400 digits) has no float at all."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RetrievalClientError(f"{where}: \"score\" must be a number, got {str(value)[:50]!r}")
    try:
        score = float(value)
    except OverflowError:
        raise RetrievalClientError(f"{where}: \"score\" is out of range ({len(str(value))}-digit integer)") \
            from None
    if not math.isfinite(score):
        raise RetrievalClientError(f"{where}: \"score\" must be finite, got {score}")
    return score


def _passage(item: Any, where: str) -> Passage:
    if not isinstance(item, dict):
        raise RetrievalClientError(f"{where}: expected a JSON object, got {type(item).__name__}")
    doc, score = (item["document"], item.get("score", 0.0)) if "document" in item else (item, 0.0)
    if not isinstance(doc, dict):
        raise RetrievalClientError(f"{where}: \"document\" must be an object")
    score = _score(score, where)
    raw_id = doc.get("id", doc.get("_id"))
    contents = doc.get("contents")
    if not isinstance(contents, str):
        title, text = doc.get("title"), doc.get("text")
        if not isinstance(text, str):
            raise RetrievalClientError(f"{where}: document has neither \"contents\" nor \"text\"")
        p = Passage("", str(title or ""), text, score)
    else:
        p = Passage.from_contents("", contents, score)
    return dataclasses.replace(p, id=_passage_id(raw_id, p))


def _passage_id(raw: Any, p: Passage) -> str:
    """The document's id or, for a server that sends none (or a blank one), one derived from its title and
    text. The judges name passages by id: a shared empty id would make every such passage one passage, so a
    citation of one counts as a citation of any (and a judge naming it by number resolves to nothing)."""
    pid = "" if raw is None else str(raw).strip()
    if pid:
        return pid
    digest = hashlib.sha1(f"{p.title}\n{p.text}".encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{NO_ID_PREFIX}{digest}"


def _json(r: Answer, url: str) -> Any:
    try:
        return loads_json(r.body)
    except ValueError as e:  # not JSON, not UTF-8, or nested too deeply
        raise RetrievalClientError(f"{url}: answer is not valid JSON ({str(e)[:120]}): {r.text[:100]!r}") from None


class RetrievalClient:
    """A Retriever over HTTP. Thread-safe; long query lists are split into requests of `max_batch`."""

    def __init__(self, url: str, timeout_s: float = 30.0, retries: int = 3, *, backoff_s: float = 0.5,
                 max_batch: int = 64, max_query_chars: int = 4096, max_response_bytes: int = 64 << 20,
                 max_retry_after_s: float = 60.0) -> None:
        url = url.rstrip("/")
        self.base_url = url[: -len("/retrieve")] if url.endswith("/retrieve") else url
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_batch = max_batch
        self.max_query_chars = max_query_chars
        self.max_response_bytes = max_response_bytes
        self.max_retry_after_s = max_retry_after_s
        self._http = deadline_client(timeout_s)

    def _request(self, method: str, url: str, payload: Any = None) -> Answer:
        """One request under one deadline of timeout_s, its answer read as a stream up to the size cap."""
        try:
            return capped_request(self._http, method, url, timeout_s=self.timeout_s,
                                  max_bytes=self.max_response_bytes, json_body=payload)
        except ResponseTooLarge as e:
            raise RetrievalClientError(str(e)) from None

    def _post(self, path: str, payload: dict[str, Any]) -> Any:
        url = self.base_url + path
        policy = RetryPolicy(self.retries, self.backoff_s, self.max_retry_after_s)

        def note(attempt: int, last: str, delay: float) -> None:
            log.warning("retrieval request failed (%s); retry %d/%d in %.1fs", last, attempt, self.retries, delay)

        try:
            r = send_with_retries(lambda: self._request("POST", url, payload), policy, on_retry=note)
        except RetriesExhausted as e:
            raise RetrievalClientError(f"{url}: no answer after {e.attempts} attempts ({e.last})") from None
        if r.status_code == 413:
            raise _TooLarge(f"{url}: HTTP 413: {r.text[:500]}")
        if not 200 <= r.status_code < 300:  # 4xx: the caller's fault; 1xx/3xx: not an answer (no redirects)
            raise RetrievalClientError(f"{url}: HTTP {r.status_code}: {r.text[:500]}")
        return _json(r, url)

    def search(self, queries: list[str], k: int) -> list[list[Passage]]:
        """Like the in-process retrievers: a blank query (or k <= 0) gets no passages and is not sent (a
        server refuses it), and a query a policy let run on is cut to `max_query_chars` (servers refuse
        longer ones; a degenerate query must not stop a training run)."""
        out: list[list[Passage]] = [[] for _ in queries]
        todo = [(i, q[: self.max_query_chars]) for i, q in enumerate(queries) if q.strip()] if k > 0 else []
        start = 0
        while start < len(todo):
            chunk = todo[start:start + self.max_batch]
            try:
                rows = self._search_chunk([q for _, q in chunk], k)
            except _TooLarge:
                if len(chunk) == 1:
                    raise RetrievalClientError(f"{self.base_url}/retrieve: the server refuses even one query "
                                               f"({len(chunk[0][1])} characters) as too large") from None
                # the server takes fewer queries a request than we assumed: halve and go on
                self.max_batch = max(1, len(chunk) // 2)
                log.warning("retrieval server refused %d queries in one request; sending %d at a time",
                            len(chunk), self.max_batch)
                continue
            for (i, _), row in zip(chunk, rows, strict=True):
                out[i] = row
            start += len(chunk)
        return out

    def _search_chunk(self, chunk: list[str], k: int) -> list[list[Passage]]:
        data = self._post("/retrieve", {"queries": chunk, "topk": k, "return_scores": True})
        result = data.get("result") if isinstance(data, dict) else None
        if not isinstance(result, list) or len(result) != len(chunk):
            raise RetrievalClientError(f"{self.base_url}/retrieve: expected \"result\" with {len(chunk)} "
                                       f"lists, got {str(data)[:200]}")
        rows = []
        for qi, row in enumerate(result):
            if not isinstance(row, list):
                raise RetrievalClientError(f"{self.base_url}/retrieve: result[{qi}] is not a list")
            rows.append([_passage(item, f"{self.base_url}/retrieve: result[{qi}][{j}]")
                         for j, item in enumerate(row[:k])])
        return rows

    def check_reachable(self, wait_s: float = 0.0) -> None:
        """Return once something answers HTTP at the server's address (any status counts: a Search-R1 server
        has no /health), polling for up to `wait_s` seconds for a server that is still starting; then
        RetrievalClientError saying what to do."""
        import httpx

        deadline = time.monotonic() + wait_s
        next_note = 0.0
        while True:
            try:
                self._request("GET", self.base_url + "/health")
                return
            except httpx.TransportError as e:
                last = f"{type(e).__name__}: {e}"
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if time.monotonic() >= next_note:
                log.info("waiting for the retrieval server at %s (%.0fs left; retrieval.wait_s)", self.base_url,
                         left)
                next_note = time.monotonic() + 10
            time.sleep(min(2.0, left))
        raise RetrievalClientError(
            f"cannot reach the retrieval server at {self.base_url} ({last}); start one with `awarl serve "
            "retriever --index DIR --port N` (or scripts/serve_retriever.sh), or point retrieval.server_url / "
            "--retriever-url at a running one")

    def health(self) -> dict[str, Any]:
        url = self.base_url + "/health"
        r = self._request("GET", url)
        if r.status_code != 200:
            raise RetrievalClientError(f"{url}: HTTP {r.status_code}: {r.text[:200]}")
        return _json(r, url)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RetrievalClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# --------------------------------------------------------------- the registered kind (retrieval.kind: server)
def open_server(cfg: RetrievalConfig) -> RetrievalClient:
    """The client of `retrieval.server_url`, checked to answer (waiting up to `retrieval.wait_s`) before any
    model loads."""
    client = RetrievalClient(cfg.server_url, timeout_s=cfg.timeout_s, retries=cfg.retries)
    client.check_reachable(cfg.wait_s)
    return client


KIND = RetrievalKind(open_server, identity=("server_url",))  # remote: no index here
