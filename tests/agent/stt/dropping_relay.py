"""A WebSocket relay on loopback that forwards to a real realtime server and can cut the
client off mid-sentence: fault injection between our STT service and the recognizer."""

from __future__ import annotations

import asyncio
import contextlib

from websockets.asyncio.client import connect
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed


class DroppingRelay:
    def __init__(self, upstream_url: str, *, drop_after_appends: int) -> None:
        self.upstream_url = upstream_url
        self.drop_after_appends = drop_after_appends
        self.connections = 0
        self.drops = 0
        self._server: Server | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"ws://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1/realtime"

    async def __aenter__(self) -> DroppingRelay:
        self._server = await serve(self._relay, "127.0.0.1", 0, compression=None)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _relay(self, client: ServerConnection) -> None:
        self.connections += 1
        first_connection = self.connections == 1
        async with connect(self.upstream_url, compression=None) as upstream:

            async def down() -> None:
                async for message in upstream:
                    await client.send(message)

            downstream = asyncio.create_task(down())
            appends = 0
            try:
                async for message in client:
                    await upstream.send(message)
                    if isinstance(message, str) and "input_audio_buffer.append" in message:
                        appends += 1
                        if first_connection and appends == self.drop_after_appends:
                            self.drops += 1
                            await client.close(1011, "injected failure")
                            return
            except ConnectionClosed:
                pass
            finally:
                downstream.cancel()
                with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                    await downstream
