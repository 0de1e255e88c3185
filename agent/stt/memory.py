"""Realtime channels in memory: the test seam for the service, as ``MockTransport`` is httpx's.

:func:`channel_pair` gives two connected ends; :class:`MockRealtimeEndpoint` is a
:data:`~agent.stt.channels.ChannelFactory` that runs your handler as the server of every
channel the service opens (and reopens)::

    async def server(channel: MemoryChannel) -> None:
        await channel.send(SessionCreated("sess-1").to_json())
        async for message in channel:
            ...

    stt = VoxtralRealtimeSTTService(channel_factory=MockRealtimeEndpoint(server))

Nothing touches a socket, so a test runs in milliseconds and a handler can misbehave on
purpose (stall, close mid-turn, send garbage) without a network peer.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from agent.stt.channels import ChannelClosed, RealtimeChannel


class MemoryChannel:
    """One end of an in-memory channel; ``close`` on either end ends both."""

    def __init__(self, inbox: asyncio.Queue[str | None], peer_inbox: asyncio.Queue[str | None]):
        self._inbox = inbox
        self._peer_inbox = peer_inbox
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    async def send(self, text: str) -> None:
        if self._closed:
            raise ChannelClosed("connection closed (in-memory channel)")
        self._peer_inbox.put_nowait(text)

    async def receive(self) -> str:
        if self._closed and self._inbox.empty():
            raise ChannelClosed("connection closed (in-memory channel)")
        message = await self._inbox.get()
        if message is None:
            self._closed = True
            raise ChannelClosed("connection closed by the peer (in-memory channel)")
        return message

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._peer_inbox.put_nowait(None)
            self._inbox.put_nowait(None)  # wakes a receive() waiting on this end

    def __aiter__(self) -> AsyncIterator[str]:
        return self._messages()

    async def _messages(self) -> AsyncIterator[str]:
        with contextlib.suppress(ChannelClosed):
            while True:
                yield await self.receive()


def channel_pair() -> tuple[MemoryChannel, MemoryChannel]:
    """Two connected ends: what one sends, the other receives."""
    a: asyncio.Queue[str | None] = asyncio.Queue()
    b: asyncio.Queue[str | None] = asyncio.Queue()
    return MemoryChannel(a, b), MemoryChannel(b, a)


class MockRealtimeEndpoint:
    """A channel factory whose every channel is served by ``handler`` (one task each).

    ``opened`` counts the channels opened so far (reconnects included). When the handler
    returns, its end is closed, as a server closing the socket would.
    """

    def __init__(self, handler: Callable[[MemoryChannel], Awaitable[None]]) -> None:
        self._handler = handler
        self._tasks: set[asyncio.Task[None]] = set()
        self.opened = 0

    async def __call__(self) -> RealtimeChannel:
        client, server = channel_pair()
        self.opened += 1
        task = asyncio.create_task(self._serve(server), name=f"mock-realtime-{self.opened}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return client

    async def _serve(self, channel: MemoryChannel) -> None:
        try:
            await self._handler(channel)
        finally:
            await channel.close()

    async def aclose(self) -> None:
        """Cancel every handler still running."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
