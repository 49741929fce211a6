"""Search-R1-compatible retrieval server (FastAPI) with request batching.

`POST /retrieve {"queries": [...], "topk": k, "return_scores": b}` answers
`{"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}`, or, like Search-R1's own server,
lists of bare `{"id", "contents"}` documents when `return_scores` is false (or absent); a missing or zero
`topk` means the server's default. `GET /health` reports the index meta and batching counters.

Rollout workers send many small requests at once; a single worker task merges the requests that arrive
within `batch_wait_ms` (up to `max_batch` queries) into one `search` call, which is what makes dense
retrieval efficient (one encoder batch, one faiss search). Searches run in one background thread so the
event loop keeps accepting and validating requests meanwhile. Bad requests get 4xx answers that say what
is wrong; a failing search answers 500 and the server keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from awarl.retrieval.types import Passage, Retriever

log = logging.getLogger(__name__)


@dataclass
class ServerLimits:
    max_batch: int = 64            # queries per request and per merged search call
    max_topk: int = 100
    default_topk: int = 3          # Search-R1's server default when topk is missing
    max_query_chars: int = 4096
    max_body_bytes: int = 1 << 20
    batch_wait_ms: float = 5.0


@dataclass
class _Pending:
    queries: list[str]
    k: int
    future: asyncio.Future = field(repr=False)


class _BadRequest(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


def _short(value: Any) -> str:
    """A bad value echoed in an error, cut so a 1 MB field does not come back whole."""
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "..."


def parse_request(body: bytes, limits: ServerLimits) -> tuple[list[str], int, bool]:
    """Validate a /retrieve body; returns (queries, topk, return_scores) or raises _BadRequest."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise _BadRequest(400, f"body is not valid JSON: {e}") from None
    except RecursionError:  # a deeply nested body must not crash the handler
        raise _BadRequest(400, "body is not valid JSON: nested too deeply") from None
    if not isinstance(data, dict):
        raise _BadRequest(422, "body must be a JSON object with \"queries\"")
    queries = data.get("queries")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise _BadRequest(422, "\"queries\" must be a list of strings")
    if not queries:
        raise _BadRequest(422, "\"queries\" is empty")
    if len(queries) > limits.max_batch:
        raise _BadRequest(413, f"{len(queries)} queries in one request; at most {limits.max_batch}")
    for i, q in enumerate(queries):
        if not q.strip():
            raise _BadRequest(422, f"queries[{i}] is empty")
        if len(q) > limits.max_query_chars:
            raise _BadRequest(413, f"queries[{i}] has {len(q)} characters; at most {limits.max_query_chars}")
        try:  # JSON escapes can carry lone surrogates, which encoders' tokenizers reject
            q.encode("utf-8")
        except UnicodeEncodeError:
            raise _BadRequest(422, f"queries[{i}] is not valid Unicode (lone surrogate)") from None
    topk = data.get("topk")
    if topk is None or topk == 0:
        topk = limits.default_topk
    if isinstance(topk, bool) or not isinstance(topk, int):
        raise _BadRequest(422, f"\"topk\" must be an integer, got {_short(topk)}")
    if not 1 <= topk <= limits.max_topk:
        raise _BadRequest(422, f"\"topk\" must be in [1, {limits.max_topk}], got {topk}")
    return_scores = data.get("return_scores", False)
    if not isinstance(return_scores, bool):
        raise _BadRequest(422, f"\"return_scores\" must be true or false, got {_short(return_scores)}")
    return queries, topk, return_scores


def format_result(results: list[list[Passage]], return_scores: bool) -> dict[str, Any]:
    def doc(p: Passage) -> dict[str, str]:
        return {"id": p.id, "contents": p.contents}

    if return_scores:
        return {"result": [[{"document": doc(p), "score": p.score} for p in row] for row in results]}
    return {"result": [[doc(p) for p in row] for row in results]}


