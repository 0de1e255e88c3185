"""The tiny seam between the STT service and its transport: send text, receive text, close.

The service speaks the vLLM realtime protocol (see :mod:`agent.stt.protocol`) and never
knows how the text travels. Two channels implement this interface: :class:`WebSocketChannel`
(straight to vLLM's ``/v1/realtime``) and the SageMaker HTTP/2 bidirectional stream channel
(``agent.stt.sagemaker``). A channel is one connection: to reconnect, the service asks its
:data:`ChannelFactory` for a new one.

Errors, drawn once::

    ChannelError            a connection could not be opened or failed while open
      └─ ChannelClosed      the peer or the network closed an open channel
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

import websockets
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI


class ChannelError(ConnectionError):
    """The channel could not be opened, or failed while open."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class ChannelClosed(ChannelError):
    """The channel was closed by the peer or the network."""

    def __init__(self, message: str, *, code: int | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason


@runtime_checkable
class RealtimeChannel(Protocol):
    """One open connection carrying realtime JSON events as text."""

    async def send(self, text: str) -> None:
        """Send one event; raises :class:`ChannelClosed` if the channel is gone."""
        ...

    async def receive(self) -> str:
        """Wait for the next event; raises :class:`ChannelClosed` when the channel ends."""
        ...

    async def close(self) -> None:
        """Close the channel; safe to call twice."""
        ...


ChannelFactory = Callable[[], Awaitable[RealtimeChannel]]
"""Opens a fresh channel. The service calls it on start and on every reconnect."""


class WebSocketChannel:
    """A WebSocket to vLLM's ``/v1/realtime`` (or anything speaking its protocol).

    Per-message deflate is switched off: base64 audio barely compresses, and deflate was a
    third of the CPU cost of relaying these messages when measured.
    """

    def __init__(self, connection: ClientConnection) -> None:
        self._connection = connection

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        open_timeout: float = 10.0,
        close_timeout: float = 2.0,
        max_message_bytes: int = 4 * 1024 * 1024,
    ) -> WebSocketChannel:
        """Open a connection, turning every way that can fail into a :class:`ChannelError`."""
        try:
            connection = await connect(
                url,
                additional_headers=headers,
                open_timeout=open_timeout,
                close_timeout=close_timeout,
                compression=None,
                max_size=max_message_bytes,
                ping_interval=20,
                ping_timeout=20,
            )
        except InvalidURI as exc:
            raise ChannelError(
                f"{url!r} is not a WebSocket URL; use ws://HOST:PORT/v1/realtime",
                retryable=False,
            ) from exc
        except (OSError, TimeoutError, InvalidHandshake, websockets.WebSocketException) as exc:
            raise ChannelError(f"cannot connect to {url}: {exc or type(exc).__name__}") from exc
        return cls(connection)

    async def send(self, text: str) -> None:
        try:
            await self._connection.send(text)
        except ConnectionClosed as exc:
            raise _closed(exc) from exc

    async def receive(self) -> str:
        try:
            message = await self._connection.recv()
        except ConnectionClosed as exc:
            raise _closed(exc) from exc
        if isinstance(message, bytes):
            return message.decode("utf-8", errors="replace")
        return message

    async def close(self) -> None:
        await self._connection.close()


def _closed(exc: ConnectionClosed) -> ChannelClosed:
    received = exc.rcvd
    code = received.code if received else None
    reason = received.reason if received else ""
    return ChannelClosed(
        f"connection closed ({code or 'no close frame'}{': ' + reason if reason else ''})",
        code=code,
        reason=reason,
    )


def bearer_auth(api_key: str | None) -> dict[str, str] | None:
    """The ``Authorization`` header vLLM's ``--api-key`` expects; ``None`` without a key."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else None


def websocket_channel_factory(
    url: str, *, api_key: str | None = None, **options: object
) -> ChannelFactory:
    """A factory that opens a new :class:`WebSocketChannel` to ``url`` each time.

    ``api_key`` is sent as a Bearer token (vLLM's ``--api-key``); other options go to
    :meth:`WebSocketChannel.connect`.
    """
    headers = bearer_auth(api_key)

    async def open_channel() -> RealtimeChannel:
        return await WebSocketChannel.connect(url, headers=headers, **options)  # type: ignore[arg-type]

    return open_channel
