"""The SageMaker channel: realtime events over a SageMaker AI HTTP/2 bidirectional stream.

SageMaker relays each request ``PayloadPart`` to the container as one WebSocket frame
(``DataType=UTF8`` → text, anything else → binary, which ends a vLLM session), and each
container frame back as a ``PayloadPart``. So every event is sent as one complete ``UTF8``
part, and parts that come back ``PARTIAL`` are joined until ``COMPLETE``.

Built on ``aws-sdk-sagemaker-runtime-http2`` 0.12 (``AsyncSageMakerRuntimeHTTP2Client`` with
the CRT transport: the SDK's default aiohttp transport has no HTTP/2). Pipecat's
``SageMakerBidiClient`` is not reused: it codes against the < 0.10 API (which 0.12 removed),
reads credentials from the environment only and does not join partial parts.

Credentials come from botocore's chain (environment, shared profile, SSO, assume-role,
web identity, container and instance roles), refreshed before they expire. The SDK's own
chain in 0.12 has no instance or container role, which is where production runs.

Errors, mapped onto :mod:`agent.stt.channels`:

* at open: 503/500/424/throttling/network → :class:`ChannelError` (retryable); an unknown
  endpoint or variant, bad input, rejected or missing credentials → ``retryable=False``;
* while open: ``ModelStreamError`` (the container closed its socket), ``InternalStreamFailure``,
  the end of the stream, a broken connection → :class:`ChannelClosed`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from agent.stt.channels import ChannelClosed, ChannelError, ChannelFactory, RealtimeChannel

try:
    from aws_sdk_sagemaker_runtime_http2.client import AsyncSageMakerRuntimeHTTP2Client
    from aws_sdk_sagemaker_runtime_http2.config import AsyncSageMakerRuntimeHTTP2Config
    from aws_sdk_sagemaker_runtime_http2.models import (
        InputValidationError,
        InternalServerError,
        InternalStreamFailure,
        InvokeEndpointWithBidirectionalStreamInput,
        ModelError,
        ModelStreamError,
        RequestPayloadPart,
        RequestStreamEventPayloadPart,
        ResponseStreamEventPayloadPart,
        ServiceUnavailableError,
    )
    from awscrt import http as crt_http
    from awscrt.aio.http import AIOHttpClientConnectionUnified
    from smithy_aws_core.identity import AWSCredentialsIdentity
    from smithy_core.aio.types import AsyncBytesProvider
    from smithy_core.exceptions import CallError, SmithyError
    from smithy_http.aio.crt import AWSCRTHTTPClient
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "the SageMaker channel needs the 'sagemaker' extra: "
        "pip install 'voice-agent[sagemaker]' (aws-sdk-sagemaker-runtime-http2, awscrt)"
    ) from exc

ENDPOINT_URL_ENV = "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME_HTTP2"
"""The AWS SDKs' variable for a service-specific endpoint (VPC endpoints, local stand-ins)."""

DEFAULT_ENDPOINT_URL = "https://runtime.sagemaker.{region}.amazonaws.com:8443"
"""The runtime's HTTP/2 endpoint (port 8443, not the classic runtime's 443)."""

UTF8 = "UTF8"
PARTIAL = "PARTIAL"

_RETRYABLE_OPEN_ERRORS = (ServiceUnavailableError, InternalServerError, ModelError)
_AUTH_STATUSES = frozenset({401, 403})


