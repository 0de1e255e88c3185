"""An STT server that goes away mid-turn and comes back (a restarted recognizer, a network
outage) costs no turn: the service reconnects within its backoff budget and replays the turn."""

from __future__ import annotations

import base64
import json
import time

import pytest
from pipecat.utils.network import exponential_backoff_time

from agent.stt import MemoryChannel, MockRealtimeEndpoint, RealtimeSTTParams
from agent.stt.channels import ChannelError, RealtimeChannel
from agent.stt.protocol import SessionCreated, TranscriptionDone
from agent.stt.service import VoxtralRealtimeSTTService
from tests.agent.stt.harness import SttHarness

pytestmark = pytest.mark.timeout(60)


def test_the_default_reconnect_budget_rides_out_ten_seconds() -> None:
    params = RealtimeSTTParams()
    waits = [
        exponential_backoff_time(
            attempt,
            min_wait=params.reconnect_min_wait_s,
            max_wait=params.reconnect_max_wait_s,
            multiplier=params.reconnect_min_wait_s,
        )
        for attempt in range(1, params.reconnect_attempts)
    ]
    assert sum(waits) >= 10.0


async def test_a_server_that_dies_mid_turn_and_returns_still_transcribes_the_turn() -> None:
    down_until = 0.0
    heard_after_outage: list[int] = []

    async def recognizer(channel: MemoryChannel) -> None:
        nonlocal down_until
        await channel.send(SessionCreated(id="sess").to_json())
        audio = 0
        async for message in channel:
            event = json.loads(message)
            if event["type"] == "input_audio_buffer.append":
                audio += len(base64.b64decode(event["audio"]))
                if down_until == 0.0 and audio >= 3200:
                    down_until = time.monotonic() + 1.5  # dies mid-turn, down for 1.5 s
                    return
            elif event["type"] == "input_audio_buffer.commit" and event.get("final"):
                heard_after_outage.append(audio)
                await channel.send(TranscriptionDone(text=f"{audio} bytes").to_json())

    endpoint = MockRealtimeEndpoint(recognizer)

    async def connect() -> RealtimeChannel:
        if time.monotonic() < down_until:
            raise ChannelError("connection refused (the recognizer is restarting)")
        return await endpoint()

    service = VoxtralRealtimeSTTService(
        channel_factory=connect,
        params=RealtimeSTTParams(preroll_s=0.0, reconnect_min_wait_s=0.1, reconnect_max_wait_s=0.4),
    )
    try:
        async with SttHarness(service) as h:
            await h.say(bytes(32000), pace=4.0)  # 1 s of audio; the server dies after 0.1 s
            final = await h.final(timeout=20)
    finally:
        await endpoint.aclose()
    assert final.text == "32000 bytes"  # the whole turn, replayed on the new connection
    assert heard_after_outage == [32000] and endpoint.opened >= 2
    assert not any(e.fatal for e in h.errors)
