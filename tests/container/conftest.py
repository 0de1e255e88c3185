"""Real servers for the bridge tests: the bridge under uvicorn, and a scripted upstream.

The scripted upstream is a real ``websockets`` server on loopback standing in for vLLM where
a test needs to steer the other side (close with a code, drop the TCP connection, stop
reading, flood) or count its open sockets. It greets like vLLM (``session.created``) and
answers ``GET /health`` like vLLM (200, or 503 while ``healthy`` is false).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Literal

import pytest
import uvicorn
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from container.bridge.app import create_app, uvicorn_config
from container.bridge.settings import BridgeSettings
from tests.fakes.serving import free_port


async def until(
    condition: Callable[[], bool | Awaitable[bool]], what: str, timeout_s: float = 10.0
) -> None:
    """Poll ``condition`` (sync or async) until true; fail the test after ``timeout_s``."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    for _ in itertools.count():
        result = condition()
        if await result if inspect.isawaitable(result) else result:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


Mode = Literal["echo", "stall", "flood"]
"""echo: send every message back; stall: read nothing until ``release_stall`` is set, then
only read; flood: send 64 kB messages as fast as the socket takes them."""


@dataclass
class UpstreamConnection:
    """What the upstream saw on one socket."""

    ws: ServerConnection
    received: list[str | bytes] = field(default_factory=list)
    close_code: int | None = None
    close_reason: str | None = None
    flooded_bytes: int = 0
    closed: asyncio.Event = field(default_factory=asyncio.Event)


class ScriptedUpstream:
    """A vLLM-shaped WebSocket peer whose behaviour the test sets before connecting."""

    def __init__(self) -> None:
        self.mode: Mode = "echo"
        self.healthy = True
        self.connections: list[UpstreamConnection] = []
        self.active: set[ServerConnection] = set()
        self.flood_message = "x" * 65536
        self.release_stall = asyncio.Event()
        self._server: Server | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/realtime"

    async def start(self) -> None:
        self._server = await serve(
            self._handle, "127.0.0.1", 0, process_request=self._process_request
        )

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def wait_connection(self, index: int = 0) -> UpstreamConnection:
        await until(lambda: len(self.connections) > index, "an upstream connection")
        return self.connections[index]

    async def wait_idle(self) -> None:
        """Until no upstream socket is open (fails the test after 10 s)."""
        await until(lambda: not self.active, "every upstream socket to close")

    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        if request.path == "/health":
            status = HTTPStatus.OK if self.healthy else HTTPStatus.SERVICE_UNAVAILABLE
            return connection.respond(status, "")
        if request.path != "/v1/realtime":
            return connection.respond(HTTPStatus.NOT_FOUND, "no such path\n")
        return None

    async def _handle(self, ws: ServerConnection) -> None:
        seen = UpstreamConnection(ws)
        self.connections.append(seen)
        self.active.add(ws)
        try:
            await ws.send(json.dumps({"type": "session.created", "id": "sess-test", "created": 1}))
            if self.mode == "stall":
                # Read nothing until released: the socket's buffers fill, and nothing that
                # happens to the peer (a close frame, a reset) can be seen until then.
                await self.release_stall.wait()
                async for message in ws:
                    seen.received.append(message)
            elif self.mode == "flood":
                while True:
                    await ws.send(self.flood_message)
                    seen.flooded_bytes += len(self.flood_message)
            else:
                async for message in ws:
                    seen.received.append(message)
                    await ws.send(message)
        except ConnectionClosed:
            pass
        finally:
            await ws.wait_closed()
            seen.close_code = ws.close_code
            seen.close_reason = ws.close_reason
            self.active.discard(ws)
            seen.closed.set()


@pytest.fixture
async def upstream() -> AsyncIterator[ScriptedUpstream]:
    peer = ScriptedUpstream()
    await peer.start()
    try:
        yield peer
    finally:
        await peer.stop()


@dataclass
class RunningBridge:
    base_http: str
    stream_url: str
    settings: BridgeSettings


@contextlib.asynccontextmanager
async def running_bridge(settings: BridgeSettings) -> AsyncIterator[RunningBridge]:
    """The bridge served by uvicorn on a free loopback port, as ``main()`` configures it."""
    server = uvicorn.Server(uvicorn_config(create_app(settings), settings, configure_logging=False))
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(10):
            while not server.started:
                if task.done():
                    task.result()
                    raise RuntimeError("bridge exited during startup")
                await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield RunningBridge(
            base_http=f"http://127.0.0.1:{port}",
            stream_url=f"ws://127.0.0.1:{port}/invocations-bidirectional-stream",
            settings=settings,
        )
    finally:
        server.should_exit = True
        await task


def bridge_settings(upstream_url: str, **overrides: object) -> BridgeSettings:
    """Loopback settings with a fresh health probe on every ``/ping`` (no cache)."""
    values: dict[str, object] = {
        "upstream_url": upstream_url,
        "host": "127.0.0.1",
        "port": 0,
        "health_cache_s": 0.0,
        "upstream_open_timeout_s": 3.0,
    }
    values.update(overrides)
    return BridgeSettings(**values)  # type: ignore[arg-type]


@pytest.fixture
def closed_port() -> Iterator[int]:
    yield free_port()
