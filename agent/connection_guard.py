"""HTTP connections that cannot exhaust the server: a header deadline and a connection cap.

uvicorn keeps a connection that trickles an incomplete request forever (its keep-alive timer
starts only after a response), so a thousand half-open requests held a thousand fds, and at
the fd limit ``/healthz`` and every call failed. This protocol closes a connection whose
request headers are not complete within ``header_timeout_s`` (a WebSocket handshake is an
HTTP request too), and answers 503 at once to connections beyond ``max_connections``.

Mirrors ``uvicorn.protocols.http.httptools_impl.HttpToolsProtocol`` (uvicorn 0.55.0:
``connection_made``, ``on_message_begin``, ``on_headers_complete``, ``connection_lost``, the
shared ``connections`` set); :data:`CHECKED_AGAINST` is pinned by a test.
"""

from __future__ import annotations

import asyncio
from typing import Any

from loguru import logger
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

CHECKED_AGAINST = {"uvicorn": "0.55.0"}

_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 5\r\n"
    b"Content-Type: text/plain\r\nContent-Length: 36\r\n\r\n"
    b"too many connections; try again soon"
)


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's HTTP protocol with a header deadline and a connection cap (set by
    :func:`guarded_http_protocol`)."""

    header_timeout_s: float = 10.0
    max_connections: int = 10_000

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            transport.write(_BUSY)
            transport.close()
            return
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()  # the next request on a kept-alive connection gets its own deadline

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._header_deadline = self.loop.call_later(self.header_timeout_s, self._too_slow)

    def _disarm(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _too_slow(self) -> None:
        self._header_deadline = None
        logger.debug(f"closing a connection from {self.client}: no complete request headers")
        self.transport.close()


def guarded_http_protocol(
    *, header_timeout_s: float, max_connections: int
) -> type[HttpToolsProtocol]:
    """The protocol class for ``uvicorn.Config(http=...)`` with these limits."""
    return type(
        "GuardedHttpProtocol",
        (GuardedHttpProtocol,),
        {"header_timeout_s": header_timeout_s, "max_connections": max_connections},
    )


def raise_open_file_limit(wanted: int) -> int:
    """Raise this process's soft fd limit towards ``wanted`` (up to the hard limit); the new
    soft limit. A server that caps connections needs the fds to hold them."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        return target
    return soft
