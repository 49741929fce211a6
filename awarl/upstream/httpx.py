"""httpx / httpcore internals awarl relies on (checked against httpx 0.28.1, httpcore 1.0.9).

- `transport_with_backend`: httpx takes no network backend, so the deadline client of awarl.http builds an
  `httpx.HTTPTransport` and swaps its private connection pool (`transport._pool`) for an
  `httpcore.ConnectionPool` over awarl's backend, with httpx's default limits (100 connections, 20 kept
  alive for 5 s). The backend subclasses `httpcore.SyncBackend` / `httpcore.NetworkStream`, whose method
  signatures the probe checks too.
"""

from __future__ import annotations

import inspect
from typing import Any

from awarl.upstream import changed, shim

CHECKED = "0.28.1 (httpcore 1.0.9)"


def transport_with_backend(network_backend: Any) -> Any:
    """An httpx.HTTPTransport whose connections are opened by `network_backend` (an httpcore.SyncBackend)."""
    import httpcore
    import httpx

    transport = httpx.HTTPTransport()
    if not isinstance(getattr(transport, "_pool", None), httpcore.ConnectionPool):
        raise changed("httpx.transport_pool", "httpx.HTTPTransport has no httpcore.ConnectionPool in _pool")
    transport._pool = httpcore.ConnectionPool(network_backend=network_backend, max_connections=100,
                                              max_keepalive_connections=20, keepalive_expiry=5.0)
    return transport


_STREAM = {"read": ["self", "max_bytes", "timeout"], "write": ["self", "buffer", "timeout"],
           "close": ["self"], "start_tls": ["self", "ssl_context", "server_hostname", "timeout"],
           "get_extra_info": ["self", "info"]}
_CONNECT = ["self", "host", "port", "timeout", "local_address", "socket_options"]


@shim("httpx.transport_pool", dist="httpx", checked=CHECKED,
      reaches="httpx.HTTPTransport()._pool (httpcore.ConnectionPool(network_backend=...)); "
              "httpcore.SyncBackend.connect_tcp, httpcore.NetworkStream methods")
def _transport_pool_shape() -> str | None:
    import httpcore
    import httpx

    if not isinstance(getattr(httpx.HTTPTransport(), "_pool", None), httpcore.ConnectionPool):
        return "HTTPTransport() keeps no httpcore.ConnectionPool in _pool"
    if "self._pool.handle_request(" not in inspect.getsource(httpx.HTTPTransport.handle_request):
        return "HTTPTransport.handle_request no longer sends through self._pool"
    if "network_backend" not in inspect.signature(httpcore.ConnectionPool).parameters:
        return "httpcore.ConnectionPool takes no network_backend"
    connect = list(inspect.signature(httpcore.SyncBackend.connect_tcp).parameters)
    if connect != _CONNECT:
        return f"httpcore.SyncBackend.connect_tcp takes {connect}, not {_CONNECT}"
    for method, expected in _STREAM.items():
        params = list(inspect.signature(getattr(httpcore.NetworkStream, method)).parameters)
        if params != expected:
            return f"httpcore.NetworkStream.{method} takes {params}, not {expected}"
    return None
