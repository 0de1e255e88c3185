"""One SageMaker stream relayed to one vLLM ``/v1/realtime`` socket, both ways.

SageMaker turns each request payload part into one WebSocket frame (``UTF8`` → text,
``BINARY`` or unset → binary) and each text frame we send back into a ``UTF8`` part. vLLM
reads only text frames and ends its session on a binary one, so the bridge:

- relays text frames verbatim both ways (it never parses them: vLLM answers bad JSON with
  its own ``invalid_json`` error, exactly as it would without the bridge);
- forwards a binary frame as text when it holds a UTF-8 JSON object (a client that forgot
  ``data_type="UTF8"``) and answers any other binary frame with an ``error`` event, sending
  nothing to vLLM;
- answers a message over the size limit with an ``error`` event and closes with 1009;
- propagates closes: the side that stays is closed with the other side's code when that
  code can be sent, else with 1001 (client vanished) or 1011 (vLLM failed); and it always
  closes the other socket, whatever ended the stream, so no vLLM session outlives its caller.

Buffering is bounded per stream, by backpressure rather than by dropping: each pump awaits
its send before reading the next message, so at most ``max_queue`` messages from vLLM wait in
the WebSocket client's queue (it stops reading the socket past that), and at most one client
message waits in uvicorn (its sans-I/O protocol pauses reading until the app takes it). Sends
wait while the socket's write buffer is above its high-water mark (32-64 KiB). A slow side
therefore slows the other down through TCP; memory per stream stays below roughly
``(max_queue + 2) * max_message_bytes`` in the worst case and a few kilobytes in practice.

Backpressure has one blind spot: while a pump waits on a side that reads nothing, it cannot
see the other side leave (uvicorn stops reading a client whose message we haven't taken).
So a send that can't complete within ``send_timeout_s`` ends the stream as stalled: the
client gets 1011 when vLLM stopped reading, vLLM gets 1001 when the client did.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Literal

from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidURI, WebSocketException

from .metrics import BridgeMetrics, ErrorKind, Initiator
from .settings import BridgeSettings

# vLLM's own error codes (its realtime ``error`` event), so clients need no new vocabulary.
INVALID_EVENT = "invalid_event"
PROCESSING_ERROR = "processing_error"

_MAX_REASON_BYTES = 123  # RFC 6455: a close reason fits in a 125-byte control frame.
_CLIENT_GONE = (WebSocketDisconnect, RuntimeError, OSError)


def error_event(message: str, code: str) -> str:
    """The vLLM realtime ``error`` event (``agent.stt.protocol.ErrorEvent``'s wire shape).

    Written out here rather than imported: the container image carries only the bridge.
    """
    return json.dumps({"type": "error", "error": message, "code": code})


def binary_as_text(data: bytes) -> str | None:
    """The frame's text if it is a UTF-8 JSON object (a realtime event sent as binary)."""
    if not data.lstrip()[:1] == b"{":
        return None
    try:
        text = data.decode("utf-8")
        parsed = json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return text if isinstance(parsed, dict) else None


def can_send(code: int) -> bool:
    """Close codes an endpoint may put on the wire (RFC 6455 §7.4)."""
    return code in (1000, 1001, 1002, 1003) or 1007 <= code <= 1014 or 3000 <= code <= 4999


def upstream_code_for(client_code: int) -> int:
    """The code vLLM is closed with when the client ends the stream."""
    if can_send(client_code):
        return client_code
    # 1005 (no status) is also what uvicorn reports for a client whose connection just
    # dropped, without a close frame, so it cannot be told apart from a vanished client.
    return 1001


def client_code_for(upstream_code: int) -> int:
    """The code the client is closed with when vLLM ends the stream."""
    if can_send(upstream_code):
        return upstream_code
    return 1000 if upstream_code == 1005 else 1011  # 1006 and the like: vLLM failed.


def _reason(text: str) -> str:
    return text.encode("utf-8")[:_MAX_REASON_BYTES].decode("utf-8", errors="ignore")


@dataclass(frozen=True, slots=True)
class Ending:
    """How a stream ended and how each side still open must be closed."""

    initiator: Initiator
    client_code: int | None  # None: the client is already gone
    upstream_code: int  # ignored when vLLM closed first (closing again is a no-op)
    reason: str
    error: ErrorKind | None = None


class RelaySession:
    """One accepted client stream; :meth:`run` returns when both sockets are closed."""

    def __init__(
        self,
        *,
        client: WebSocket,
        settings: BridgeSettings,
        metrics: BridgeMetrics,
        logger: logging.Logger,
    ) -> None:
        self._client = client
        self._settings = settings
        self._metrics = metrics
        self._log = logger
        self._id = uuid.uuid4().hex[:12]
        self._counts = {"client_to_upstream": 0, "upstream_to_client": 0}

    async def run(self) -> None:
        # Accept first: SageMaker wants the socket accepted within 250 ms, and a client
        # can only be told "vLLM is unavailable" on an accepted socket.
        await self._client.accept()
        started = time.monotonic()
        self._metrics.sessions.inc()
        self._metrics.sessions_active.inc()
        ending = Ending("bridge", 1011, 1001, "bridge stopped the stream")
        try:
            ending = await self._run_accepted()
        finally:
            self._metrics.sessions_active.dec()
            self._metrics.closes[ending.initiator].inc()
            self._log.info(
                "session.closed",
                extra={
                    "fields": {
                        "session": self._id,
                        "initiator": ending.initiator,
                        "client_code": ending.client_code,
                        "upstream_code": ending.upstream_code,
                        "reason": ending.reason,
                        "error": ending.error,
                        "duration_s": round(time.monotonic() - started, 3),
                        "messages_in": self._counts["client_to_upstream"],
                        "messages_out": self._counts["upstream_to_client"],
                    }
                },
            )

    async def _run_accepted(self) -> Ending:
        client = self._client.client
        self._log.info(
            "session.opened",
            extra={
                "fields": {
                    "session": self._id,
                    "client": f"{client.host}:{client.port}" if client else None,
                    "trace": self._client.headers.get("x-amzn-trace-id"),
                    "upstream": self._settings.upstream_url,
                }
            },
        )
        try:
            upstream = await self._connect()
        except (OSError, TimeoutError, InvalidURI, WebSocketException) as exc:
            detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            self._metrics.error("upstream_unavailable")
            self._log.warning(
                "upstream.unavailable",
                extra={"fields": {"session": self._id, "detail": detail}},
            )
            await self._send_client(
                error_event(f"speech server unavailable ({detail}); retry later", PROCESSING_ERROR)
            )
            await self._close_client(1011, "speech server unavailable")
            return Ending("bridge", 1011, 1011, "speech server unavailable", "upstream_unavailable")

        ending = Ending("bridge", 1001, 1001, "bridge shutting down")
        try:
            ending = await self._relay(upstream)
            return ending
        finally:
            # Runs on every path, cancellation included: the vLLM socket never outlives this.
            if ending.client_code is not None:
                await self._close_client(ending.client_code, ending.reason)
            await self._close_upstream(upstream, ending.upstream_code, ending.reason)

    async def _connect(self) -> ClientConnection:
        s = self._settings
        return await connect(
            s.upstream_url,
            compression=None,  # loopback: deflate would only burn CPU
            proxy=None,  # never send the loopback hop through an HTTP(S)_PROXY
            open_timeout=s.upstream_open_timeout_s,
            close_timeout=s.upstream_close_timeout_s,
            ping_interval=s.upstream_ping_interval_s,
            ping_timeout=s.upstream_ping_interval_s,
            max_size=s.max_message_bytes,
            max_queue=s.upstream_max_queue,
        )

    async def _relay(self, upstream: ClientConnection) -> Ending:
        inbound = asyncio.create_task(self._client_to_upstream(upstream))
        outbound = asyncio.create_task(self._upstream_to_client(upstream))
        try:
            done, _ = await asyncio.wait((inbound, outbound), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (inbound, outbound):
                task.cancel()
            await asyncio.gather(inbound, outbound, return_exceptions=True)
        first = inbound if inbound in done else outbound
        failure = first.exception()
        if failure is not None:
            self._metrics.error("internal")
            self._log.error(
                "session.failed",
                extra={"fields": {"session": self._id}},
                exc_info=failure,
            )
            return Ending("bridge", 1011, 1011, "bridge error", "internal")
        return first.result()

    async def _client_to_upstream(self, upstream: ClientConnection) -> Ending:
        limit = self._settings.max_message_bytes
        while True:
            message = await self._client.receive()
            if message["type"] == "websocket.disconnect":
                code = int(message.get("code") or 1005)
                reason = message.get("reason") or f"client closed ({code})"
                return Ending("client", None, upstream_code_for(code), reason)
            text: str | None = message.get("text")
            if text is None:
                data: bytes | None = message.get("bytes")
                if data is None:
                    continue
                if len(data) > limit:
                    return await self._too_large(len(data))
                text = binary_as_text(data)
                if text is None:
                    await self._reject_binary(len(data))
                    continue
            elif len(text) > limit // 4 and len(text.encode("utf-8")) > limit:
                return await self._too_large(len(text.encode("utf-8")))
            try:
                async with asyncio.timeout(self._settings.send_timeout_s):
                    await upstream.send(text)
            except ConnectionClosed:
                return self._upstream_closed(upstream)
            except TimeoutError:
                return self._stalled("upstream")
            self._metrics.relayed("client_to_upstream", len(text))
            self._counts["client_to_upstream"] += 1

    async def _upstream_to_client(self, upstream: ClientConnection) -> Ending:
        while True:
            try:
                message = await upstream.recv()
            except ConnectionClosed:
                return self._upstream_closed(upstream)
            try:
                async with asyncio.timeout(self._settings.send_timeout_s):
                    if isinstance(message, str):
                        await self._client.send_text(message)
                    else:
                        await self._client.send_bytes(message)
            except _CLIENT_GONE:
                return Ending("client", None, 1001, "client went away")
            except TimeoutError:
                return self._stalled("client")
            self._metrics.relayed("upstream_to_client", len(message))
            self._counts["upstream_to_client"] += 1

    def _upstream_closed(self, upstream: ClientConnection) -> Ending:
        code = upstream.close_code or 1006
        reason = upstream.close_reason or ""
        client_code = client_code_for(code)
        if client_code == 1011 and not can_send(code):
            self._metrics.error("upstream_abnormal_close")
            self._log.warning(
                "upstream.lost",
                extra={"fields": {"session": self._id, "upstream_code": code}},
            )
            return Ending(
                "upstream", 1011, 1000, f"speech server closed abnormally ({code})",
                "upstream_abnormal_close",
            )  # fmt: skip
        return Ending("upstream", client_code, 1000, reason or f"speech server closed ({code})")

    def _stalled(self, side: Literal["client", "upstream"]) -> Ending:
        timeout = self._settings.send_timeout_s
        self._log.warning(
            f"{side}.stalled",
            extra={"fields": {"session": self._id, "send_timeout_s": timeout}},
        )
        if side == "upstream":
            self._metrics.error("upstream_stalled")
            reason = f"speech server took no message for {timeout:g} s"
            return Ending("bridge", 1011, 1011, reason, "upstream_stalled")
        self._metrics.error("client_stalled")
        return Ending(
            "bridge", 1008, 1001, f"client took no message for {timeout:g} s", "client_stalled"
        )

    async def _reject_binary(self, size: int) -> None:
        self._metrics.error("invalid_binary")
        self._log.info(
            "client.invalid_binary", extra={"fields": {"session": self._id, "bytes": size}}
        )
        await self._send_client(
            error_event(
                "binary frame is not a UTF-8 JSON event; send realtime events as text "
                "(SageMaker: PayloadPart DataType UTF8)",
                INVALID_EVENT,
            )
        )

    async def _too_large(self, size: int) -> Ending:
        limit = self._settings.max_message_bytes
        self._metrics.error("message_too_large")
        self._log.warning(
            "client.message_too_large",
            extra={"fields": {"session": self._id, "bytes": size, "limit": limit}},
        )
        await self._send_client(
            error_event(
                f"message of {size} bytes is over the {limit}-byte limit; "
                "send audio in smaller appends",
                INVALID_EVENT,
            )
        )
        return Ending("bridge", 1009, 1000, "message too large", "message_too_large")

    async def _send_client(self, text: str) -> None:
        with contextlib.suppress(*_CLIENT_GONE, TimeoutError):
            async with asyncio.timeout(self._settings.send_timeout_s):
                await self._client.send_text(text)

    async def _close_client(self, code: int, reason: str) -> None:
        # Bounded: a client that reads nothing would hold the close frame (and us) forever.
        with contextlib.suppress(*_CLIENT_GONE, TimeoutError):
            async with asyncio.timeout(self._settings.upstream_close_timeout_s):
                await self._client.close(code, _reason(reason))

    async def _close_upstream(self, upstream: ClientConnection, code: int, reason: str) -> None:
        try:
            await upstream.close(code, _reason(reason))
        finally:
            # close() waits at most close_timeout for vLLM's reply, then drops the TCP
            # connection; abort() covers a close() cut short by cancellation.
            if upstream.transport is not None and not upstream.transport.is_closing():
                upstream.transport.abort()
