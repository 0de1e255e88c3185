"""The realtime handshake: ``session.created`` from the server, then ``session.update``.

One place for it, shared by the service (every connect and reconnect) and by anyone who
only wants to know whether an endpoint answers (a readiness probe).
"""

from __future__ import annotations

import asyncio

from agent.stt.channels import ChannelError, RealtimeChannel
from agent.stt.protocol import (
    ErrorEvent,
    ProtocolError,
    SessionCreated,
    SessionUpdate,
    parse_server_event,
)


async def start_session(
    channel: RealtimeChannel, *, model: str | None, timeout_s: float
) -> SessionCreated:
    """Wait for ``session.created``; then, given a ``model``, configure the session with it.

    Raises:
        ChannelError: no ``session.created`` within ``timeout_s``, an unreadable first
            message, or an ``error`` event instead (the channel stays open: the caller owns it).
    """
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                event = parse_server_event(await channel.receive())
                if isinstance(event, SessionCreated):
                    break
                if isinstance(event, ErrorEvent):
                    raise ChannelError(f"server refused the session: {event.error}")
    except TimeoutError as exc:
        raise ChannelError(f"no session.created from the STT server within {timeout_s} s") from exc
    except ProtocolError as exc:
        raise ChannelError(f"no session.created from the STT server: {exc}") from exc
    if model is not None:
        await channel.send(SessionUpdate(model=model).to_json())
    return event
