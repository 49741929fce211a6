"""Search-R1-compatible retrieval server (a plain ASGI app on uvicorn) with request batching.

`POST /retrieve {"queries": [...], "topk": k, "return_scores": b}` answers
`{"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}`, or, like Search-R1's own server,
lists of bare `{"id", "contents"}` documents when `return_scores` is false (or absent); a missing or zero
`topk` means the server's default. `GET /health` (and `HEAD /health`) reports the index meta (without
absolute paths) and batching counters.

Rollout workers send many small requests at once. A dispatcher hands queued requests to `workers` search
threads, merging what is queued (up to `max_batch` queries) into one `search` call: under load, requests
that arrive while the workers are busy are merged into the next call (one encoder batch, one faiss search),
and an idle server answers a lone request at once. `batch_wait_ms` > 0 additionally holds a batch open for
that long while more requests are already being received. The event loop (uvloop and httptools when
installed) keeps accepting and validating requests meanwhile. Bad requests get 4xx answers that say what
is wrong; a body that does not arrive within `body_timeout_s` gets 408; a client that goes away mid-body is
one log line; a failing search answers 500 and the server keeps serving.

FastAPI is not used here: the two routes do not need it, and its per-request cost was a large share of a
BM25 query's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath
from types import SimpleNamespace
from typing import Any

from awarl.retrieval.connections import ConnectionLimits, ConnectionStats, uvicorn_config
from awarl.retrieval.types import Passage, Retriever

log = logging.getLogger(__name__)


@dataclass
class ServerLimits:
    max_batch: int = 512           # queries per request and per merged search call (Search-R1 sends a batch's at once)
    max_topk: int = 100
    default_topk: int = 3          # Search-R1's server default when topk is missing
    max_query_chars: int = 4096
    max_body_bytes: int = 1 << 20
    batch_wait_ms: float = 0.0     # extra wait for a batch to fill, only while more requests are arriving
    workers: int = 1               # search threads
    body_timeout_s: float = 30.0   # a request body must arrive within this


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
        if len(q) > limits.max_query_chars:
            raise _BadRequest(413, f"queries[{i}] has {len(q)} characters; at most {limits.max_query_chars}")
        try:  # JSON escapes can carry lone surrogates, which encoders' tokenizers reject
            q.encode("utf-8")
        except UnicodeEncodeError:
            raise _BadRequest(422, f"queries[{i}] is not valid Unicode (lone surrogate)") from None
    topk = data.get("topk")
    # checked before the default: `false == 0` and `0.0 == 0` in Python, and neither is a topk
    if topk is not None and (isinstance(topk, bool) or not isinstance(topk, int)):
        raise _BadRequest(422, f"\"topk\" must be an integer, got {_short(topk)}")
    if topk is None or topk == 0:
        topk = limits.default_topk
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


def _is_absolute_path(value: str) -> bool:
    """A local path that names where things lie on the server's disk: `/...`, `~...` or `C:\\...`."""
    return value.startswith(("/", "~")) or PureWindowsPath(value).is_absolute()


