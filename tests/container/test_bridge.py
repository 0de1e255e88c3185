"""The bridge served for real by uvicorn, between a real client and a real upstream.

The upstream is the offline ASR server (it speaks vLLM's realtime protocol) where the test
needs real transcripts and vLLM's answers, and a scripted ``websockets`` peer where it needs
to steer the other side or count its sockets.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from agent.stt.protocol import (
    ErrorEvent,
    SessionCreated,
    SessionUpdate,
    TranscriptionDone,
    encode_pcm_append,
    parse_server_event,
)
from container.bridge.relay import (
    INVALID_EVENT,
    PROCESSING_ERROR,
    binary_as_text,
    client_code_for,
    error_event,
    upstream_code_for,
)
from container.bridge.settings import BridgeSettings, SettingsError
from tests.conftest import requires_espeak
from tests.fakes.speech import speech_at, word_error_rate

from .conftest import RunningBridge, ScriptedUpstream, bridge_settings, running_bridge, until

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def bridge(upstream: ScriptedUpstream) -> AsyncIterator[RunningBridge]:
    async with running_bridge(bridge_settings(upstream.url, max_message_bytes=4096)) as running:
        yield running


async def open_stream(bridge: RunningBridge) -> ClientConnection:
    """A client as SageMaker is one: connects and reads vLLM's greeting through the bridge."""
    ws = await connect(bridge.stream_url, compression=None, proxy=None)
    greeting = parse_server_event(await asyncio.wait_for(ws.recv(), 10))
    assert isinstance(greeting, SessionCreated)
    return ws


async def recv_event(ws: ClientConnection) -> object:
    return parse_server_event(await asyncio.wait_for(ws.recv(), 10))


async def closed_with(ws: ClientConnection) -> tuple[int | None, str | None]:
    """Read until the bridge closes the socket; the code and reason it sent."""
    with pytest.raises(ConnectionClosed):
        async with asyncio.timeout(10):
            while True:
                await ws.recv()
    return ws.close_code, ws.close_reason