class BotocoreCredentialsResolver:
    """AWS credentials from botocore's standard chain, re-resolved before they expire.

    The SDK signs every event with the identity this returns, so the cached path must be
    cheap; botocore refreshes temporary credentials (in a thread: it may call IMDS or STS)
    once they are within its advisory window of expiry, well before AWS rejects them.
    """

    def __init__(self, *, profile: str | None = None) -> None:
        self._profile = profile
        self._credentials: Any = None
        self._identity: AWSCredentialsIdentity | None = None
        self._lock = asyncio.Lock()

    async def get_identity(self, *, properties: Mapping[str, Any]) -> AWSCredentialsIdentity:
        if self._identity is not None and not self._refresh_needed():
            return self._identity
        async with self._lock:
            if self._identity is None or self._refresh_needed():
                self._identity = await asyncio.to_thread(self._resolve)
        return self._identity

    async def invalidate(self) -> None:
        self._identity = None

    def _refresh_needed(self) -> bool:
        refresh_needed = getattr(self._credentials, "refresh_needed", None)
        return bool(refresh_needed()) if callable(refresh_needed) else False

    def _resolve(self) -> AWSCredentialsIdentity:
        import botocore.session
        from botocore.exceptions import BotoCoreError

        try:
            if self._credentials is None:
                session = botocore.session.Session(profile=self._profile)
                self._credentials = session.get_credentials()
            if self._credentials is None:
                raise ChannelError(
                    "no AWS credentials found: set AWS_PROFILE, or AWS_ACCESS_KEY_ID and "
                    "AWS_SECRET_ACCESS_KEY, or run with an instance/task role",
                    retryable=False,
                )
            frozen = self._credentials.get_frozen_credentials()
        except BotoCoreError as exc:
            raise ChannelError(f"cannot load AWS credentials: {exc}", retryable=False) from exc
        expiry = getattr(self._credentials, "_expiry_time", None)
        return AWSCredentialsIdentity(
            access_key_id=frozen.access_key,
            secret_access_key=frozen.secret_key,
            session_token=frozen.token,
            expiration=expiry.astimezone(UTC) if isinstance(expiry, datetime) else None,
        )


CHECKED_AGAINST = {"smithy-http": "0.6.0", "awscrt": "0.38.1"}
"""The versions whose internals :class:`_CRTTransport` mirrors (a test fails when they move)."""