def _without_paths(value: Any) -> Any:
    """`value` with every absolute path in it (at any depth of dicts and lists) cut to its last part."""
    if isinstance(value, dict):
        return {k: _without_paths(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_paths(v) for v in value]
    if isinstance(value, str) and _is_absolute_path(value):
        path = PurePosixPath(value) if value.startswith(("/", "~")) else PureWindowsPath(value)
        return path.name
    return value


def public_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """The index meta without absolute paths: the corpus is named by its file name (its sha256 identifies it),
    and every other path-valued field (`settings.model`: a local model folder) by its final folder name."""
    out = _without_paths(dict(meta))
    if isinstance(meta.get("corpus"), str) and meta["corpus"]:
        out["corpus"] = Path(meta["corpus"]).name
    return out


class _Batcher:
    """One queue, `workers` search threads: queued requests are merged into as few `search` calls as
    possible, and a request that finds a worker free is searched at once."""

    def __init__(self, retriever: Retriever, limits: ServerLimits) -> None:
        self.retriever = retriever
        self.limits = limits
        self.queue: asyncio.Queue[_Pending] | None = None
        self.task: asyncio.Task | None = None
        self.executor = ThreadPoolExecutor(max_workers=limits.workers, thread_name_prefix="retrieve")
        self.arriving = 0  # requests whose body is being read (they will be queued soon)
        self.batch_calls = 0
        self.requests = 0
        self.queries = 0
        self.max_merged = 0
        self._free: asyncio.Semaphore | None = None
        self._running: set[asyncio.Task] = set()

    def start(self) -> None:
        self.queue = asyncio.Queue()
        self._free = asyncio.Semaphore(self.limits.workers)
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
        self.queue.put_nowait(_Pending(queries, k, fut))
        return await fut

    async def _collect(self, first: _Pending) -> tuple[list[_Pending], _Pending | None]:
        """`first` and what is queued behind it (up to max_batch queries; the one that would overflow waits
        its turn). With batch_wait_ms, waits up to that long for requests still being received."""
        assert self.queue is not None
        loop = asyncio.get_running_loop()
        batch, n = [first], len(first.queries)
        deadline = loop.time() + self.limits.batch_wait_ms / 1000
        while n < self.limits.max_batch:
            try:
                item = self.queue.get_nowait()
            except asyncio.QueueEmpty:
                timeout = deadline - loop.time()
                if timeout <= 0 or not self.arriving:
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
        assert self.queue is not None and self._free is not None
        carry: _Pending | None = None
        while True:
            await self._free.acquire()  # a worker is free: take what is queued now
            first = carry or await self.queue.get()
            batch, carry = await self._collect(first)
            task = asyncio.get_running_loop().create_task(self._serve_batch(batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _serve_batch(self, batch: list[_Pending]) -> None:
        assert self._free is not None
        try:
            # one search per distinct k: a merged k would change tie order versus a direct call
            by_k: dict[int, list[_Pending]] = {}
            for p in batch:
                by_k.setdefault(p.k, []).append(p)
            for k, items in by_k.items():
                await self._serve_group(k, items)
        finally:
            self._free.release()

    async def _serve_group(self, k: int, items: list[_Pending]) -> None:
        queries = [q for p in items for q in p.queries]
        self.max_merged = max(self.max_merged, len(items))
        try:
            results = await self._search(queries, k)
        except Exception as e:
            if len(items) == 1:
                self._fail(items[0], e)
                return
            # One bad request must not fail the others merged with it: search them one by one.
            log.warning("merged search of %d requests failed; retrying them one by one", len(items))
            for p in items:
                try:
                    p_results = await self._search(p.queries, k)
                except Exception as e:
                    self._fail(p, e)
                    continue
                self._answer([p], p_results)
            return
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


class _Disconnected(Exception):
    """The client went away before its request body was complete."""


class RetrievalApp:
    """The ASGI application: routes, body limits and deadlines, JSON in and out."""

    def __init__(self, retriever: Retriever, meta: dict[str, Any], limits: ServerLimits) -> None:
        self.limits = limits
        self.batcher = _Batcher(retriever, limits)
        self.meta = public_meta(meta)
        self.state = SimpleNamespace(batcher=self.batcher, limits=limits)
        self.disconnects = 0
        self.body_timeouts = 0
        self.connections = ConnectionStats()   # kept by serve()'s connection guard (awarl.retrieval.connections)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if path == "/retrieve":
            if method != "POST":
                await _send_json(send, 405, {"detail": "use POST /retrieve"}, extra=[(b"allow", b"POST")])
                return
            await self._retrieve(scope, receive, send)
        elif path == "/health":
            if method not in ("GET", "HEAD"):
                await _send_json(send, 405, {"detail": "use GET /health"}, extra=[(b"allow", b"GET, HEAD")])
                return
            await _send_json(send, 200, self.health(), head=method == "HEAD")
        else:
            await _send_json(send, 404, {"detail": f"no route {path[:100]}; POST /retrieve or GET /health"})

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.batcher.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.batcher.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def health(self) -> dict[str, Any]:
        b = self.batcher
        return {"status": "ok", "kind": self.meta.get("kind"), "passage_count": self.meta.get("passage_count"),
                "meta": self.meta, "limits": vars(self.limits), "batch_calls": b.batch_calls,
                "requests_served": b.requests, "queries_served": b.queries, "max_requests_merged": b.max_merged,
                "client_disconnects": self.disconnects, "body_timeouts": self.body_timeouts,
                "connections": vars(self.connections)}

    async def _read_body(self, scope: dict[str, Any], receive: Any) -> bytes:
        limit = self.limits.max_body_bytes
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            raise _BadRequest(413, f"body larger than {limit} bytes")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.limits.body_timeout_s
        body = bytearray()
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                self.body_timeouts += 1
                raise _BadRequest(408, f"request body not received within {self.limits.body_timeout_s:g} s") from None
            if message["type"] == "http.disconnect":
                raise _Disconnected
            body += message.get("body", b"")
            if len(body) > limit:
                raise _BadRequest(413, f"body larger than {limit} bytes")
            if not message.get("more_body", False):
                return bytes(body)

    async def _retrieve(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.batcher.arriving += 1
        try:
            try:
                body = await self._read_body(scope, receive)
            finally:
                self.batcher.arriving -= 1
            queries, k, return_scores = parse_request(body, self.limits)
        except _Disconnected:
            self.disconnects += 1
            client = scope.get("client") or ("?", 0)
            log.info("client %s:%s disconnected before its request body was complete", *client[:2])
            return
        except _BadRequest as e:
            await _send_json(send, e.status, {"detail": e.detail}, close=e.status in (408, 413))
            return
        # A blank query is answered with no passages, never searched: Search-R1's agent sends the empty query a
        # model wrote (`<search> </search>`) among the others of its batch, and a refusal failed all of them.
        asked = [i for i, q in enumerate(queries) if q.strip()]
        try:
            found = await self.batcher.submit([queries[i] for i in asked], k) if asked else []
        except Exception as e:
            await _send_json(send, 500, {"detail": f"search failed: {type(e).__name__}: {e}"})
            return
        results: list[list[Passage]] = [[] for _ in queries]
        for i, hits in zip(asked, found, strict=True):
            results[i] = hits
        await _send_json(send, 200, format_result(results, return_scores))


async def _send_json(send: Any, status: int, payload: Any, *, head: bool = False, close: bool = False,
                     extra: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               *(extra or [])]
    if close:  # the rest of an oversized or stalled body is not read: end the connection
        headers.append((b"connection", b"close"))
    with contextlib.suppress(OSError):
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if head else body})


def make_app(retriever: Retriever, meta: dict[str, Any] | None = None, *, max_batch: int = 512,
             max_topk: int = 100, default_topk: int = 3, max_query_chars: int = 4096,
             max_body_bytes: int = 1 << 20, batch_wait_ms: float = 0.0, workers: int = 1,
             body_timeout_s: float = 30.0) -> RetrievalApp:
    """The ASGI app serving `retriever`. `app.state.batcher` holds the batching counters."""
    if not 1 <= default_topk <= max_topk:
        raise ValueError(f"default_topk {default_topk} must be in [1, max_topk={max_topk}]")
    if workers < 1 or body_timeout_s <= 0 or batch_wait_ms < 0:
        raise ValueError("workers must be >= 1, body_timeout_s > 0 and batch_wait_ms >= 0")
    limits = ServerLimits(max_batch=max_batch, max_topk=max_topk, default_topk=default_topk,
                          max_query_chars=max_query_chars, max_body_bytes=max_body_bytes,
                          batch_wait_ms=batch_wait_ms, workers=workers, body_timeout_s=body_timeout_s)
    return RetrievalApp(retriever, dict(meta or getattr(retriever, "meta", None) or {}), limits)


def default_workers() -> int:
    return max(1, min(8, os.cpu_count() or 1))


def serve(retriever: Retriever, meta: dict[str, Any] | None = None, *, host: str = "127.0.0.1",
          port: int = 8000, access_log: bool = False, header_timeout_s: float = 10.0, idle_timeout_s: float = 15.0,
          max_connections: int | None = None, **limits: Any) -> None:
    """Run the server in the foreground until interrupted (uvloop + httptools when installed), with the
    connection guard of awarl.retrieval.connections (idle and header timeouts, a connection limit)."""
    import uvicorn

    if host not in ("127.0.0.1", "localhost", "::1"):
        log.warning("binding %s: the retriever has no authentication; expose it only on a trusted network",
                    host)
    app = make_app(retriever, meta, **limits)
    guard = ConnectionLimits(header_timeout_s, idle_timeout_s, max_connections)
    log.info("connections: at most %d (idle ones closed after %g s, request heads due within %g s)",
             guard.max_connections, guard.idle_timeout_s, guard.header_timeout_s)
    uvicorn.Server(uvicorn_config(app, host=host, port=port, limits=guard, stats=app.connections,
                                  access_log=access_log)).run()