class _Batcher:
    """One queue, one worker: merges pending requests into as few `search` calls as possible."""

    def __init__(self, retriever: Retriever, limits: ServerLimits) -> None:
        self.retriever = retriever
        self.limits = limits
        self.queue: asyncio.Queue[_Pending] | None = None
        self.task: asyncio.Task | None = None
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="retrieve")
        self.batch_calls = 0
        self.requests = 0
        self.queries = 0
        self.max_merged = 0

    def start(self) -> None:
        self.queue = asyncio.Queue()
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self.task:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        self.executor.shutdown(wait=False, cancel_futures=True)

    async def submit(self, queries: list[str], k: int) -> list[list[Passage]]:
        assert self.queue is not None, "batcher not started"
        fut = asyncio.get_running_loop().create_future()
        await self.queue.put(_Pending(queries, k, fut))
        return await fut

    async def _collect(self, first: _Pending) -> tuple[list[_Pending], _Pending | None]:
        """Gather requests for up to batch_wait_ms; the one that would overflow max_batch waits its turn."""
        assert self.queue is not None
        loop = asyncio.get_running_loop()
        batch, n = [first], len(first.queries)
        deadline = loop.time() + self.limits.batch_wait_ms / 1000
        while n < self.limits.max_batch:
            timeout = deadline - loop.time()
            if timeout <= 0:
                break
            try:
                item = await asyncio.wait_for(self.queue.get(), timeout)
            except asyncio.TimeoutError:
                break
            if n + len(item.queries) > self.limits.max_batch:
                return batch, item
            batch.append(item)
            n += len(item.queries)
        return batch, None

    async def _run(self) -> None:
        assert self.queue is not None
        carry: _Pending | None = None
        while True:
            first = carry or await self.queue.get()
            batch, carry = await self._collect(first)
            # one search per distinct k: a merged k would change tie order versus a direct call
            by_k: dict[int, list[_Pending]] = {}
            for p in batch:
                by_k.setdefault(p.k, []).append(p)
            for k, items in by_k.items():
                queries = [q for p in items for q in p.queries]
                self.max_merged = max(self.max_merged, len(items))
                try:
                    results = await self._search(queries, k)
                except Exception as e:
                    if len(items) == 1:
                        self._fail(items[0], e)
                        continue
                    # One bad request must not fail the others merged with it: search them one by one.
                    log.warning("merged search of %d requests failed; retrying them one by one", len(items))
                    for p in items:
                        try:
                            p_results = await self._search(p.queries, k)
                        except Exception as e:
                            self._fail(p, e)
                            continue
                        self._answer([p], p_results)
                    continue
                self._answer(items, results)

    async def _search(self, queries: list[str], k: int) -> list[list[Passage]]:
        self.batch_calls += 1
        results = await asyncio.get_running_loop().run_in_executor(self.executor, self.retriever.search,
                                                                   queries, k)
        if len(results) != len(queries):
            raise RuntimeError(f"retriever returned {len(results)} lists for {len(queries)} queries")
        return results

    def _fail(self, p: _Pending, e: Exception) -> None:
        """Answered as 500 to the waiting request; the worker loop goes on."""
        log.error("search failed: %s: %s", type(e).__name__, e, exc_info=e)
        if not p.future.done():
            p.future.set_exception(e)

    def _answer(self, items: list[_Pending], results: list[list[Passage]]) -> None:
        start = 0
        for p in items:
            if not p.future.done():  # the client may have gone away
                p.future.set_result(results[start:start + len(p.queries)])
            start += len(p.queries)
        self.requests += len(items)
        self.queries += start


def make_app(retriever: Retriever, meta: dict[str, Any] | None = None, *, max_batch: int = 64,
             max_topk: int = 100, default_topk: int = 3, max_query_chars: int = 4096,
             max_body_bytes: int = 1 << 20, batch_wait_ms: float = 5.0) -> Any:
    """The FastAPI app serving `retriever`. `app.state.batcher` holds the batching counters."""
    limits = ServerLimits(max_batch=max_batch, max_topk=max_topk, default_topk=default_topk,
                          max_query_chars=max_query_chars, max_body_bytes=max_body_bytes,
                          batch_wait_ms=batch_wait_ms)
    if not 1 <= default_topk <= max_topk:
        raise ValueError(f"default_topk {default_topk} must be in [1, max_topk={max_topk}]")
    batcher = _Batcher(retriever, limits)
    meta = dict(meta or getattr(retriever, "meta", None) or {})

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        batcher.start()
        yield
        await batcher.stop()

    app = FastAPI(title="awarl retriever", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.batcher = batcher
    app.state.limits = limits

    def error(status: int, detail: str) -> JSONResponse:
        return JSONResponse({"detail": detail}, status_code=status)

    @app.post("/retrieve")
    async def retrieve(request: Request) -> Any:
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limits.max_body_bytes):
            return error(413, f"body larger than {limits.max_body_bytes} bytes")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limits.max_body_bytes:
                return error(413, f"body larger than {limits.max_body_bytes} bytes")
        try:
            queries, k, return_scores = parse_request(bytes(body), limits)
        except _BadRequest as e:
            return error(e.status, e.detail)
        try:
            results = await batcher.submit(queries, k)
        except Exception as e:
            return error(500, f"search failed: {type(e).__name__}: {e}")
        return format_result(results, return_scores)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "kind": meta.get("kind"),
            "passage_count": meta.get("passage_count"),
            "meta": meta,
            "limits": vars(limits),
            "batch_calls": batcher.batch_calls,
            "requests_served": batcher.requests,
            "queries_served": batcher.queries,
            "max_requests_merged": batcher.max_merged,
        }

    return app


def serve(retriever: Retriever, meta: dict[str, Any] | None = None, *, host: str = "127.0.0.1",
          port: int = 8000, **limits: Any) -> None:
    """Run the server in the foreground until interrupted."""
    import uvicorn

    if host not in ("127.0.0.1", "localhost", "::1"):
        log.warning("binding %s: the retriever has no authentication; expose it only on a trusted network",
                    host)
    uvicorn.run(make_app(retriever, meta, **limits), host=host, port=port, log_level="info")
