"""HTTP client of a retrieval server speaking Search-R1's contract (ours, or Search-R1's own).

`POST {url}/retrieve {"queries": [...], "topk": k, "return_scores": true}` →
`{"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}`. Search-R1's server answers bare
document dicts when `return_scores` is false; both shapes are parsed. Transport errors, timeouts, 429 and
5xx answers are retried with exponential backoff; other 4xx answers are the caller's fault and raise at once.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from awarl.retrieval.types import Passage

log = logging.getLogger(__name__)


class RetrievalClientError(RuntimeError):
    """The retrieval server refused the request, or could not be reached after all retries."""


def _passage(item: Any, where: str) -> Passage:
    if not isinstance(item, dict):
        raise RetrievalClientError(f"{where}: expected a JSON object, got {type(item).__name__}")
    doc, score = (item["document"], item.get("score", 0.0)) if "document" in item else (item, 0.0)
    if not isinstance(doc, dict):
        raise RetrievalClientError(f"{where}: \"document\" must be an object")
    pid = str(doc.get("id", doc.get("_id", "")))
    contents = doc.get("contents")
    if not isinstance(contents, str):
        title, text = doc.get("title"), doc.get("text")
        if not isinstance(text, str):
            raise RetrievalClientError(f"{where}: document has neither \"contents\" nor \"text\"")
        return Passage(pid, str(title or ""), text, float(score))
    return Passage.from_contents(pid, contents, float(score))


class RetrievalClient:
    """A Retriever over HTTP. Thread-safe; long query lists are split into requests of `max_batch`."""

    def __init__(self, url: str, timeout_s: float = 30.0, retries: int = 3, *, backoff_s: float = 0.5,
                 max_batch: int = 64) -> None:
        import httpx

        url = url.rstrip("/")
        self.base_url = url[: -len("/retrieve")] if url.endswith("/retrieve") else url
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_batch = max_batch
        self._http = httpx.Client(timeout=timeout_s)

    def _post(self, path: str, payload: dict[str, Any]) -> Any:
        import httpx

        url = self.base_url + path
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                delay = self.backoff_s * 2 ** (attempt - 1)
                log.warning("retrieval request failed (%s); retry %d/%d in %.1fs", last, attempt,
                            self.retries, delay)
                time.sleep(delay)
            try:
                r = self._http.post(url, json=payload)
            except httpx.TransportError as e:  # connection refused/reset, timeouts
                last = f"{type(e).__name__}: {e}"
                continue
            if r.status_code == 429 or r.status_code >= 500:
                last = f"HTTP {r.status_code}"
                continue
            if r.status_code >= 400:
                raise RetrievalClientError(f"{url}: HTTP {r.status_code}: {r.text[:500]}")
            try:
                return r.json()
            except ValueError:
                raise RetrievalClientError(f"{url}: answer is not JSON: {r.text[:200]!r}") from None
        raise RetrievalClientError(f"{url}: no answer after {self.retries + 1} attempts ({last})")

    def search(self, queries: list[str], k: int) -> list[list[Passage]]:
        out: list[list[Passage]] = []
        for start in range(0, len(queries), self.max_batch):
            chunk = list(queries[start:start + self.max_batch])
            data = self._post("/retrieve", {"queries": chunk, "topk": k, "return_scores": True})
            result = data.get("result") if isinstance(data, dict) else None
            if not isinstance(result, list) or len(result) != len(chunk):
                raise RetrievalClientError(f"{self.base_url}/retrieve: expected \"result\" with {len(chunk)} "
                                           f"lists, got {str(data)[:200]}")
            for qi, row in enumerate(result):
                if not isinstance(row, list):
                    raise RetrievalClientError(f"{self.base_url}/retrieve: result[{qi}] is not a list")
                out.append([_passage(item, f"result[{qi}][{j}]") for j, item in enumerate(row[:k])])
        return out

    def health(self) -> dict[str, Any]:
        r = self._http.get(self.base_url + "/health")
        r.raise_for_status()
        return r.json()

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RetrievalClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
