"""In-memory channels: the service's test seam, with no socket and no server process."""

from __future__ import annotations

import base64
import json

import pytest

from agent.stt import MemoryChannel, MockRealtimeEndpoint, RealtimeSTTParams, channel_pair
from agent.stt.channels import ChannelClosed
from agent.stt.protocol import SessionCreated, TranscriptionDone
from agent.stt.service import VoxtralRealtimeSTTService
from tests.agent.stt.harness import SttHarness

pytestmark = pytest.mark.timeout(30)


async def test_what_one_end_sends_the_other_receives_until_either_closes() -> None:
    client, server = channel_pair()
    await client.send("hello")
    assert await server.receive() == "hello"
    await server.close()
    with pytest.raises(ChannelClosed):
        await client.receive()
    with pytest.raises(ChannelClosed):
        await client.send("too late")


async def test_the_service_transcribes_through_a_handler_and_reconnects_when_it_hangs_up() -> None:
    """A handler that answers each final commit with a transcript of the bytes it got, and
    hangs up after the first turn: the second turn still gets its transcript."""
    seen_models: list[str] = []

    async def server(channel: MemoryChannel) -> None:
        await channel.send(SessionCreated(id="sess-1").to_json())
        audio_bytes = 0
        async for message in channel:
            event = json.loads(message)
            if event["type"] == "session.update":
                seen_models.append(event["model"])
            elif event["type"] == "input_audio_buffer.append":
                audio_bytes += len(base64.b64decode(event["audio"]))
            elif event["type"] == "input_audio_buffer.commit" and event.get("final"):
                await channel.send(TranscriptionDone(text=f"{audio_bytes} bytes").to_json())
                return  # hang up: the service must reconnect for the next turn

    endpoint = MockRealtimeEndpoint(server)
    service = VoxtralRealtimeSTTService(
        channel_factory=endpoint,
        settings=VoxtralRealtimeSTTService.Settings(model="served-name"),
        params=RealtimeSTTParams(preroll_s=0.0, reconnect_min_wait_s=0.01),
    )
    try:
        async with SttHarness(service) as h:
            await h.say(bytes(6400))  # 0.2 s at 16 kHz
            assert (await h.final()).text == "6400 bytes"
            await h.say(bytes(3200))
            assert (await h.final()).text == "3200 bytes"
    finally:
        await endpoint.aclose()
    assert endpoint.opened >= 2
    assert seen_models[:2] == ["served-name", "served-name"]
