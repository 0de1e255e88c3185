"""A local stand-in for the SageMaker AI runtime's HTTP/2 bidirectional streaming API.

AWS cannot run here, so this plays its part on the wire, as the real SDK client sees it:

* HTTP/2 over TLS only (the SDK negotiates ``h2`` by ALPN), with a certificate from a CA the
  test makes (:func:`make_loopback_tls`; trust it with ``SSL_CERT_FILE``).
* ``POST /endpoints/{name}/invocations-bidirectional-stream`` with a SigV4 ``Authorization``
  header. The signature is checked against the configured secret (403 otherwise), as is
  every event's ``:chunk-signature`` in the chain seeded by it.
* Errors before the stream opens are restJson1 errors as the SDK deserializes them:
  ``x-amzn-errortype`` names the modeled shape (``InputValidationError`` 400,
  ``ModelError`` 424, ``ServiceUnavailableError`` 503, ...), the JSON body its members.
* The request body is an ``application/vnd.amazon.eventstream`` of signed wrappers
  (``:date``, ``:chunk-signature``) whose payload is the ``PayloadPart`` event; the empty
  signed wrapper ends the input.
* Each part becomes exactly one WebSocket frame to the container (``upstream_url`` plus the
  invocation path): ``DataType=UTF8`` → text, ``BINARY`` or unset → binary, ``PARTIAL`` parts
  open a fragmented message that the next ``COMPLETE`` (or unset) part finishes.
* Each container frame comes back as one ``PayloadPart`` event (``DataType`` from the
  message's opcode, ``CompletionState`` from its FIN bit). A container close becomes a
  ``ModelStreamError`` exception event (``ErrorCode`` = close code, ``Message`` = reason),
  then the end of the response stream.

Faults a test can inject: :meth:`SageMakerRuntimeStandIn.fail_next_open` (an HTTP error at
open), :meth:`~SageMakerRuntimeStandIn.fail_streams` (``InternalStreamFailure``) and
:meth:`~SageMakerRuntimeStandIn.cut_streams` (the stream ends or is reset mid-way). What it saw
is in :attr:`~SageMakerRuntimeStandIn.streams`.

Runs on the test's event loop: ``async with SageMakerRuntimeStandIn(...) as runtime``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import hmac
import json
import re
import ssl
import subprocess
import uuid
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
from smithy_aws_event_stream.events import Event, EventHeaderEncoder, EventMessage
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri

CONTAINER_PATH = "/invocations-bidirectional-stream"
"""Where SageMaker connects inside the container unless the caller names another path."""

_PATH = re.compile(r"^/endpoints/(?P<name>[^/?]+)/invocations-bidirectional-stream$")
_AUTH = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/"
    r"(?P<service>[^/]+)/aws4_request, ?SignedHeaders=(?P<signed>[a-z0-9;:-]+), ?"
    r"Signature=(?P<signature>[0-9a-f]{64})$"
)
_STREAMING_PAYLOAD = "STREAMING-AWS4-HMAC-SHA256-EVENTS"
_EVENTSTREAM = "application/vnd.amazon.eventstream"
_SIGV4_TIME = "%Y%m%dT%H%M%SZ"


# ----------------------------------------------------------------------------- TLS


@dataclass(frozen=True)
class LoopbackTLS:
    """A CA and a server certificate for 127.0.0.1/localhost, made with ``openssl``."""

    ca_file: Path
    cert_file: Path
    key_file: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert_file, self.key_file)
        context.set_alpn_protocols(["h2"])
        return context


def make_loopback_tls(directory: Path) -> LoopbackTLS:
    """Make a throwaway CA and a server certificate signed by it (the SDK verifies TLS)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_pem = directory / "ca.key", directory / "ca.pem"
    key, csr, cert = directory / "server.key", directory / "server.csr", directory / "server.pem"
    ext = directory / "server.ext"
    ext.write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"
    )

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key),
            "-out", str(ca_pem), "-days", "2", "-subj", "/CN=voice-agent test CA")  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
            "-subj", "/CN=127.0.0.1")  # fmt: skip
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca_pem), "-CAkey", str(ca_key),
            "-CAcreateserial", "-out", str(cert), "-days", "2", "-extfile", str(ext))  # fmt: skip
    return LoopbackTLS(ca_file=ca_pem, cert_file=cert, key_file=key)


