"""Media streams against strangers and broken clients: nothing unauthenticated or malformed
holds a call slot, a malformed first message is refused with a reason, and malformed messages
in a call are ignored and counted, never ending it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import httpx
import pytest
import websockets
from fastapi import FastAPI
from loguru import logger

from agent.transports import telephony
from agent.transports.telephony import stream_token
from tests.agent.transports.stack import (
    async_wait_for,
    phone_server,
)
from tests.conftest import requires_espeak
from tests.fakes.twilio_caller import SILENCE, TOKEN, TwilioCaller, ulaw_speech

pytestmark = [requires_espeak, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def server(asr_server_url: str, asr_model_name: str) -> Iterator[tuple[str, FastAPI]]:
    with phone_server(asr_server_url, asr_model_name, max_calls=1) as running:
        yield running


@pytest.fixture
def quick_start(monkeypatch: pytest.MonkeyPatch) -> float:
    monkeypatch.setattr(telephony, "START_TIMEOUT_S", 1.0)
    return 1.0


def ws_url(url: str) -> str:
    return url.replace("http://", "ws://") + "/telephony/twilio/ws"


async def close_of(ws: websockets.ClientConnection, timeout_s: float = 5) -> tuple[int, str]:
    with pytest.raises(websockets.ConnectionClosed):
        while True:
            await asyncio.wait_for(ws.recv(), timeout_s)
    return ws.close_code or 0, ws.close_reason or ""


async def test_sockets_that_never_send_start_hold_no_slot(
    server: tuple[str, FastAPI], quick_start: float
) -> None:
    url, app = server
    registry = app.state.registry
    started = registry.stats.started
    silent = [await websockets.connect(ws_url(url)) for _ in range(5)]
    async with websockets.connect(ws_url(url)) as ws:  # a real caller, after the strangers
        caller = TwilioCaller(ws)
        await caller.start()
        await async_wait_for(lambda: registry.stats.active == 1, timeout_s=5, what="the call")
        closes = await asyncio.gather(*(close_of(s) for s in silent))
        assert all(code == 1008 and "start" in reason for code, reason in closes)
        await caller.stop()
    await async_wait_for(lambda: registry.stats.active == 0, timeout_s=10, what="the call to end")
    assert registry.stats.started == started + 1  # only the real caller took a slot


async def test_too_many_sockets_waiting_for_start_are_turned_away(
    server: tuple[str, FastAPI], quick_start: float
) -> None:
    url, _app = server
    waiting = [await websockets.connect(ws_url(url)) for _ in range(telephony.MIN_AWAITING_START)]
    extra = await websockets.connect(ws_url(url))
    code, reason = await close_of(extra, timeout_s=2)  # at once, not after the start timeout
    assert code == 1013 and "busy" in reason
    await asyncio.gather(*(close_of(w) for w in waiting))


@pytest.mark.parametrize(
    "first, why",
    [
        (b"\x00\x01binary", "binary"),
        ("not json at all", "not JSON"),
        ("[1, 2, 3]", "object"),
        (json.dumps({"event": "start", "start": "oops"}), "object"),
        (json.dumps({"event": "start", "start": {"callSid": 5}}), "streamSid"),
    ],
)
async def test_a_malformed_first_message_is_refused_with_a_reason(
    server: tuple[str, FastAPI], first: str | bytes, why: str
) -> None:
    url, app = server
    started = app.state.registry.stats.started
    async with websockets.connect(ws_url(url)) as ws:
        await ws.send(first)
        code, reason = await close_of(ws)
    assert code == 1008 and why in reason and len(reason) <= 123
    assert app.state.registry.stats.started == started


async def test_malformed_messages_in_a_call_are_ignored_counted_and_logged_once(
    server: tuple[str, FastAPI],
) -> None:
    url, app = server
    registry = app.state.registry
    junk: list[str | bytes] = [
        json.dumps({"event": "media", "streamSid": "MZ0001", "media": {"payload": "abc"}}),
        json.dumps({"event": "media", "streamSid": "MZ0001", "media": {"payload": 12345}}),
        json.dumps({"event": "media", "streamSid": "MZ0001", "media": "x"}),
        json.dumps({"event": "dtmf", "streamSid": "MZ0001", "dtmf": {"digit": "Z"}}),
        b"\x00\xffbinary",
        "not json " * 1000,
        "[]",
    ]
    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(str(m)), level="WARNING")
    try:
        async with websockets.connect(ws_url(url)) as ws:
            caller = TwilioCaller(ws)
            await caller.start()
            await async_wait_for(lambda: registry.stats.active == 1, timeout_s=5, what="a call")
            call = registry.calls()[0]
            for message in junk:
                await ws.send(message)
            await caller.silence(0.3)
            await caller.speak(ulaw_speech("what is the weather like in paris today"))
            talking = asyncio.create_task(caller.silence(15))
            await async_wait_for(lambda: caller.count("media") >= 5, timeout_s=20, what="a reply")
            talking.cancel()
            assert registry.calls() == [call]  # the same call, still going
            await caller.stop()
    finally:
        logger.remove(sink)
    await async_wait_for(lambda: registry.stats.active == 0, timeout_s=10, what="the call to end")
    ignored = [w for w in warnings if "ignoring media-stream input" in w]
    assert len(ignored) == 1 and len(ignored[0]) < 600  # once per call, cut short
    assert "Traceback" not in "".join(warnings)
    assert await errors_counted(url, 'kind="twilio_message"') >= len(junk)


@pytest.fixture(scope="module")
def two_line_server(asr_server_url: str, asr_model_name: str) -> Iterator[tuple[str, FastAPI]]:
    with phone_server(asr_server_url, asr_model_name, max_calls=2) as running:
        yield running


async def test_a_caller_flooding_audio_is_held_to_real_time_and_others_are_answered(
    two_line_server: tuple[str, FastAPI],
) -> None:
    url, app = two_line_server
    registry = app.state.registry
    async with (
        websockets.connect(ws_url(url)) as flood_ws,
        websockets.connect(ws_url(url)) as good_ws,
    ):
        flooder, caller = TwilioCaller(flood_ws, "CA0002"), TwilioCaller(good_ws, "CA0003")
        await flooder.start(token=stream_token("CA0002", TOKEN))
        await caller.start(token=stream_token("CA0003", TOKEN))
        await async_wait_for(lambda: registry.stats.active == 2, timeout_s=5, what="two calls")
        await flooder.send([SILENCE] * 1500, paced=False)  # 30 s of audio, all at once
        await caller.silence(0.3)
        await caller.speak(ulaw_speech("what is the weather like in paris today"))
        talking = asyncio.create_task(caller.silence(15))
        await async_wait_for(lambda: caller.count("media") >= 5, timeout_s=20, what="a reply")
        talking.cancel()
        assert registry.stats.active == 2  # the flooder was held back, not hung up on
        await flooder.stop()
        await caller.stop()
    await async_wait_for(lambda: registry.stats.active == 0, timeout_s=10, what="calls ended")
    dropped = await errors_counted(url, "faster than real time")
    assert dropped >= 1000  # 1,500 messages in well under 2 s + the 2 s burst allowance


async def errors_counted(url: str, label: str) -> float:
    """The server's ``voice_agent_errors_total`` summed over the series whose labels hold
    ``label``."""
    async with httpx.AsyncClient() as http:
        metrics = (await http.get(url + "/metrics")).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("voice_agent_errors_total{") and label in line
    )
