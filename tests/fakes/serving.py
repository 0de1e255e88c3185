"""Serving a fake on loopback: a free port, and a uvicorn app in a background thread.

Test fixtures are synchronous and pytest-asyncio gives each test its own loop, so an HTTP
fake runs in a daemon thread with a loop of its own and outlives any one test's loop.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Self

from fastapi import APIRouter, FastAPI


def free_port() -> int:
    """A port nothing listens on right now (for a child process to bind; others may race)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class BackgroundServer:
    """A uvicorn server on 127.0.0.1:0 in a daemon thread with its own event loop."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
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
    (``with Fake() as fake:``) or mounted into another app."""

    def __init__(self) -> None:
        self.router = APIRouter()
        self.port = 0
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
        self._server = BackgroundServer(self.app())
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
