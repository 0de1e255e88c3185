"""A WebSocket relay on loopback that puts network faults between a client and a real server.

Each client connection gets its own upstream connection; messages are relayed as they are,
text or binary, in order. Faults are counted in client messages that ``counts`` accepts (all
by default) and each fires once, on the first connection that gets there, so the client's
reconnect goes through cleanly:

- ``drop_after=N``: after relaying the Nth, close the client with 1011 (a peer that vanished);
- ``freeze_after=N``: after relaying the Nth, relay nothing more either way and keep both
  sockets open (a hung peer or a black-holed route);
- ``delay_s``: every message waits this long each way, order kept (latency, not bandwidth).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Self
from urllib.parse import urlsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

Message = str | bytes


class FaultProxy:
    """``async with FaultProxy(upstream_url, ...) as proxy``: connect to ``proxy.url``."""

    def __init__(
        self,
        upstream_url: str,
        *,
        counts: Callable[[Message], bool] = lambda message: True,
        drop_after: int | None = None,
        freeze_after: int | None = None,
        delay_s: float = 0.0,
    ) -> None:
        self.upstream_url = upstream_url
        self.counts = counts
        self.drop_after = drop_after
        self.freeze_after = freeze_after
        self.delay_s = delay_s
        self.connections = 0
        self.drops = 0
        self.freezes = 0
        self._server: Server | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "the proxy is not serving"
        port = self._server.sockets[0].getsockname()[1]
        return f"ws://127.0.0.1:{port}{urlsplit(self.upstream_url).path}"

    async def __aenter__(self) -> Self:
        self._server = await serve(self._relay, "127.0.0.1", 0, compression=None)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _relay(self, client: ServerConnection) -> None:
        self.connections += 1
        async with connect(self.upstream_url, compression=None) as upstream:
            up, down = _Line(upstream, self.delay_s), _Line(client, self.delay_s)
            downstream = asyncio.create_task(down.carry(upstream))
            try:
                counted = 0
                async for message in client:
                    await up.put(message)
                    counted += self.counts(message)
                    if counted == self.drop_after and not self.drops:
                        self.drops += 1
                        await up.flush()
                        await client.close(1011, "injected failure")
                        return
                    if counted == self.freeze_after and not self.freezes:
                        self.freezes += 1
                        await up.flush()
                        up.frozen = down.frozen = True
            except ConnectionClosed:
                pass
            finally:
                downstream.cancel()
                with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                    await downstream
                await up.close()
                await down.close()


class _Line:
    """One direction of one connection: each message leaves ``delay_s`` after it came, in
    order; once ``frozen``, nothing leaves."""

    def __init__(self, sink: ClientConnection | ServerConnection, delay_s: float) -> None:
        self.sink = sink
        self.delay_s = delay_s
        self.frozen = False
        self._queue: asyncio.Queue[tuple[float, Message]] = asyncio.Queue()
        self._sender = asyncio.create_task(self._send_when_due()) if delay_s else None

    async def put(self, message: Message) -> None:
        if self.frozen:
            return
        if self._sender is None:
            await self.sink.send(message)
        else:
            self._queue.put_nowait((asyncio.get_running_loop().time() + self.delay_s, message))

    async def carry(self, source: ClientConnection | ServerConnection) -> None:
        async for message in source:
            await self.put(message)

    async def flush(self) -> None:
        """Until every message put so far has left."""
        if self._sender is not None:
            await self._queue.join()

    async def close(self) -> None:
        if self._sender is not None:
            self._sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                await self._sender

    async def _send_when_due(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due, message = await self._queue.get()
            await asyncio.sleep(max(0.0, due - loop.time()))
            if not self.frozen:
                await self.sink.send(message)
            self._queue.task_done()