# ----------------------------------------------------------------------------- records


@dataclass
class PartRecord:
    """One request ``PayloadPart`` as it arrived (``None`` = header absent)."""

    data_type: str | None
    completion_state: str | None
    size: int


@dataclass
class StreamRecord:
    """What the stand-in saw of one bidirectional stream."""

    endpoint_name: str
    headers: dict[str, str]
    status: int = 0
    error_type: str | None = None
    parts: list[PartRecord] = field(default_factory=list)
    frames_to_container: list[tuple[str, bool]] = field(default_factory=list)
    """``(opcode name, fin)`` of each frame sent upstream, in order."""
    input_ended: bool = False
    """The client sent the signed empty message that ends its input."""
    request_ended: bool = False
    """The client ended the HTTP/2 request stream."""
    reset_by_client: bool = False
    finished: bool = False
    """The stand-in is done with this stream (response ended or reset, upstream closed)."""


@dataclass
class _OpenFault:
    status: int
    error_type: str
    body: dict[str, Any]


_OPEN_ERRORS = {
    400: ("InputValidationError", "The request is not valid."),
    424: ("ModelError", "Received server error from the model container."),
    500: ("InternalServerError", "An internal error occurred."),
    503: ("ServiceUnavailableError", "The service is unavailable. Try again later."),
}


# ----------------------------------------------------------------------------- the server


