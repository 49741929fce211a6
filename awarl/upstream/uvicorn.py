"""uvicorn internals awarl relies on (checked against uvicorn 0.54.0, httptools and h11 protocols).

- `guarded_protocol`: the retrieval server's connection hygiene (awarl/retrieval/connections.py: idle and
  header timeouts, a connection limit) is a subclass of uvicorn's HTTP protocol class. It overrides the hooks
  `connection_made`, `connection_lost`, `timeout_keep_alive_handler` and `on_response_complete`, starts
  uvicorn's own keep-alive timer (`timeout_keep_alive_task`) at once, and reads the protocol's `connections`
  (the server's set of open protocols), `cycle` (the request in work, with `response_complete`), `loop` and
  `transport`. uvicorn documents none of these; the probe checks both protocol classes still have them.
"""

from __future__ import annotations

import inspect
import itertools
from typing import Any

from awarl.upstream import changed, shim

CHECKED = "0.54.0"
HOOKS = ("connection_made", "connection_lost", "timeout_keep_alive_handler", "on_response_complete")
STATE = ("self.connections", "self.cycle", "self.timeout_keep_alive_task", "self.loop", "self.transport")


def _idle(protocol: Any) -> bool:
    """No request in work: none started yet, or the last one answered."""
    cycle = getattr(protocol, "cycle", None)
    return cycle is None or bool(getattr(cycle, "response_complete", True))


def guarded_protocol(limits: Any, stats: Any, base: type | None = None) -> type:
    """uvicorn's HTTP protocol class (`base`, default its auto choice) with the idle and header timeouts and the
    connection limit of `limits` (awarl.retrieval.connections.ConnectionLimits), counted into `stats`
    (ConnectionStats)."""
    if base is None:
        from uvicorn.protocols.http.auto import AutoHTTPProtocol

        base = AutoHTTPProtocol
    missing = [h for h in HOOKS if not callable(getattr(base, h, None))]
    if missing:
        raise changed("uvicorn.protocol_hooks", f"{base.__name__} has no {', '.join(missing)}")

    arrivals = itertools.count()

    class GuardedProtocol(base):  # type: ignore[misc, valid-type]
        arrival = 0               # order of acceptance: the oldest idle connection is shed first
        _head_timer: Any = None
        _head_cycle: Any = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self.arrival = next(arrivals)   # not the loop's clock: connections accepted in one tick share it
            # uvicorn's own keep-alive timer, started at once: a connection that sends nothing is idle too
            self.timeout_keep_alive_task = self.loop.call_later(limits.idle_timeout_s,
                                                                self.timeout_keep_alive_handler)
            self._arm_head_timer()
            if len(self.connections) > limits.max_connections:
                self._make_room()
            stats.open = len(self.connections)

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            super().connection_lost(exc)
            stats.open = len(self.connections)

        def timeout_keep_alive_handler(self) -> None:
            if not self.transport.is_closing():
                stats.idle_closed += 1
            super().timeout_keep_alive_handler()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm_head_timer()

        def _arm_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._head_cycle = self.cycle
            self._head_timer = self.loop.call_later(limits.header_timeout_s, self._head_timeout)

        def _head_timeout(self) -> None:
            # no new request began since the timer was armed, and none is in work
            if self.cycle is self._head_cycle and _idle(self) and not self.transport.is_closing():
                stats.header_timeouts += 1
                self.transport.close()

        def _make_room(self) -> None:
            idle = [c for c in self.connections if c is not self and _idle(c) and not c.transport.is_closing()]
            if idle:
                stats.shed += 1
                min(idle, key=lambda c: c.arrival).transport.close()
            else:
                stats.refused += 1
                self.transport.close()

    return GuardedProtocol


@shim("uvicorn.protocol_hooks", dist="uvicorn", checked=CHECKED,
      reaches="HttpToolsProtocol / H11Protocol: " + ", ".join(HOOKS) + "; " + ", ".join(STATE))
def _protocol_hooks_shape() -> str | None:
    from uvicorn.protocols.http.h11_impl import H11Protocol
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    for cls in (HttpToolsProtocol, H11Protocol):
        missing = [h for h in HOOKS if not callable(getattr(cls, h, None))]
        if missing:
            return f"{cls.__name__} has no {', '.join(missing)}"
        src = inspect.getsource(cls)
        gone = [a for a in STATE if a not in src]
        if gone:
            return f"{cls.__name__} no longer keeps {', '.join(gone)}"
    return None