async def metric_values(
    bridge: RunningBridge,
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    async with httpx.AsyncClient(trust_env=False) as http:
        response = await http.get(f"{bridge.base_http}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    values = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return values


# ----------------------------------------------------------------------------- relaying


async def test_text_frames_are_relayed_verbatim_both_ways(
    bridge: RunningBridge, upstream: ScriptedUpstream
) -> None:
    ws = await open_stream(bridge)
    sent = '{"type": "input_audio_buffer.append", "audio": "AAAA"}'
    await ws.send(sent)
    assert await asyncio.wait_for(ws.recv(), 10) == sent  # the upstream echoes
    await ws.close()
    seen = await upstream.wait_connection()
    assert seen.received == [sent]


async def test_binary_json_object_is_forwarded_as_text(
    bridge: RunningBridge, upstream: ScriptedUpstream
) -> None:
    ws = await open_stream(bridge)
    event = SessionUpdate("some-model").to_json()
    await ws.send(event.encode("utf-8"))
    echoed = await asyncio.wait_for(ws.recv(), 10)
    assert echoed == event and isinstance(echoed, str)
    await ws.close()
    seen = await upstream.wait_connection()
    assert seen.received == [event]  # a str: it reached vLLM as a text frame


@pytest.mark.parametrize(
    "payload",
    [b"\x00\x01\xfe\xff raw pcm", b"[1, 2, 3]", b'{"type": "input_audio_buffer.append"', b"\xc3("],
    ids=["pcm", "json-array", "truncated-json", "bad-utf8"],
)
async def test_binary_garbage_gets_an_error_and_never_reaches_upstream(
    bridge: RunningBridge, upstream: ScriptedUpstream, payload: bytes
) -> None:
    ws = await open_stream(bridge)
    await ws.send(payload)
    error = await recv_event(ws)
    assert isinstance(error, ErrorEvent) and error.code == INVALID_EVENT
    assert "UTF8" in error.error
    # The stream goes on: the next good event is relayed.
    await ws.send('{"type": "input_audio_buffer.commit"}')
    assert await asyncio.wait_for(ws.recv(), 10) == '{"type": "input_audio_buffer.commit"}'
    await ws.close()
    seen = await upstream.wait_connection()
    assert seen.received == ['{"type": "input_audio_buffer.commit"}']


async def test_invalid_text_is_relayed_untouched(
    bridge: RunningBridge, upstream: ScriptedUpstream
) -> None:
    ws = await open_stream(bridge)
    await ws.send("this is not json {")
    assert await asyncio.wait_for(ws.recv(), 10) == "this is not json {"
    await ws.close()
    assert (await upstream.wait_connection()).received == ["this is not json {"]


@pytest.mark.parametrize("as_bytes", [False, True], ids=["text", "binary"])
async def test_oversized_message_gets_an_error_then_close_1009(
    bridge: RunningBridge, upstream: ScriptedUpstream, as_bytes: bool
) -> None:
    ws = await open_stream(bridge)
    big = json.dumps({"type": "input_audio_buffer.append", "audio": "A" * 5000})
    await ws.send(big.encode() if as_bytes else big)
    error = await recv_event(ws)
    assert isinstance(error, ErrorEvent) and error.code == INVALID_EVENT
    assert "limit" in error.error
    code, _ = await closed_with(ws)
    assert code == 1009
    seen = await upstream.wait_connection()
    await upstream.wait_idle()
    assert seen.received == []


async def test_message_past_the_protocol_limit_closes_1009(
    bridge: RunningBridge, upstream: ScriptedUpstream
) -> None:
    ws = await open_stream(bridge)
    await ws.send("A" * (3 * 4096))  # over twice the limit: uvicorn's parser refuses it
    code, _ = await closed_with(ws)
    assert code == 1009
    await upstream.wait_idle()
    assert (await upstream.wait_connection()).received == []


async def test_answers_client_pings(bridge: RunningBridge) -> None:
    ws = await open_stream(bridge)
    pong = await ws.ping(b"sagemaker")
    await asyncio.wait_for(pong, 10)
    await ws.close()


# ----------------------------------------------------------------------------- closes


@pytest.mark.parametrize(("code", "reason"), [(1000, "done"), (4001, "caller hung up")])
async def test_client_close_closes_upstream_with_the_same_code(
    bridge: RunningBridge, upstream: ScriptedUpstream, code: int, reason: str
) -> None:
    ws = await open_stream(bridge)
    await ws.close(code, reason)
    seen = await upstream.wait_connection()
    await asyncio.wait_for(seen.closed.wait(), 10)
    assert (seen.close_code, seen.close_reason) == (code, reason)
    await upstream.wait_idle()


async def test_upstream_close_reaches_client_with_its_code(
    bridge: RunningBridge, upstream: ScriptedUpstream
) -> None:
    ws = await open_stream(bridge)
    seen = await upstream.wait_connection()
    await seen.ws.close(4002, "model unloading")
    assert await closed_with(ws) == (4002, "model unloading")


async def test_upstream_dropping_the_connection_closes_client_1011(
    bridge: RunningBridge, upstream: ScriptedUpstream
) -> None:
    ws = await open_stream(bridge)
    seen = await upstream.wait_connection()
    assert seen.ws.transport is not None
    seen.ws.transport.abort()  # vLLM crashed: no close frame
    code, reason = await closed_with(ws)
    assert code == 1011 and reason is not None and "abnormally" in reason


async def test_client_vanishing_mid_sentence_leaves_no_upstream_socket(
    bridge: RunningBridge, upstream: ScriptedUpstream
) -> None:
    ws = await open_stream(bridge)
    for _ in range(5):
        await ws.send(encode_pcm_append(b"\x00\x01" * 800))
    await ws.send('{"type": "input_audio_buffer.commit"}')
    seen = await upstream.wait_connection()
    assert ws.transport is not None
    ws.transport.abort()  # no close frame: the caller's network went away
    await asyncio.wait_for(seen.closed.wait(), 10)
    await upstream.wait_idle()
    assert seen.close_code == 1001, seen.close_code
    values = await metric_values(bridge)
    assert values[("voxtral_bridge_sessions_active", ())] == 0


async def test_many_streams_leave_no_upstream_socket(
    bridge: RunningBridge, upstream: ScriptedUpstream
) -> None:
    clients = [await open_stream(bridge) for _ in range(8)]
    assert len(upstream.active) == 8
    for i, ws in enumerate(clients):
        if i % 2:
            await ws.close()
        else:
            assert ws.transport is not None
            ws.transport.abort()
    await upstream.wait_idle()


async def test_upstream_down_gives_error_event_then_1011(closed_port: int) -> None:
    settings = bridge_settings(f"ws://127.0.0.1:{closed_port}/v1/realtime")
    async with running_bridge(settings) as bridge:
        ws = await connect(bridge.stream_url, proxy=None)
        error = await recv_event(ws)
        assert isinstance(error, ErrorEvent) and error.code == PROCESSING_ERROR
        assert "unavailable" in error.error
        code, _ = await closed_with(ws)
        assert code == 1011
        values = await metric_values(bridge)
        assert values[("voxtral_bridge_errors_total", (("kind", "upstream_unavailable"),))] == 1


async def test_upstream_refusing_the_handshake_gives_error_event_then_1011(
    upstream: ScriptedUpstream,
) -> None:
    settings = bridge_settings(f"ws://127.0.0.1:{upstream.port}/wrong/path")
    async with running_bridge(settings) as bridge:
        ws = await connect(bridge.stream_url, proxy=None)
        error = await recv_event(ws)
        assert isinstance(error, ErrorEvent) and "404" in error.error
        assert (await closed_with(ws))[0] == 1011


# ----------------------------------------------------------------------------- backpressure

FLOOD_BOUND = 48 * 1024 * 1024
"""Far above what the sockets' and queues' buffers hold, far below what a free-running
pump would let through before the test notices: crossing it means buffering is unbounded."""


async def fill_until_blocked(ws: ClientConnection) -> int:
    """Send 64 kB appends until one send can't complete for a second; the bytes sent."""
    chunk = encode_pcm_append(b"\x01\x02" * 24000)
    sent = 0
    while sent < FLOOD_BOUND:
        try:
            await asyncio.wait_for(ws.send(chunk), 1.0)
        except TimeoutError:
            return sent
        sent += len(chunk)
    raise AssertionError(f"the client pushed {sent} bytes into a stalled stream unhindered")


async def test_stalled_upstream_pushes_back_then_the_stream_ends_1011(
    upstream: ScriptedUpstream,
) -> None:
    upstream.mode = "stall"  # vLLM stops reading
    settings = bridge_settings(upstream.url, max_message_bytes=128 * 1024, send_timeout_s=5.0)
    async with running_bridge(settings) as bridge:
        ws = await open_stream(bridge)
        await fill_until_blocked(ws)
        code, reason = await closed_with(ws)
        assert code == 1011 and reason is not None and "took no message" in reason
        upstream.release_stall.set()  # now it can see that the bridge closed its socket
        await upstream.wait_idle()
        values = await metric_values(bridge)
        assert values[("voxtral_bridge_errors_total", (("kind", "upstream_stalled"),))] == 1


async def test_client_vanishing_while_backpressured_leaves_no_upstream_socket(
    upstream: ScriptedUpstream,
) -> None:
    upstream.mode = "stall"
    settings = bridge_settings(upstream.url, max_message_bytes=128 * 1024, send_timeout_s=5.0)
    async with running_bridge(settings) as bridge:
        ws = await open_stream(bridge)
        await fill_until_blocked(ws)
        assert ws.transport is not None
        ws.transport.abort()
        # The bridge can't see the client leave while its send to vLLM is stuck; its send
        # timeout ends the stream. Released only then, the upstream finds its socket closed.
        stalled = ("voxtral_bridge_errors_total", (("kind", "upstream_stalled"),))

        async def has_stalled() -> bool:
            return (await metric_values(bridge))[stalled] == 1

        await until(has_stalled, "the bridge to declare the upstream stalled", 15)
        upstream.release_stall.set()
        await upstream.wait_idle()


async def test_slow_client_pushes_back_on_the_upstream(upstream: ScriptedUpstream) -> None:
    upstream.mode = "flood"  # vLLM talks, the client never reads
    settings = bridge_settings(upstream.url, max_message_bytes=128 * 1024, send_timeout_s=60.0)
    async with running_bridge(settings) as bridge:
        ws = await connect(bridge.stream_url, proxy=None, max_queue=4, max_size=None)
        seen = await upstream.wait_connection()
        previous = -1
        async with asyncio.timeout(30):
            while seen.flooded_bytes != previous:  # until the upstream's sends stop completing
                previous = seen.flooded_bytes
                assert previous < FLOOD_BOUND, "the bridge buffered a flood without limit"
                await asyncio.sleep(1.0)
        assert ws.transport is not None
        ws.transport.abort()
        await upstream.wait_idle()


# ----------------------------------------------------------------------------- health, metrics


async def test_ping_follows_upstream_health(
    bridge: RunningBridge, upstream: ScriptedUpstream
) -> None:
    async with httpx.AsyncClient(base_url=bridge.base_http, trust_env=False) as http:
        assert (await http.get("/ping")).status_code == 200
        assert (await http.post("/ping")).status_code == 200
        upstream.healthy = False
        response = await http.get("/ping")
        assert response.status_code == 503 and "503" in response.text
        assert (await http.post("/ping")).status_code == 503
        upstream.healthy = True
        assert (await http.get("/ping")).status_code == 200
        await upstream.stop()
        assert (await http.get("/ping")).status_code == 503


async def test_metrics_count_sessions_messages_and_errors(
    bridge: RunningBridge, upstream: ScriptedUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="voxtral.bridge")
    before = await metric_values(bridge)
    assert before[("voxtral_bridge_sessions_total", ())] == 0
    ws = await open_stream(bridge)
    values = await metric_values(bridge)
    assert values[("voxtral_bridge_sessions_active", ())] == 1
    for i in range(3):
        await ws.send(json.dumps({"type": "noop", "i": i}))
        await ws.recv()
    await ws.send(b"\x00garbage")
    await recv_event(ws)
    await ws.close(4005, "bye")
    await upstream.wait_idle()

    async def session_ended() -> bool:
        return (await metric_values(bridge))[("voxtral_bridge_sessions_active", ())] == 0

    await until(session_ended, "the session to end")
    values = await metric_values(bridge)
    assert values[("voxtral_bridge_sessions_total", ())] == 1
    assert values[("voxtral_bridge_messages_total", (("direction", "client_to_upstream"),))] == 3
    # the greeting plus three echoes
    assert values[("voxtral_bridge_messages_total", (("direction", "upstream_to_client"),))] == 4
    assert values[("voxtral_bridge_errors_total", (("kind", "invalid_binary"),))] == 1
    assert values[("voxtral_bridge_closes_total", (("initiator", "client"),))] == 1
    closed = [r for r in caplog.records if r.getMessage() == "session.closed"]
    assert len(closed) == 1
    fields = closed[0].fields  # type: ignore[attr-defined]
    assert fields["initiator"] == "client" and fields["upstream_code"] == 4005
    assert fields["messages_in"] == 3 and fields["messages_out"] == 4


# ----------------------------------------------------------------------------- with the ASR server


@requires_espeak
async def test_spoken_sentence_through_the_bridge_is_transcribed(
    asr_server_url: str, asr_model_name: str
) -> None:
    sentence = "please call me back tomorrow morning"
    pcm = speech_at(sentence, 16000)
    async with running_bridge(bridge_settings(asr_server_url)) as bridge:
        ws = await open_stream(bridge)
        await ws.send(SessionUpdate(asr_model_name).to_json())
        await ws.send('{"type": "input_audio_buffer.commit"}')
        step = 16000 * 2 // 10  # 100 ms
        for start in range(0, len(pcm), step):
            await ws.send(encode_pcm_append(pcm[start : start + step]))
        await ws.send('{"type": "input_audio_buffer.commit", "final": true}')
        async with asyncio.timeout(30):
            while True:
                event = await recv_event(ws)
                assert not isinstance(event, ErrorEvent), event
                if isinstance(event, TranscriptionDone):
                    break
        assert word_error_rate(sentence, event.text) <= 0.2, event.text
        await ws.close()


async def test_invalid_json_is_answered_by_the_speech_server(asr_server_url: str) -> None:
    async with running_bridge(bridge_settings(asr_server_url)) as bridge:
        ws = await open_stream(bridge)
        await ws.send("not json at all")
        error = await recv_event(ws)
        assert isinstance(error, ErrorEvent) and error.code == "invalid_json"
        await ws.close()


# ----------------------------------------------------------------------------- pure parts


def test_error_event_has_the_realtime_protocol_shape() -> None:
    wire = error_event("binary frame rejected", INVALID_EVENT)
    assert parse_server_event(wire) == ErrorEvent("binary frame rejected", INVALID_EVENT)
    assert json.loads(wire) == json.loads(
        ErrorEvent("binary frame rejected", INVALID_EVENT).to_json()
    )


def test_binary_as_text_accepts_only_json_objects() -> None:
    assert binary_as_text(b' {"type": "x"}') == ' {"type": "x"}'
    assert binary_as_text('{"type": "é"}'.encode()) == '{"type": "é"}'
    for payload in (b"", b"[]", b'"s"', b"{", b"\xff{}", b"{" * 100_000):
        assert binary_as_text(payload) is None


def test_close_code_mapping() -> None:
    assert upstream_code_for(4001) == 4001
    assert upstream_code_for(1005) == 1001  # no close frame: uvicorn says 1005 when it vanished
    assert upstream_code_for(1006) == 1001  # vanished
    assert client_code_for(1000) == 1000
    assert client_code_for(1006) == 1011
    assert client_code_for(1015) == 1011


def test_settings_from_env() -> None:
    settings = BridgeSettings.from_env(
        {
            "UPSTREAM_URL": "ws://10.0.0.5:9000/v1/realtime",
            "BRIDGE_PORT": "9090",
            "BRIDGE_MAX_MESSAGE_BYTES": "65536",
            "BRIDGE_UPSTREAM_PING_INTERVAL_S": "0",
            "BRIDGE_PER_MESSAGE_DEFLATE": "true",
        }
    )
    assert settings.health_url == "http://10.0.0.5:9000/health"
    assert settings.port == 9090 and settings.max_message_bytes == 65536
    assert settings.upstream_ping_interval_s is None and settings.per_message_deflate
    assert BridgeSettings.from_env({}) == BridgeSettings()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("BRIDGE_PORT", "eighty"),
        ("BRIDGE_MAX_MESSAGE_BYTES", "12"),
        ("UPSTREAM_URL", "http://127.0.0.1:8081/v1/realtime"),
        ("BRIDGE_PER_MESSAGE_DEFLATE", "maybe"),
        ("BRIDGE_HEALTH_TIMEOUT_S", "-1"),
    ],
)
def test_bad_settings_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        BridgeSettings.from_env({name: value})


async def test_invalid_utf8_text_is_closed_1007_without_a_traceback(
    bridge: RunningBridge, upstream: ScriptedUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    ws = await open_stream(bridge)
    seen = await upstream.wait_connection()
    ws.protocol.send_text(b'{"type": "\xff\xfe"}')  # a text frame that is not UTF-8
    ws.send_data()
    with pytest.raises(ConnectionClosed):
        while True:
            await asyncio.wait_for(ws.recv(), 10)
    assert ws.close_code == 1007
    await asyncio.wait_for(seen.closed.wait(), 10)
    await upstream.wait_idle()
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


@settings(max_examples=500)
@given(st.one_of(st.binary(max_size=300), st.text(max_size=300).map(lambda t: t.encode())))
def test_any_binary_frame_is_a_json_event_or_refused(frame: bytes) -> None:
    text = binary_as_text(frame)
    assert text is None or isinstance(json.loads(text), dict)
