"""Media streams against strangers and broken clients: nothing unauthenticated or malformed
holds a call slot, a malformed first message is refused with a reason, and malformed messages
in a call are ignored and counted, never ending it. Each test runs for every carrier (the
``carrier`` fixture: Twilio, Telnyx)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets
from fastapi import FastAPI
from loguru import logger

from agent.transports import telephony
from tests.agent.transports.carriers import Carrier
from tests.agent.transports.stack import (
    async_wait_for,
    phone_server,
)
from tests.conftest import requires_espeak
from tests.fakes.twilio_caller import SILENCE, ulaw_speech

pytestmark = [requires_espeak, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def server(asr_server_url: str, asr_model_name: str) -> Iterator[tuple[str, FastAPI]]:
    with phone_server(asr_server_url, asr_model_name, max_calls=1) as running:
        yield running


@pytest.fixture
def quick_start(monkeypatch: pytest.MonkeyPatch) -> float:
    monkeypatch.setattr(telephony, "START_TIMEOUT_S", 1.0)
    return 1.0


async def close_of(ws: websockets.ClientConnection, timeout_s: float = 5) -> tuple[int, str]:
    with pytest.raises(websockets.ConnectionClosed):
        while True:
            await asyncio.wait_for(ws.recv(), timeout_s)
    return ws.close_code or 0, ws.close_reason or ""


async def test_sockets_that_never_send_start_hold_no_slot(
    server: tuple[str, FastAPI], quick_start: float, carrier: Carrier
) -> None:
    url, app = server
    registry = app.state.registry
    started = registry.stats.started
    silent = [await websockets.connect(carrier.ws_url(url)) for _ in range(5)]
    async with carrier.call(url) as caller:  # a real caller, after the strangers
        await caller.start()
        await async_wait_for(lambda: registry.stats.active == 1, timeout_s=5, what="the call")
        closes = await asyncio.gather(*(close_of(s) for s in silent))
        assert all(code == 1008 and "start" in reason for code, reason in closes)
        await caller.stop()
    await async_wait_for(lambda: registry.stats.active == 0, timeout_s=10, what="the call to end")
    assert registry.stats.started == started + 1  # only the real caller took a slot


async def test_too_many_sockets_waiting_for_start_are_turned_away(
    server: tuple[str, FastAPI], quick_start: float, carrier: Carrier
) -> None:
    url, _app = server
    ws_url = carrier.ws_url(url)
    waiting = [await websockets.connect(ws_url) for _ in range(telephony.MIN_AWAITING_START)]
    extra = await websockets.connect(ws_url)
    code, reason = await close_of(extra, timeout_s=2)  # at once, not after the start timeout
    assert code == 1013 and "busy" in reason
    await asyncio.gather(*(close_of(w) for w in waiting))


def telnyx_start(**start: Any) -> str:
    """A Telnyx ``start`` for call ``v3:1`` with ``start`` fields changed."""
    return json.dumps(
        {"event": "start", "stream_id": "S", "start": {"call_control_id": "v3:1", **start}}
    )


ANY_CARRIER_FIRST = [
    (b"\x00\x01binary", "binary"),
    ("not json at all", "not JSON"),
    ("[1, 2, 3]", "object"),
    (json.dumps({"event": "start", "start": "oops"}), "object"),
]
MALFORMED_FIRST = [(name, *case) for name in ("twilio", "telnyx") for case in ANY_CARRIER_FIRST] + [
    ("twilio", json.dumps({"event": "start", "start": {"callSid": 5}}), "streamSid"),
    ("telnyx", json.dumps({"event": "start", "start": {"call_control_id": "v3:1"}}), "stream_id"),
    ("telnyx", telnyx_start(call_control_id=5), "call_control_id"),
    ("telnyx", telnyx_start(media_format={"encoding": "G722"}), "PCMU or PCMA"),
    ("telnyx", telnyx_start(media_format={"encoding": "PCMU", "sample_rate": 16000}), "8000 Hz"),
]


@pytest.mark.parametrize("carrier_name, first, why", MALFORMED_FIRST)
async def test_a_malformed_first_message_is_refused_with_a_reason(
    server: tuple[str, FastAPI], carrier_name: str, first: str | bytes, why: str
) -> None:
    url, app = server
    started = app.state.registry.stats.started
    async with websockets.connect(
        f"{url.replace('http://', 'ws://')}/telephony/{carrier_name}/ws"
    ) as ws:
        await ws.send(first)
        code, reason = await close_of(ws)
    assert code == 1008 and why in reason and len(reason) <= 123
    assert app.state.registry.stats.started == started


async def test_malformed_messages_in_a_call_are_ignored_counted_and_logged_once(
    server: tuple[str, FastAPI], carrier: Carrier
) -> None:
    url, app = server
    registry = app.state.registry
    stream = {"streamSid": "MZ0001"} if carrier.name == "twilio" else {"stream_id": "stream-0001"}
    junk: list[str | bytes] = [
        json.dumps({"event": "media", **stream, "media": {"payload": "abc"}}),
        json.dumps({"event": "media", **stream, "media": {"payload": 12345}}),
        json.dumps({"event": "media", **stream, "media": "x"}),
        json.dumps({"event": "dtmf", **stream, "dtmf": {"digit": "Z"}}),
        b"\x00\xffbinary",
        "not json " * 1000,
        "[]",
    ]
    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(str(m)), level="WARNING")
    try:
        async with carrier.call(url) as caller:
            await caller.start()
            await async_wait_for(lambda: registry.stats.active == 1, timeout_s=5, what="a call")
            call = registry.calls()[0]
            for message in junk:
                await caller.ws.send(message)
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
    assert await errors_counted(url, f'kind="{carrier.name}_message"') >= len(junk)


@pytest.fixture(scope="module")
def two_line_server(asr_server_url: str, asr_model_name: str) -> Iterator[tuple[str, FastAPI]]:
    with phone_server(asr_server_url, asr_model_name, max_calls=2) as running:
        yield running


async def test_a_caller_flooding_audio_is_held_to_real_time_and_others_are_answered(
    two_line_server: tuple[str, FastAPI], carrier: Carrier
) -> None:
    url, app = two_line_server
    registry = app.state.registry
    dropped_before = await errors_counted(url, "faster than real time")
    async with carrier.call(url, 2) as flooder, carrier.call(url, 3) as caller:
        await flooder.start()
        await caller.start()
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
    dropped = await errors_counted(url, "faster than real time") - dropped_before
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
