"""The SageMaker channel through the real SDK client, against a local stand-in for the runtime.

The SDK (``aws-sdk-sagemaker-runtime-http2`` on awscrt) talks HTTP/2 over TLS to
:class:`tests.fakes.sagemaker_runtime.SageMakerRuntimeStandIn`, which checks SigV4, decodes the
event stream and relays each part as one WebSocket frame to a container: a scripted peer here,
or the offline ASR server for real speech.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import ssl
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from agent.stt.channels import ChannelClosed, ChannelError, RealtimeChannel
from agent.stt.sagemaker import SageMakerChannel, _without_cancelling, sagemaker_channel_factory
from tests.conftest import requires_espeak
from tests.fakes.sagemaker_runtime import LoopbackTLS, SageMakerRuntimeStandIn

pytestmark = pytest.mark.usefixtures("aws_environment")
REGION = "us-east-1"
ENDPOINT = "voxtral"


@dataclass
class ScriptedContainer:
    """A realtime peer standing in for the container. It answers by script:

    ``{"type": "echo", ...}`` → the same text back; ``{"type": "fragments", "parts": [...]}``
    → one text message sent as fragments; ``{"type": "close", "code": C, "reason": R}`` →
    closes the socket. Every message is recorded with its frame type.
    """

    url: str = ""
    paths: list[str] = field(default_factory=list)
    received: list[tuple[str, str | bytes]] = field(default_factory=list)
    open_connections: int = 0

    async def handle(self, connection: ServerConnection) -> None:
        self.open_connections += 1
        self.paths.append(connection.request.path if connection.request else "")
        try:
            async for message in connection:
                kind = "text" if isinstance(message, str) else "binary"
                self.received.append((kind, message))
                if kind == "binary":
                    continue
                event = json.loads(message)
                if event["type"] == "echo":
                    await connection.send(message)
                elif event["type"] == "fragments":
                    await connection.send(iter(event["parts"]))
                elif event["type"] == "close":
                    await connection.close(event["code"], event["reason"])
        except ConnectionClosed:
            pass
        finally:
            self.open_connections -= 1


@pytest.fixture
async def container() -> AsyncIterator[ScriptedContainer]:
    peer = ScriptedContainer()
    async with serve(peer.handle, "127.0.0.1", 0, compression=None) as server:
        peer.url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        yield peer


@pytest.fixture
async def runtime(
    container: ScriptedContainer, tls: LoopbackTLS
) -> AsyncIterator[SageMakerRuntimeStandIn]:
    async with SageMakerRuntimeStandIn(
        upstream_url=container.url, tls=tls, endpoints=(ENDPOINT,), region=REGION
    ) as stand_in:
        yield stand_in


async def connect(runtime: SageMakerRuntimeStandIn, **options: object) -> SageMakerChannel:
    values: dict[str, object] = {
        "endpoint_name": ENDPOINT,
        "region": REGION,
        "endpoint_url": runtime.url,
        "open_timeout": 20.0,
    }
    values.update(options)
    return await SageMakerChannel.connect(**values)  # type: ignore[arg-type]


def echo(n: int, text: str = "") -> str:
    return json.dumps({"type": "echo", "n": n, "text": text})


# ----------------------------------------------------------------------------- the happy path


async def test_events_travel_as_utf8_parts_and_text_frames(
    runtime: SageMakerRuntimeStandIn, container: ScriptedContainer
) -> None:
    channel = await connect(runtime)
    try:
        assert isinstance(channel, RealtimeChannel)
        sent = [echo(1), echo(2, "héllo wörld ✓"), echo(3, "x" * 20_000)]
        for text in sent:
            await channel.send(text)
        async with asyncio.timeout(20):  # a wrong frame type gets no answer: fail, don't hang
            assert [await channel.receive() for _ in sent] == sent
    finally:
        await channel.close()

    (stream,) = runtime.streams
    assert stream.status == 200 and stream.endpoint_name == ENDPOINT
    assert stream.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=test/")
    assert len(stream.parts) == len(sent)
    assert {part.data_type for part in stream.parts} == {"UTF8"}
    assert stream.frames_to_container == [("TEXT", True)] * len(sent)
    assert container.received == [("text", text) for text in sent]
    assert container.paths == ["/invocations-bidirectional-stream"]


async def test_partial_parts_come_back_as_one_message(runtime: SageMakerRuntimeStandIn) -> None:
    channel = await connect(runtime)
    try:
        pieces = ['{"type": "transcription.delta", ', '"delta": "caf', 'é au lait"}']
        await channel.send(json.dumps({"type": "fragments", "parts": pieces}))
        assert await channel.receive() == "".join(pieces)
        await channel.send(echo(7))
        assert json.loads(await channel.receive())["n"] == 7
    finally:
        await channel.close()


async def test_invocation_path_and_variant_reach_the_platform(
    runtime: SageMakerRuntimeStandIn, container: ScriptedContainer
) -> None:
    factory = sagemaker_channel_factory(
        endpoint_name=ENDPOINT,
        region=REGION,
        endpoint_url=runtime.url,
        invocation_path="v1/realtime",
        target_variant="AllTraffic",
    )
    channel = await factory()
    try:
        await channel.send(echo(1))
        assert json.loads(await channel.receive())["n"] == 1
    finally:
        await channel.close()
    assert container.paths == ["/v1/realtime"]
    assert runtime.streams[0].headers["x-amzn-sagemaker-target-variant"] == "AllTraffic"


# ----------------------------------------------------------------------------- failures at open


async def test_unavailable_at_open_is_a_retryable_error(runtime: SageMakerRuntimeStandIn) -> None:
    runtime.fail_next_open(503)
    with pytest.raises(ChannelError) as caught:
        await connect(runtime)
    assert caught.value.retryable
    assert "ServiceUnavailableError" in str(caught.value)
    runtime.fail_next_open(424, OriginalStatusCode=503, OriginalMessage="busy")
    with pytest.raises(ChannelError) as caught:
        await connect(runtime)
    assert caught.value.retryable and "ModelError" in str(caught.value)
    channel = await connect(runtime)  # and the next attempt works
    await channel.close()


async def test_unknown_endpoint_or_variant_is_not_retryable(
    runtime: SageMakerRuntimeStandIn,
) -> None:
    with pytest.raises(ChannelError) as caught:
        await connect(runtime, endpoint_name="no-such-endpoint")
    assert not caught.value.retryable
    assert "no-such-endpoint" in str(caught.value) and "not found" in str(caught.value)
    with pytest.raises(ChannelError) as caught:
        await connect(runtime, target_variant="Blue")
    assert not caught.value.retryable
    assert runtime.active_upstreams == 0


async def test_rejected_credentials_are_a_clear_error(
    runtime: SageMakerRuntimeStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(ChannelError) as caught:
        await connect(runtime)
    assert not caught.value.retryable
    assert "credentials" in str(caught.value) and "403" in str(caught.value)
    assert runtime.streams[0].error_type == "InvalidSignatureException"


async def test_unreachable_runtime_is_retryable() -> None:
    with pytest.raises(ChannelError) as caught:
        await SageMakerChannel.connect(
            endpoint_name=ENDPOINT, region=REGION, endpoint_url="https://127.0.0.1:9"
        )
    assert caught.value.retryable


async def test_missing_endpoint_settings_fail_before_any_connection() -> None:
    with pytest.raises(ChannelError) as caught:
        await SageMakerChannel.connect(endpoint_name="", region=REGION)
    assert not caught.value.retryable and "endpoint_name" in str(caught.value)


async def test_stand_in_rejects_unsigned_requests(
    runtime: SageMakerRuntimeStandIn, tls: LoopbackTLS
) -> None:
    """The stand-in itself: no SigV4 ``Authorization`` → 403, as AWS answers."""
    httpx = pytest.importorskip("httpx")
    context = ssl.create_default_context(cafile=str(tls.ca_file))
    async with httpx.AsyncClient(http2=True, verify=context) as client:
        response = await client.post(
            f"{runtime.url}/endpoints/{ENDPOINT}/invocations-bidirectional-stream",
            headers={"content-type": "application/vnd.amazon.eventstream"},
            content=b"",
        )
    assert response.http_version == "HTTP/2"
    assert response.status_code == 403
    assert response.headers["x-amzn-errortype"] == "MissingAuthenticationTokenException"


# ----------------------------------------------------------------------------- failures while open


async def test_container_close_becomes_channel_closed_with_its_reason(
    runtime: SageMakerRuntimeStandIn, container: ScriptedContainer
) -> None:
    channel = await connect(runtime)
    try:
        await channel.send(json.dumps({"type": "close", "code": 1011, "reason": "engine died"}))
        with pytest.raises(ChannelClosed) as caught:
            await channel.receive()
        assert caught.value.code == 1011 and caught.value.reason == "engine died"
        assert "engine died" in str(caught.value)
        with pytest.raises(ChannelClosed):
            await channel.send(echo(1))
    finally:
        await channel.close()
    await runtime.wait_until(lambda: container.open_connections == 0)


async def test_internal_stream_failure_becomes_retryable_channel_closed(
    runtime: SageMakerRuntimeStandIn, container: ScriptedContainer
) -> None:
    channel = await connect(runtime)
    try:
        await channel.send(echo(1))
        assert json.loads(await channel.receive())["n"] == 1
        await runtime.fail_streams("backend went away")
        with pytest.raises(ChannelClosed) as caught:
            await channel.receive()
        assert caught.value.retryable and "backend went away" in str(caught.value)
    finally:
        await channel.close()
    await runtime.wait_until(lambda: container.open_connections == 0)


@pytest.mark.parametrize("reset", [False, True], ids=["end-stream", "rst-stream"])
async def test_stream_cut_mid_way_becomes_channel_closed(
    runtime: SageMakerRuntimeStandIn, container: ScriptedContainer, reset: bool
) -> None:
    channel = await connect(runtime)
    try:
        await runtime.cut_streams(reset=reset)
        with pytest.raises(ChannelClosed):
            await channel.receive()
    finally:
        await channel.close()
    await runtime.wait_until(lambda: container.open_connections == 0)


# ----------------------------------------------------------------------------- closing


async def test_close_ends_everything_and_is_idempotent(
    runtime: SageMakerRuntimeStandIn, container: ScriptedContainer
) -> None:
    before = {t for t in asyncio.all_tasks() if not t.done()}
    channel = await connect(runtime)
    await channel.send(echo(1))
    assert json.loads(await channel.receive())["n"] == 1
    assert container.open_connections == 1

    await channel.close()
    await channel.close()

    await runtime.wait_until(lambda: runtime.streams[0].input_ended)
    await runtime.wait_until(lambda: container.open_connections == 0)
    await runtime.wait_until(lambda: runtime.active_upstreams == 0)
    with pytest.raises(ChannelClosed):
        await channel.send(echo(2))
    with pytest.raises(ChannelClosed):
        await channel.receive()
    left = {t for t in asyncio.all_tasks() if not t.done()} - before
    left.discard(asyncio.current_task())  # type: ignore[arg-type]
    assert not [t for t in left if "sagemaker" in t.get_name() or "body_generator" in repr(t)]


async def test_a_pending_receive_ends_when_the_channel_closes(
    runtime: SageMakerRuntimeStandIn,
) -> None:
    channel = await connect(runtime)
    waiting = asyncio.create_task(channel.receive())
    await asyncio.sleep(0)
    await channel.close()
    with pytest.raises(ChannelClosed):
        await waiting


async def test_a_cancelled_wait_leaves_awscrts_future_alone_and_closes_what_comes_late() -> None:
    """awscrt completes its futures from its own thread, cancelled or not (``InvalidStateError``
    on a cancelled one): a timeout must stop our wait only, and a connection that opens after
    its caller gave up is handed over to be closed."""
    crt_future: concurrent.futures.Future[str] = concurrent.futures.Future()
    unwanted: list[str] = []
    waiter = _without_cancelling(crt_future, unwanted=unwanted.append)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await waiter
    assert not crt_future.cancelled()
    late = threading.Thread(target=crt_future.set_result, args=("late connection",))
    late.start()
    late.join()
    async with asyncio.timeout(5):
        while not unwanted:  # noqa: ASYNC110 - delivered through the loop from another thread
            await asyncio.sleep(0.01)
    assert unwanted == ["late connection"]


# ----------------------------------------------------------------------------- real speech


@requires_espeak
async def test_spoken_sentence_is_transcribed_through_sagemaker(
    asr_server_url: str, asr_model_name: str, tls: LoopbackTLS
) -> None:
    from agent.stt.protocol import (
        Commit,
        SessionUpdate,
        TranscriptionDone,
        encode_pcm_append,
        parse_server_event,
    )
    from tests.fakes.speech import speech_at, word_error_rate

    sentence = "please call me back tomorrow morning"
    pcm = speech_at(sentence, 16000)
    base, _, path = asr_server_url.partition("://")[2].partition("/")
    async with SageMakerRuntimeStandIn(upstream_url=f"ws://{base}", tls=tls) as runtime:
        channel = await connect(runtime, invocation_path=path)
        try:
            await channel.send(SessionUpdate(asr_model_name).to_json())
            await channel.send(Commit().to_json())
            chunk = 16000 * 2 // 10  # 100 ms
            for start in range(0, len(pcm), chunk):
                await channel.send(encode_pcm_append(pcm[start : start + chunk]))
            await channel.send(encode_pcm_append(b"\x00\x00" * 8000))  # 0.5 s of silence
            await channel.send(Commit(final=True).to_json())
            async with asyncio.timeout(60):
                while not isinstance(event := parse_server_event(await channel.receive()),
                                     TranscriptionDone):  # fmt: skip
                    pass
        finally:
            await channel.close()
        assert word_error_rate(sentence, event.text) <= 0.2, event.text
        assert {part.data_type for part in runtime.streams[0].parts} == {"UTF8"}