class SageMakerRuntimeStandIn:
    """The stand-in runtime. Start it with ``async with``; point the SDK at :attr:`url`."""

    def __init__(
        self,
        *,
        upstream_url: str,
        tls: LoopbackTLS,
        endpoints: tuple[str, ...] = ("voxtral",),
        region: str = "us-east-1",
        access_key_id: str = "test",
        secret_access_key: str = "test",
        variant: str = "AllTraffic",
    ) -> None:
        self.upstream_url = upstream_url.rstrip("/")
        self.endpoints = endpoints
        self.region = region
        self.access_key_id = access_key_id
        self.secret_access_key = secret_access_key
        self.variant = variant
        self.streams: list[StreamRecord] = []
        self._tls = tls
        self._server: asyncio.Server | None = None
        self._connections: set[_H2Connection] = set()
        self._open_faults: list[_OpenFault] = []
        self.port = 0

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    async def __aenter__(self) -> SageMakerRuntimeStandIn:
        self._server = await asyncio.start_server(
            self._serve, "127.0.0.1", 0, ssl=self._tls.server_context()
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        for connection in list(self._connections):
            await connection.shutdown()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                await self._server.wait_closed()

    # ------------------------------------------------------------------ faults

    def fail_next_open(self, status: int, message: str | None = None, **members: Any) -> None:
        """Answer the next open with the modeled error for ``status`` (400/424/500/503)."""
        error_type, default = _OPEN_ERRORS[status]
        body: dict[str, Any] = {"Message": message or default, **members}
        self._open_faults.append(_OpenFault(status, error_type, body))

    async def fail_streams(self, message: str = "Internal stream failure") -> None:
        """Send ``InternalStreamFailure`` on every open stream and end it."""
        for stream in self._open_streams():
            await stream.fail(_exception_event("InternalStreamFailure", {"Message": message}))

    async def cut_streams(self, *, reset: bool = False) -> None:
        """End every open response stream mid-way (``reset``: RST_STREAM instead of END_STREAM)."""
        for stream in self._open_streams():
            await stream.cut(reset=reset)

    # ------------------------------------------------------------------ observations

    @property
    def active_streams(self) -> int:
        return len(self._open_streams())

    @property
    def active_upstreams(self) -> int:
        return sum(1 for s in self._all_streams() if s.upstream is not None)

    async def wait_until(self, predicate: Any, timeout: float = 10.0) -> None:
        """Wait for ``predicate()`` to hold (the bound only stops a broken test from hanging)."""
        async with asyncio.timeout(timeout):
            while not predicate():  # noqa: ASYNC110 - state spread over sockets and tasks
                await asyncio.sleep(0.01)

    def _all_streams(self) -> list[_Stream]:
        return [s for c in self._connections for s in c.streams.values()]

    def _open_streams(self) -> list[_Stream]:
        return [s for s in self._all_streams() if not s.record.finished]

    # ------------------------------------------------------------------ serving

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ssl_object = writer.get_extra_info("ssl_object")
        if ssl_object is None or ssl_object.selected_alpn_protocol() != "h2":
            writer.close()  # like the real endpoint: HTTP/2 only
            return
        connection = _H2Connection(self, reader, writer)
        self._connections.add(connection)
        try:
            await connection.run()
        finally:
            await connection.shutdown()
            self._connections.discard(connection)

    def _take_open_fault(self) -> _OpenFault | None:
        return self._open_faults.pop(0) if self._open_faults else None


class _H2Connection:
    """One client TCP connection: the HTTP/2 state machine and its streams."""

    def __init__(
        self,
        runtime: SageMakerRuntimeStandIn,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.runtime = runtime
        self.reader = reader
        self.writer = writer
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        )
        self.streams: dict[int, _Stream] = {}
        self.window_open = asyncio.Event()
        self._closed = False

    async def run(self) -> None:
        self.h2.initiate_connection()
        self.flush()
        while not self._closed:
            data = await self.reader.read(65536)
            if not data:
                break
            try:
                events = self.h2.receive_data(data)
            except h2.exceptions.ProtocolError:
                self.flush()
                break
            for event in events:
                await self._handle(event)
            self.flush()

    async def _handle(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.RequestReceived):
            headers = {str(k): str(v) for k, v in event.headers or []}
            stream = _Stream(self, event.stream_id, headers)
            self.streams[event.stream_id] = stream
            self.runtime.streams.append(stream.record)
            stream.task = asyncio.create_task(stream.run())
        elif isinstance(event, h2.events.DataReceived):
            assert event.stream_id is not None
            self.h2.acknowledge_received_data(event.flow_controlled_length or 0, event.stream_id)
            if (target := self.streams.get(event.stream_id)) is not None:
                target.receive_body(event.data or b"")
        elif isinstance(event, h2.events.StreamEnded):
            if (ended := self.streams.get(event.stream_id or 0)) is not None:
                ended.record.request_ended = True
                ended.receive_body(None)
        elif isinstance(event, h2.events.StreamReset):
            if (reset := self.streams.get(event.stream_id or 0)) is not None:
                reset.record.reset_by_client = True
                await reset.abandon()
        elif isinstance(event, h2.events.WindowUpdated | h2.events.RemoteSettingsChanged):
            self.window_open.set()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self._closed = True

    def flush(self) -> None:
        data = self.h2.data_to_send()
        if data and not self.writer.is_closing():
            self.writer.write(data)

    async def send_data(self, stream_id: int, data: bytes, *, end_stream: bool = False) -> None:
        """Send DATA within HTTP/2 flow control (waits for WINDOW_UPDATE when needed)."""
        view = memoryview(data)
        while True:
            window = self.h2.local_flow_control_window(stream_id)
            size = min(window, self.h2.max_outbound_frame_size, len(view))
            if size == 0 and len(view) > 0:
                self.window_open.clear()
                await self.window_open.wait()
                continue
            last = size == len(view)
            self.h2.send_data(stream_id, bytes(view[:size]), end_stream=end_stream and last)
            self.flush()
            view = view[size:]
            if last:
                break
        await self.writer.drain()

    async def shutdown(self) -> None:
        self._closed = True
        for stream in list(self.streams.values()):
            await stream.abandon()
        if not self.writer.is_closing():
            self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()


class _Stream:
    """One ``InvokeEndpointWithBidirectionalStream`` call."""

    def __init__(self, connection: _H2Connection, stream_id: int, headers: dict[str, str]) -> None:
        self.connection = connection
        self.runtime = connection.runtime
        self.stream_id = stream_id
        self.headers = headers
        path = headers.get(":path", "").split("?", 1)[0]
        match = _PATH.match(path)
        self.record = StreamRecord(endpoint_name=match["name"] if match else "", headers=headers)
        self.task: asyncio.Task[None] | None = None
        self.upstream: _Upstream | None = None
        self._body: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._buffer = bytearray()
        self._prior_signature = b""
        self._fragmented = False
        self._client_closed_input = False
        self._responding = False

    # ------------------------------------------------------------------ input side

    def receive_body(self, data: bytes | None) -> None:
        self._body.put_nowait(data)

    async def run(self) -> None:
        try:
            if not await self._open():
                return
            await self._pump_input()
        except Exception as exc:  # a stand-in bug must show up, not hang the test
            await self.fail(_error_event("InternalFailure", f"stand-in error: {exc!r}"))
            raise

    async def _open(self) -> bool:
        headers, runtime = self.headers, self.runtime
        if headers.get(":method") != "POST" or not _PATH.match(
            headers.get(":path", "").split("?", 1)[0]
        ):
            await self._error(404, "UnknownOperationException", {"message": None})
            return False
        auth_problem = self._check_signature()
        if auth_problem is not None:
            error_type, message = auth_problem
            await self._error(403, error_type, {"message": message})
            return False
        if headers.get("content-type") != _EVENTSTREAM:
            await self._error(
                400, "InputValidationError", {"Message": f"Content-Type must be {_EVENTSTREAM}"}
            )
            return False
        if (fault := runtime._take_open_fault()) is not None:
            await self._error(fault.status, fault.error_type, fault.body)
            return False
        if self.record.endpoint_name not in runtime.endpoints:
            await self._error(
                400,
                "InputValidationError",
                {
                    "Message": f"Endpoint {self.record.endpoint_name} of account "
                    "000000000000 not found."
                },
            )
            return False
        variant = headers.get("x-amzn-sagemaker-target-variant")
        if variant is not None and variant != runtime.variant:
            await self._error(
                400,
                "InputValidationError",
                {"Message": f"Variant {variant} not found for endpoint."},
            )
            return False
        path = headers.get("x-amzn-sagemaker-model-invocation-path")
        query = headers.get("x-amzn-sagemaker-model-query-string")
        url = runtime.upstream_url + ("/" + path.lstrip("/") if path else CONTAINER_PATH)
        if query:
            url += "?" + query
        try:
            self.upstream = await _Upstream.connect(url)
        except (OSError, ConnectionError, TimeoutError) as exc:
            await self._error(
                424,
                "ModelError",
                {
                    "Message": "Received server error (0) from model with message "
                    f'"{exc}". See the CloudWatch logs for this endpoint.',
                    "OriginalStatusCode": 0,
                    "OriginalMessage": str(exc),
                },
            )
            return False
        self._send_headers(
            200,
            [
                ("content-type", _EVENTSTREAM),
                ("x-amzn-invoked-production-variant", runtime.variant),
            ],
        )
        self._responding = True
        self.record.status = 200
        self._output_task = asyncio.create_task(self._pump_output())
        return True

    def _check_signature(self) -> tuple[str, str] | None:
        """The request's SigV4 signature, recomputed with the known secret."""
        headers, runtime = self.headers, self.runtime
        authorization = headers.get("authorization")
        if authorization is None:
            return "MissingAuthenticationTokenException", "Missing Authentication Token"
        match = _AUTH.match(authorization)
        if match is None:
            return "IncompleteSignatureException", "Authorization header is not SigV4."
        if match["key"] != runtime.access_key_id:
            return (
                "UnrecognizedClientException",
                "The security token included in the request is invalid.",
            )
        if match["service"] != "sagemaker" or match["region"] != runtime.region:
            return (
                "InvalidSignatureException",
                f"Credential should be scoped to a valid region and service 'sagemaker'"
                f" in '{runtime.region}'.",
            )
        if headers.get("x-amz-content-sha256") != _STREAMING_PAYLOAD:
            return "InvalidSignatureException", f"x-amz-content-sha256 must be {_STREAMING_PAYLOAD}"
        amz_date = headers.get("x-amz-date", "")
        signed = match["signed"].split(";")
        values = {name: headers.get(":authority" if name == "host" else name) for name in signed}
        if any(value is None for value in values.values()):
            return "InvalidSignatureException", "A signed header is missing from the request."
        raw_path, _, raw_query = headers[":path"].partition("?")
        query = "&".join(sorted(p for p in raw_query.split("&") if p))
        canonical = "\n".join(
            [
                headers[":method"],
                quote(raw_path, safe="/~"),
                query,
                "".join(f"{n}:{' '.join(str(values[n]).split())}\n" for n in signed),
                ";".join(signed),
                _STREAMING_PAYLOAD,
            ]
        )
        scope = f"{match['date']}/{runtime.region}/sagemaker/aws4_request"
        string_to_sign = "\n".join(
            [
                "AWS4-HMAC-SHA256",
                amz_date,
                scope,
                hashlib.sha256(canonical.encode()).hexdigest(),
            ]
        )
        signature = hmac.new(
            self._signing_key(match["date"]), string_to_sign.encode(), hashlib.sha256
        ).hexdigest()
        if not hmac.compare_digest(signature, match["signature"]):
            return (
                "InvalidSignatureException",
                "The request signature we calculated does not match the signature you "
                "provided. Check your AWS Secret Access Key and signing method.",
            )
        self._prior_signature = match["signature"].encode()
        return None

    def _signing_key(self, day: str) -> bytes:
        key = ("AWS4" + self.runtime.secret_access_key).encode()
        for part in (day, self.runtime.region, "sagemaker", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        return key

    async def _pump_input(self) -> None:
        while True:
            data = await self._body.get()
            if data is None:
                break
            self._buffer.extend(data)
            while len(self._buffer) >= 12:
                total = int.from_bytes(self._buffer[:4], "big")
                if len(self._buffer) < total:
                    break
                raw = bytes(self._buffer[:total])
                del self._buffer[:total]
                if not await self._handle_signed(raw):
                    return
        if not self._client_closed_input:
            await self._end_input()

    async def _handle_signed(self, raw: bytes) -> bool:
        event = Event.decode(BytesIO(raw))
        assert event is not None
        headers = event.message.headers
        date, signature = headers.get(":date"), headers.get(":chunk-signature")
        if not isinstance(date, datetime.datetime) or not isinstance(signature, bytes):
            await self.fail(
                _error_event("InvalidSignatureException", "Event is not a signed message.")
            )
            return False
        expected = self._event_signature(date, raw, event)
        if not hmac.compare_digest(expected, signature):
            await self.fail(
                _error_event("InvalidSignatureException", "Event signature does not match.")
            )
            return False
        self._prior_signature = expected.hex().encode()
        payload = event.message.payload
        if not payload:
            await self._end_input()
            return True
        inner = Event.decode(BytesIO(payload))
        assert inner is not None
        message = inner.message.headers
        if message.get(":message-type") != "event" or message.get(":event-type") != "PayloadPart":
            await self.fail(
                _error_event("ValidationException", f"Unexpected input event {dict(message)!r}")
            )
            return False
        data_type = _str_header(message, "DataType")
        state = _str_header(message, "CompletionState")
        self.record.parts.append(PartRecord(data_type, state, len(inner.message.payload)))
        await self._forward(inner.message.payload, data_type, state)
        return True

    def _event_signature(self, date: datetime.datetime, raw: bytes, event: Event) -> bytes:
        timestamp = date.astimezone(datetime.UTC).strftime(_SIGV4_TIME)
        # Only the :date header is signed (:chunk-signature is added after signing).
        date_only = _encode_headers({":date": date})
        string_to_sign = "\n".join(
            [
                "AWS4-HMAC-SHA256-PAYLOAD",
                timestamp,
                f"{timestamp[:8]}/{self.runtime.region}/sagemaker/aws4_request",
                self._prior_signature.decode(),
                hashlib.sha256(date_only).hexdigest(),
                hashlib.sha256(event.message.payload).hexdigest(),
            ]
        )
        return hmac.new(
            self._signing_key(timestamp[:8]), string_to_sign.encode(), hashlib.sha256
        ).digest()

    async def _forward(self, payload: bytes, data_type: str | None, state: str | None) -> None:
        """One part → exactly one WebSocket frame, per the platform's container contract."""
        if self.upstream is None:
            return
        fin = state != "PARTIAL"
        if self._fragmented:
            opcode = Opcode.CONT
        else:
            opcode = Opcode.TEXT if data_type == "UTF8" else Opcode.BINARY
        self._fragmented = not fin
        self.record.frames_to_container.append((opcode.name, fin))
        await self.upstream.send(Frame(opcode, payload, fin=fin))

    async def _end_input(self) -> None:
        """The client ended its input: close the container socket, let its output drain."""
        self._client_closed_input = True
        self.record.input_ended = True
        if self.upstream is not None:
            await self.upstream.close(1000, "")

    # ------------------------------------------------------------------ output side

    async def _pump_output(self) -> None:
        assert self.upstream is not None
        upstream = self.upstream
        message_type = "UTF8"
        try:
            async for frame in upstream.frames():
                if frame.opcode in (Opcode.TEXT, Opcode.BINARY):
                    message_type = "UTF8" if frame.opcode is Opcode.TEXT else "BINARY"
                headers = {
                    ":message-type": "event",
                    ":event-type": "PayloadPart",
                    ":content-type": "application/octet-stream",
                    "DataType": message_type,
                    "CompletionState": "COMPLETE" if frame.fin else "PARTIAL",
                }
                await self._send_event(EventMessage(headers=headers, payload=frame.data))
        finally:
            self.upstream = None
            await upstream.close(1000, "")
        if self._client_closed_input or self.record.finished:
            await self._end_response()
            return
        code, reason = upstream.close_code, upstream.close_reason
        await self.fail(
            _exception_event(
                "ModelStreamError",
                {
                    "Message": reason or f"Model container closed the connection ({code}).",
                    "ErrorCode": str(code),
                },
            )
        )

    async def _send_event(self, message: EventMessage) -> None:
        if self.record.finished:
            return
        with contextlib.suppress(h2.exceptions.StreamClosedError):
            await self.connection.send_data(self.stream_id, message.encode())

    async def _end_response(self) -> None:
        if self.record.finished:
            return
        self.record.finished = True
        with contextlib.suppress(h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
            self.connection.h2.end_stream(self.stream_id)
            self.connection.flush()

    # ------------------------------------------------------------------ faults and endings

    async def fail(self, message: EventMessage) -> None:
        """Send one terminal event, end the response, close the container socket."""
        if self.record.finished:
            return
        if self._responding:
            await self._send_event(message)
            await self._end_response()
        self.record.finished = True
        await self._close_upstream()

    async def cut(self, *, reset: bool) -> None:
        if reset:
            self.record.finished = True
            with contextlib.suppress(h2.exceptions.StreamClosedError):
                self.connection.h2.reset_stream(self.stream_id, h2.errors.ErrorCodes.INTERNAL_ERROR)
                self.connection.flush()
        else:
            await self._end_response()
        await self._close_upstream()

    async def abandon(self) -> None:
        """The client or the connection went away: drop everything of this stream."""
        self.record.finished = True
        await self._close_upstream()
        if self.task is not None and not self.task.done():
            self.task.cancel()

    async def _close_upstream(self) -> None:
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            await upstream.close(1001, "stream ended")

    async def _error(self, status: int, error_type: str, body: dict[str, Any]) -> None:
        self.record.status = status
        self.record.error_type = error_type
        payload = json.dumps({k: v for k, v in body.items() if v is not None}).encode()
        self._send_headers(
            status,
            [
                ("content-type", "application/json"),
                ("x-amzn-errortype", error_type),
                ("content-length", str(len(payload))),
            ],
        )
        self.record.finished = True
        await self.connection.send_data(self.stream_id, payload, end_stream=True)

    def _send_headers(self, status: int, headers: list[tuple[str, str]]) -> None:
        self.connection.h2.send_headers(
            self.stream_id,
            [(":status", str(status)), ("x-amzn-requestid", str(uuid.uuid4())), *headers],
        )
        self.connection.flush()


# ----------------------------------------------------------------------------- the container side


class _Upstream:
    """A WebSocket client to the container, frame by frame (websockets' sans-I/O protocol).

    The asyncio layer of ``websockets`` reassembles and re-fragments messages; the platform
    maps parts to frames one to one, so frames are sent and received here as they are.
    """

    def __init__(
        self, protocol: ClientProtocol, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.protocol = protocol
        self.reader = reader
        self.writer = writer
        self.close_code: int = 1006
        self.close_reason = ""
        self.pending: list[Frame] = []
        self._closed = False

    @classmethod
    async def connect(cls, url: str) -> _Upstream:
        uri = parse_uri(url)
        protocol = ClientProtocol(uri, max_size=None)
        reader, writer = await asyncio.wait_for(asyncio.open_connection(uri.host, uri.port), 5)
        upstream = cls(protocol, reader, writer)
        protocol.send_request(protocol.connect())
        await upstream._flush()
        while True:
            data = await asyncio.wait_for(reader.read(65536), 5)
            if data:
                protocol.receive_data(data)
            else:
                protocol.receive_eof()
            events = protocol.events_received()
            for index, event in enumerate(events):
                if isinstance(event, Response):
                    if protocol.handshake_exc is not None:
                        writer.close()
                        raise ConnectionError(
                            f"container refused the WebSocket: {event.status_code}"
                        )
                    # Frames that came in the same read as the handshake (vLLM's
                    # session.created does) are already out of the protocol: keep them.
                    upstream.pending = [e for e in events[index + 1 :] if isinstance(e, Frame)]
                    return upstream
            if not data:
                writer.close()
                raise ConnectionError("container closed the connection during the handshake")

    async def send(self, frame: Frame) -> None:
        if self._closed:
            return
        if frame.opcode is Opcode.CONT:
            self.protocol.send_continuation(frame.data, fin=frame.fin)
        elif frame.opcode is Opcode.TEXT:
            self.protocol.send_text(frame.data, fin=frame.fin)
        else:
            self.protocol.send_binary(frame.data, fin=frame.fin)
        await self._flush()

    async def frames(self) -> Any:
        """Data frames from the container until its close (pings are answered by the protocol)."""
        for frame in self.pending:
            if frame.opcode in (Opcode.TEXT, Opcode.BINARY, Opcode.CONT):
                yield frame
        while True:
            try:
                data = await self.reader.read(65536)
            except (ConnectionError, OSError):
                data = b""
            if data:
                self.protocol.receive_data(data)
            else:
                self.protocol.receive_eof()
            close_seen = False
            for event in self.protocol.events_received():
                if not isinstance(event, Frame):
                    continue
                if event.opcode in (Opcode.TEXT, Opcode.BINARY, Opcode.CONT):
                    yield event
                elif event.opcode is Opcode.CLOSE:
                    close_seen = True
            await self._flush()
            if close_seen or not data:
                received = self.protocol.close_rcvd
                if received is not None:
                    self.close_code, self.close_reason = received.code, received.reason
                return

    async def close(self, code: int, reason: str) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            if self.protocol.close_rcvd is None and self.protocol.close_sent is None:
                self.protocol.send_close(code, reason)
                await self._flush()
        if not self.writer.is_closing():
            self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()

    async def _flush(self) -> None:
        for data in self.protocol.data_to_send():
            if self.writer.is_closing():
                return
            if data:
                self.writer.write(data)
            elif self.writer.can_write_eof():
                self.writer.write_eof()
        with contextlib.suppress(ConnectionError):
            await self.writer.drain()


# ----------------------------------------------------------------------------- event helpers


def _exception_event(name: str, members: dict[str, Any]) -> EventMessage:
    """A modeled error on the response stream (``:message-type=exception``)."""
    return EventMessage(
        headers={
            ":message-type": "exception",
            ":exception-type": name,
            ":content-type": "application/json",
        },
        payload=json.dumps(members).encode(),
    )


def _error_event(code: str, message: str) -> EventMessage:
    """An unmodeled error on the response stream (``:message-type=error``)."""
    return EventMessage(
        headers={":message-type": "error", ":error-code": code, ":error-message": message}
    )


def _encode_headers(headers: dict[str, Any]) -> bytes:
    encoder = EventHeaderEncoder()
    encoder.encode_headers(headers)
    return encoder.get_result()


def _str_header(headers: Any, name: str) -> str | None:
    value = headers.get(name)
    return value if isinstance(value, str) else None
