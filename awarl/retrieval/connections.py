"""Connection hygiene of the retrieval server: idle and header timeouts and a connection limit.

uvicorn closes a kept-alive connection after `timeout_keep_alive`, but a connection that never sends a byte,
or sends its request head a byte at a time, is held forever; once the process runs out of file descriptors
every new client is reset. `awarl.upstream.uvicorn.guarded_protocol` wraps uvicorn's HTTP protocol (httptools or
h11; a subclass of upstream's protocol class, so it lives in the upstream room with a probe of the hooks it
overrides) with the limits below:

- an idle timeout from the start: a new connection that sends nothing for `idle_timeout_s` is closed, as
  uvicorn closes kept-alive ones;
- a header timeout: a request head must be complete within `header_timeout_s` of connecting or of the
  previous response (slow-header clients);
- a connection limit (the server's concurrency limit: each connection has at most one request in work,
  pipelined ones wait with reading paused): past `max_connections` the oldest idle connection (no request in
  work) is closed to make room, so an idle flood never locks out a new client; when every connection has a
  request in work, the new one is closed at once (clients retry). The default stays below the process's
  descriptor limit, so `accept` never fails for lack of one.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from typing import Any

FD_RESERVE = 64  # descriptors left for the index files, the event loop and logging


def default_max_connections() -> int:
    """1024, or fewer where the descriptor limit (`ulimit -n`) leaves less room."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    room = 1024 if soft == resource.RLIM_INFINITY else soft - FD_RESERVE
    return max(8, min(1024, room))


@dataclass
class ConnectionLimits:
    header_timeout_s: float = 10.0
    idle_timeout_s: float = 15.0   # longer than clients' keep-alive expiry (httpx: 5 s), so they close first
    max_connections: int | None = None   # None: default_max_connections()

    def __post_init__(self) -> None:
        if self.header_timeout_s <= 0 or self.idle_timeout_s <= 0:
            raise ValueError("header_timeout_s and idle_timeout_s must be > 0")
        if self.max_connections is None:
            self.max_connections = default_max_connections()
        if self.max_connections < 1:
            raise ValueError("max_connections must be >= 1")


@dataclass
class ConnectionStats:
    open: int = 0
    idle_closed: int = 0       # connections closed after idle_timeout_s without a byte
    header_timeouts: int = 0   # connections closed for a request head that did not arrive in time
    shed: int = 0              # idle connections closed to make room for a new one
    refused: int = 0           # new connections closed because every connection had a request in work


def uvicorn_config(app: Any, *, host: str, port: int, limits: ConnectionLimits, stats: ConnectionStats,
                   access_log: bool = False, log_level: str = "info") -> Any:
    """The uvicorn.Config `serve()` runs (tests run the same one)."""
    import uvicorn

    from awarl.upstream.uvicorn import guarded_protocol

    # timeout_keep_alive is annotated int but only ever handed to loop.call_later: a fraction of a second works
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=access_log,
                          timeout_keep_alive=limits.idle_timeout_s,  # type: ignore[arg-type]
                          http=guarded_protocol(limits, stats), lifespan="on")
