"""Serving a fake on loopback: a free port, and a uvicorn app in a background thread.

Test fixtures are synchronous and pytest-asyncio gives each test its own loop, so an HTTP
fake runs in a daemon thread with a loop of its own and outlives any one test's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlsplit

from fastapi import APIRouter, FastAPI

_HANDED_OUT: set[int] = set()
"""Ports :func:`free_port` gave this process: a port released here may be the kernel's next
answer too, before the child it was meant for has bound it."""


def free_port() -> int:
    """A port nothing listens on right now (for a child process to bind), never one this
    process was given before: ``serve`` once got its ASR server's port a moment before the ASR
    server bound it, and failed to start (other processes may still race)."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def port_of(url: str) -> int:
    """The port a ``scheme://host:port/...`` URL names."""
    port = urlsplit(url).port
    assert port is not None, f"{url} names no port"
    return port


def open_fds(pid: int | str = "self") -> int:
    """How many files (sockets included) a process has open."""
    return len(os.listdir(f"/proc/{pid}/fd"))


ESTABLISHED, CLOSE_WAIT = "01", "08"
"""TCP states as ``/proc/net/tcp`` writes them."""


def tcp_connections_to(
    port: int, *, pid: int | str = "self", states: tuple[str, ...] = (ESTABLISHED,)
) -> int:
    """TCP connections to ``port`` in ``pid``'s network namespace, in one of ``states``."""
    count = 0
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[3] in states:
                    count += 1
    return count


class BackgroundServer:
    """A uvicorn server on 127.0.0.1:0 in a daemon thread with its own event loop."""

    def __init__(self, app: Any, *, port: int = 0) -> None:
        import uvicorn

        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._run, name="test-server", daemon=True)
        self._error: BaseException | None = None

    def _run(self) -> None:
        try:
            asyncio.run(self.server.serve())  # no signal handlers outside the main thread
        except BaseException as exc:  # surfaced by start()
            self._error = exc

    def start(self, *, timeout_s: float = 60.0) -> int:
        """Start serving and return the bound port."""
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"test server did not start: {self._error!r}")
            time.sleep(0.02)
        port: int = self.server.servers[0].sockets[0].getsockname()[1]
        return port

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=15)


@contextmanager
def background(app: Any) -> Iterator[str]:
    """Serve ``app`` for the ``with`` block; yields ``http://127.0.0.1:PORT``."""
    server = BackgroundServer(app)
    port = server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


class RouterServer:
    """An OpenAI-style fake: its routes on ``self.router``, served in a background thread
    (``with Fake() as fake:``) or mounted into another app. ``port``: where to serve (0: any
    free port; a given one lets a test bring a peer back where it was)."""

    def __init__(self, *, port: int = 0) -> None:
        self.router = APIRouter()
        self.port = port
        self._server: BackgroundServer | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` once started."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI ``base_url`` (``…/v1``) once started."""
        return f"{self.url}/v1"

    def app(self) -> FastAPI:
        app = FastAPI()
        app.include_router(self.router)
        return app

    def start(self) -> Self:
        self._server = BackgroundServer(self.app(), port=self.port)
        self.port = self._server.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