class _CRTTransport(AWSCRTHTTPClient):
    """The SDK's CRT transport, keeping hold of the HTTP/2 streams and request bodies it
    opens, and never cancelling awscrt's own futures.

    Mirrors ``smithy_http.aio.crt.AWSCRTHTTPClient`` (``_await_response``,
    ``_build_new_connection``, ``close``), reads the stream's private ``_writer`` task and
    calls awscrt's private ``_generic_new`` (versions in :data:`CHECKED_AGAINST`).

    When the service ends a stream first (a container close, a failure), awscrt's task that
    writes the request body fails on the final write and nobody retrieves its exception
    (asyncio then logs "Task exception was never retrieved"). :meth:`settle` waits for those
    tasks and takes their outcome. The SDK deep-copies its transport (per client and again
    per call), so copies share the lists and the connection pool: closing any copy closes
    the connection the call opened.

    awscrt completes its futures from its own thread and raises ``InvalidStateError`` there
    (printed as "Exception ignored in ... _on_connection_setup") when one was cancelled
    first, which is what ``asyncio.wrap_future`` does to it when a timeout cancels the wait.
    A connect to a frozen peer ends by awscrt's own 10 s TLS deadline, right when ours does,
    so connecting and closing wait through :func:`_without_cancelling` instead.
    """

    def __init__(
        self, streams: list[Any] | None = None, bodies: list[Any] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self._streams: list[Any] = [] if streams is None else streams
        self._bodies: list[Any] = [] if bodies is None else bodies

    async def _await_response(self, stream: Any) -> Any:
        self._streams.append(stream)
        return await super()._await_response(stream)

    def _create_body_generator(self, body: Any) -> Any:
        self._bodies.append(body)
        return super()._create_body_generator(body)

    async def _build_new_connection(self, url: Any) -> Any:
        if url.scheme != "https":  # the SDK's own error (or plain HTTP, which SageMaker refuses)
            return await super()._build_new_connection(url)
        tls = self._tls_ctx.new_connection_options()
        tls.set_server_name(url.host)
        tls.set_alpn_list(["h2", "http/1.1"])
        connecting = AIOHttpClientConnectionUnified._generic_new(
            url.host,
            url.port or self._HTTPS_PORT,
            self._client_bootstrap,
            self._socket_options,
            tls,
            None,
            asyncio_connection=True,
        )
        return await _without_cancelling(connecting, unwanted=_close_connection)

    async def close(self) -> None:
        """Close the pooled connections; a cancelled wait leaves their shutdown running."""
        if self._closed:
            return
        self._closed = True
        connections = tuple(self._connections.values())
        self._connections.clear()
        shutdowns = [_without_cancelling(_close_connection(c)) for c in connections]
        await asyncio.gather(*shutdowns, return_exceptions=True)

    async def abandon_bodies(self) -> None:
        """Drop what the request bodies still hold, releasing anyone waiting to write.

        smithy's event publisher cannot be cancelled out of its ``close()``: cancelled while
        its last event waits for room in the body, it flushes the body in a ``finally`` and
        waits there for good on a frozen stream (the HTTP/2 window never reopens).
        """
        bodies, self._bodies[:] = list(self._bodies), []
        for body in bodies:
            if isinstance(body, AsyncBytesProvider):
                await body.close(flush=False)

    def __deepcopy__(self, memo: Any) -> _CRTTransport:
        twin = _CRTTransport(self._streams, self._bodies, eventloop=self._eventloop)
        twin._connections = self._connections
        return twin

    async def settle(self, timeout: float = 2.0) -> None:
        writers = [
            w for s in self._streams if isinstance(w := getattr(s, "_writer", None), asyncio.Task)
        ]
        self._streams.clear()
        if not writers:
            return
        _, pending = await asyncio.wait(writers, timeout=timeout) if timeout > 0 else ((), writers)
        for writer in pending:
            writer.cancel()
        # Taking each outcome keeps asyncio from logging the expected write failures. A
        # cancelled writer still ends the stream (awscrt's ``finally``), which a connection
        # that is not shut down yet may hold: don't wait on it for long.
        await asyncio.wait(writers, timeout=1.0)
        for writer in writers:
            _consume(writer)


def _consume(task: asyncio.Future[Any]) -> None:
    """Take a task's outcome now or when it ends, so asyncio logs no unretrieved exception."""
    if task.done():
        if not task.cancelled():
            task.exception()
    else:
        task.add_done_callback(_consume)


def _close_connection(connection: Any) -> concurrent.futures.Future[Any]:
    """Start closing an awscrt connection; its shutdown future (the base class's sync close,
    since the asyncio class's ``close()`` awaits that future and would cancel it)."""
    shutdown: concurrent.futures.Future[Any] = crt_http.HttpConnectionBase.close(connection)
    return shutdown


def _without_cancelling(
    future: concurrent.futures.Future[Any], *, unwanted: Callable[[Any], object] = lambda _: None
) -> asyncio.Future[Any]:
    """Await an awscrt future without ever cancelling it (unlike ``asyncio.wrap_future``).

    Cancelling the returned waiter only stops the wait; awscrt completes its future when it
    is done, and a result nobody waits for any more goes to ``unwanted`` (a connection that
    opened after its caller gave up is closed, not leaked).
    """
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[Any] = loop.create_future()

    def deliver(done: concurrent.futures.Future[Any]) -> None:
        error = None if done.cancelled() else done.exception()
        if waiter.cancelled():
            if not done.cancelled() and error is None:
                unwanted(done.result())
        elif done.cancelled():
            waiter.cancel()
        elif error is not None:
            waiter.set_exception(error)
        else:
            waiter.set_result(done.result())

    def from_crt_thread(done: concurrent.futures.Future[Any]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is waiting
            loop.call_soon_threadsafe(deliver, done)

    future.add_done_callback(from_crt_thread)
    return waiter


class SageMakerChannel:
    """One bidirectional stream to a SageMaker endpoint, carrying realtime JSON events.

    Build it with :meth:`connect`. The channel owns its SDK client (one HTTP/2 connection)
    and a reader task that joins partial parts into messages; :meth:`close` ends both.
    """

    def __init__(
        self,
        *,
        client: AsyncSageMakerRuntimeHTTP2Client,
        transport: _CRTTransport,
        stream: Any,
        output_stream: Any,
        description: str,
        max_message_bytes: int = 4 * 1024 * 1024,
        send_timeout_s: float = 5.0,
    ) -> None:
        self._client = client
        self._send_timeout_s = send_timeout_s
        self._transport = transport
        self._stream = stream
        self._output = output_stream
        self._description = description
        self._max_message_bytes = max_message_bytes
        self._messages: asyncio.Queue[str | ChannelClosed] = asyncio.Queue(maxsize=256)
        self._send_lock = asyncio.Lock()
        self._ended: ChannelClosed | None = None
        self._frozen = False  # a send found no room: nothing graceful will get through
        self._closed = False
        self._reader = asyncio.create_task(self._read(), name=f"sagemaker-reader {description}")

    @classmethod
    async def connect(
        cls,
        *,
        endpoint_name: str,
        region: str,
        target_variant: str | None = None,
        invocation_path: str | None = None,
        endpoint_url: str | None = None,
        credentials_resolver: Any = None,
        open_timeout: float = 10.0,
        send_timeout_s: float = 5.0,
        max_message_bytes: int = 4 * 1024 * 1024,
    ) -> SageMakerChannel:
        """Open a stream, turning every way that can fail into a :class:`ChannelError`.

        Every send has a deadline (``send_timeout_s``): a stream whose HTTP/2 window never
        reopens is closed rather than waited on forever, so the service reconnects and replays.

        ``credentials_resolver`` is any SDK identity resolver (``get_identity``); the default
        is :class:`BotocoreCredentialsResolver`.
        """
        if not endpoint_name or not region:
            raise ChannelError(
                "the SageMaker channel needs an endpoint_name and a region",
                retryable=False,
            )
        url = (
            endpoint_url
            or os.environ.get(ENDPOINT_URL_ENV)
            or DEFAULT_ENDPOINT_URL.format(region=region)
        )
        description = f"endpoint {endpoint_name!r} at {url}"
        client: AsyncSageMakerRuntimeHTTP2Client | None = None
        transport = _CRTTransport()
        stream: Any = None
        try:
            async with asyncio.timeout(open_timeout):
                config = await AsyncSageMakerRuntimeHTTP2Config.resolve(
                    region=region,
                    endpoint_uri=url,
                    transport=transport,
                    aws_credentials_identity_resolver=(
                        credentials_resolver or BotocoreCredentialsResolver()
                    ),
                )
                client = AsyncSageMakerRuntimeHTTP2Client(config=config)
                stream = await client.invoke_endpoint_with_bidirectional_stream(
                    InvokeEndpointWithBidirectionalStreamInput(
                        endpoint_name=endpoint_name,
                        target_variant=target_variant,
                        model_invocation_path=invocation_path,
                    )
                )
                _, output_stream = await stream.await_output()
        except BaseException as exc:
            # The request never opened, so nothing would drain an input stream: just stop
            # waiting for the response and drop the connection.
            future = getattr(stream, "_output_future", None)
            if isinstance(future, asyncio.Future) and not future.done():
                future.cancel()
            await _discard(client, transport, None, settle_s=0.0)
            if isinstance(exc, ChannelError):
                raise
            if isinstance(exc, Exception):
                raise _open_error(exc, description) from exc
            raise
        return cls(
            client=client,
            transport=transport,
            stream=stream,
            output_stream=output_stream,
            description=description,
            max_message_bytes=max_message_bytes,
            send_timeout_s=send_timeout_s,
        )

    async def send(self, text: str) -> None:
        """Send one event as one complete ``UTF8`` part (a text frame in the container)."""
        if self._ended is not None:
            raise self._ended
        if self._closed:
            raise ChannelClosed("the SageMaker channel is closed")
        part = RequestStreamEventPayloadPart(
            value=RequestPayloadPart(bytes_=text.encode("utf-8"), data_type=UTF8)
        )
        # One at a time: each event's signature chains on the one sent before it.
        async with self._send_lock:
            try:
                async with asyncio.timeout(self._send_timeout_s):
                    await self._stream.input_stream.send(part)
            except TimeoutError as exc:
                # A frozen stream (HTTP/2 flow control never reopens): it is of no more use.
                self._frozen = True
                self._ended = self._ended or ChannelClosed(
                    f"sending to {self._description} took over {self._send_timeout_s:g} s; "
                    "the stream looks frozen"
                )
                raise self._ended from exc
            except (OSError, SmithyError, RuntimeError) as exc:
                raise self._ended or ChannelClosed(
                    f"cannot send to {self._description}: {exc}"
                ) from exc

    async def receive(self) -> str:
        """The next whole message; :class:`ChannelClosed` once the stream has ended."""
        if self._ended is not None and self._messages.empty():
            raise self._ended
        item = await self._messages.get()
        if isinstance(item, ChannelClosed):  # keep it there for the next caller too
            self._messages.put_nowait(item)
        if isinstance(item, ChannelClosed):
            self._ended = item
            raise item
        return item

    async def close(self) -> None:
        """End the input stream, stop the reader, close the connection. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._ended is None:
            self._ended = ChannelClosed("the SageMaker channel is closed")
        if not self._messages.full():  # wake a receiver now: the teardown below takes time
            self._messages.put_nowait(self._ended)
        # A frozen stream takes no end of input and sends no end of stream: skip the waits.
        grace_s = 0.0 if self._frozen else 2.0
        await self._end_input(grace_s)
        # The service answers the end of input by ending its stream, which ends the reader.
        # Cancelling the reader while awscrt holds a pending read upsets awscrt, so it is
        # only the last resort, after the connection itself is gone.
        await _wait(self._reader, grace_s)
        await _discard(self._client, self._transport, self._stream)
        if not await _wait(self._reader, 2.0):
            # awscrt may hold the reader's pending read past cancellation on a frozen stream:
            # give it a moment, then leave it (it is cancelled and owns nothing of ours).
            self._reader.cancel()
            await _wait(self._reader, 2.0)
        if self._messages.empty():
            self._messages.put_nowait(self._ended)

    async def _end_input(self, timeout: float) -> None:
        """Send the end of input; on a stream that takes no more, drop it instead.

        The close runs as a task of its own, not cancelled on timeout: smithy's publisher
        would then wait for good in its ``finally`` (see :meth:`_CRTTransport.abandon_bodies`,
        which releases it).
        """

        async def end() -> None:
            async with self._send_lock:
                await self._stream.input_stream.close()

        ending = asyncio.ensure_future(end())
        if not await _wait(ending, timeout):
            await self._transport.abandon_bodies()
            await _wait(ending, 1.0)
        _consume(ending)

    async def _read(self) -> None:
        parts: list[bytes] = []
        size = 0
        try:
            while True:
                event = await self._output.receive()
                if event is None:
                    raise ChannelClosed(f"{self._description} ended the stream")
                if not isinstance(event, ResponseStreamEventPayloadPart):
                    continue  # a newer event kind this SDK version reports as unknown
                data = event.value.bytes_ or b""
                size += len(data)
                if size > self._max_message_bytes:
                    raise ChannelClosed(
                        f"{self._description} sent a message over {self._max_message_bytes} bytes"
                    )
                parts.append(data)
                if event.value.completion_state == PARTIAL:
                    continue
                message = b"".join(parts).decode("utf-8", errors="replace")
                parts, size = [], 0
                await self._messages.put(message)
        except ChannelClosed as exc:
            await self._finish(exc)
        except ModelStreamError as exc:
            code = exc.error_code or ""
            await self._finish(
                ChannelClosed(
                    f"the model container closed the stream ({code or 'no code'}"
                    f"{': ' + exc.message if exc.message else ''})",
                    code=int(code) if code.isdigit() else None,
                    reason=exc.message or "",
                )
            )
        except InternalStreamFailure as exc:
            await self._finish(
                ChannelClosed(f"SageMaker internal stream failure: {exc.message or exc}")
            )
        except Exception as exc:
            await self._finish(
                ChannelClosed(f"the stream from {self._description} failed: {exc!r}")
            )

    async def _finish(self, closed: ChannelClosed) -> None:
        if self._ended is None:
            self._ended = closed
        if not self._messages.full():  # else receive() finds _ended once it has drained
            self._messages.put_nowait(closed)


async def _wait(task: asyncio.Future[None], timeout: float) -> bool:
    """Wait for ``task`` to end by itself; whether it did."""
    done, _ = await asyncio.wait({task}, timeout=timeout)
    return bool(done)


async def _discard(
    client: AsyncSageMakerRuntimeHTTP2Client | None,
    transport: _CRTTransport,
    stream: Any,
    *,
    settle_s: float = 2.0,
) -> None:
    """Close what a failed or finished stream leaves: its streams, then the connection."""
    if stream is not None:
        # Nothing will drain the request body any more: release whoever waits to write it.
        await transport.abandon_bodies()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(1.0):
                await stream.input_stream.close()
        output = getattr(stream, "output_stream", None)
        if output is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1.0):
                    await output.close()
        future = getattr(stream, "_output_future", None)
        if isinstance(future, asyncio.Future) and not future.done():
            future.cancel()
            with contextlib.suppress(BaseException):
                await future
    # Bounded too: a frozen connection must not hold up the call that is leaving it.
    if client is not None:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2.0):
                await client.close()
    with contextlib.suppress(Exception):
        async with asyncio.timeout(2.0):
            await transport.close()
    await transport.settle(settle_s)


def _open_error(exc: Exception, description: str) -> ChannelError:
    """Say what went wrong opening a stream, and whether trying again can help."""
    if isinstance(exc, TimeoutError):
        return ChannelError(f"timed out opening a stream to {description}")
    if isinstance(exc, InputValidationError):
        return ChannelError(
            f"SageMaker rejected the request to {description}: {exc.message or exc}. Check "
            "stt.sagemaker.endpoint_name, region and target_variant (the endpoint must exist "
            "and be InService in that region).",
            retryable=False,
        )
    if isinstance(exc, _RETRYABLE_OPEN_ERRORS):
        return ChannelError(
            f"SageMaker could not open a stream to {description} "
            f"({type(exc).__name__}: {exc.message or exc})"
        )
    if isinstance(exc, CallError):
        status = exc.response_metadata.http_status_code
        if status in _AUTH_STATUSES:
            return ChannelError(
                f"AWS rejected the credentials for {description} (HTTP {status}: {exc.message})."
                " Check the AWS credentials (AWS_PROFILE / AWS_ACCESS_KEY_ID) and that they "
                "allow sagemaker:InvokeEndpointWithBidirectionalStream.",
                retryable=False,
            )
        retryable = exc.is_throttling_error or status is None or status >= 500 or status == 429
        return ChannelError(
            f"SageMaker refused the stream to {description} (HTTP {status}: {exc.message})",
            retryable=retryable,
        )
    if type(exc).__name__ == "IdentityChainError" or "credential" in str(exc).lower():
        return ChannelError(f"no usable AWS credentials for {description}: {exc}", retryable=False)
    return ChannelError(f"cannot connect to {description}: {exc!r}")


def sagemaker_channel_factory(
    *,
    endpoint_name: str,
    region: str,
    target_variant: str | None = None,
    invocation_path: str | None = None,
    endpoint_url: str | None = None,
    **options: Any,
) -> ChannelFactory:
    """A factory that opens a fresh :class:`SageMakerChannel` each time it is called.

    ``endpoint_url`` overrides the runtime URL (VPC endpoints, local stand-ins); unset, the
    ``AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME_HTTP2`` variable, else the region's runtime.
    Credentials are resolved once per factory and shared, so rotating connections does not
    re-read the chain; botocore refreshes them before they expire.
    """
    resolver = options.pop("credentials_resolver", None) or BotocoreCredentialsResolver()

    async def open_channel() -> RealtimeChannel:
        return await SageMakerChannel.connect(
            endpoint_name=endpoint_name,
            region=region,
            target_variant=target_variant,
            invocation_path=invocation_path,
            endpoint_url=endpoint_url,
            credentials_resolver=resolver,
            **options,
        )

    return open_channel
