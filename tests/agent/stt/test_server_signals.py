"""What newer vLLM servers say, and what a call must do for the server: the final commit on
every exit, a quiet reopen after an idle close, backpressure on a full audio queue."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest
from pipecat.frames.frames import VADUserStartedSpeakingFrame

from agent.stt import MemoryChannel, MockRealtimeEndpoint, RealtimeSTTParams
from agent.stt.protocol import ErrorEvent, SessionCreated, TranscriptionDone
from agent.stt.service import VoxtralRealtimeSTTService
from tests.agent.stt.harness import SttHarness

pytestmark = pytest.mark.timeout(30)

QUICK = RealtimeSTTParams(preroll_s=0.0, reconnect_min_wait_s=0.01)


class Recognizer:
    """Answers every final commit with the number of audio bytes it got; records events."""

    def __init__(self) -> None:
        self.events: list[dict[str, object]] = []
        self.sessions = 0

    async def serve(self, channel: MemoryChannel) -> None:
        self.sessions += 1
        await channel.send(SessionCreated(id=f"sess-{self.sessions}").to_json())
        await self.on_session(channel)
        audio = 0
        async for message in channel:
            event = json.loads(message)
            self.events.append(event)
            if event["type"] == "input_audio_buffer.append":
                audio += len(base64.b64decode(str(event["audio"])))
                await self.on_append(channel)
            elif event["type"] == "input_audio_buffer.commit" and event.get("final"):
                await channel.send(TranscriptionDone(text=f"{audio} bytes").to_json())
                audio = 0

    async def on_session(self, channel: MemoryChannel) -> None:
        pass

    async def on_append(self, channel: MemoryChannel) -> None:
        pass

    def count(self, kind: str, **fields: object) -> int:
        return sum(
            1
            for e in self.events
            if e["type"] == kind and all(e.get(k) == v for k, v in fields.items())
        )


async def test_a_call_cancelled_mid_turn_still_sends_the_final_commit() -> None:
    recognizer = Recognizer()
    endpoint = MockRealtimeEndpoint(recognizer.serve)
    service = VoxtralRealtimeSTTService(channel_factory=endpoint, params=QUICK)
    async with SttHarness(service) as h:
        await h.worker.queue_frame(VADUserStartedSpeakingFrame(start_secs=0.2))
        await h.frames(bytes(6400))
        for _ in range(200):
            if recognizer.count("input_audio_buffer.append"):
                break
            await asyncio.sleep(0.01)
        assert recognizer.count("input_audio_buffer.commit", final=True) == 0
    # leaving the harness cancels the pipeline, as a caller hanging up mid-sentence does
    await endpoint.aclose()
    assert recognizer.count("input_audio_buffer.commit", final=True) == 1


class IdleClosing(Recognizer):
    """Closes its first session for idleness, as vLLM with VLLM_REALTIME_IDLE_TIMEOUT_S does."""

    async def on_session(self, channel: MemoryChannel) -> None:
        if self.sessions == 1:
            await channel.send(ErrorEvent(error="session idle", code="idle_timeout").to_json())
            await channel.close()


async def test_an_idle_close_is_reopened_quietly() -> None:
    recognizer = IdleClosing()
    endpoint = MockRealtimeEndpoint(recognizer.serve)
    service = VoxtralRealtimeSTTService(channel_factory=endpoint, params=QUICK)
    failures: list[str] = []

    async def connection_error(_service: object, why: str) -> None:
        failures.append(why)

    service.add_event_handler("on_connection_error", connection_error)
    try:
        async with SttHarness(service) as h:
            for _ in range(200):
                if recognizer.sessions >= 2 and service.connected:
                    break
                await asyncio.sleep(0.01)
            await h.say(bytes(3200))
            assert (await h.final()).text == "3200 bytes"
    finally:
        await endpoint.aclose()
    assert recognizer.sessions == 2
    assert h.errors == [] and failures == []


class Overloaded(Recognizer):
    """Says ``buffer_full`` after the first append, keeping every byte (a warning only)."""

    async def on_append(self, channel: MemoryChannel) -> None:
        if self.count("input_audio_buffer.append") == 1:
            await channel.send(ErrorEvent(error="queue full", code="buffer_full").to_json())


async def test_buffer_full_is_backpressure_not_a_lost_turn() -> None:
    recognizer = Overloaded()
    endpoint = MockRealtimeEndpoint(recognizer.serve)
    service = VoxtralRealtimeSTTService(channel_factory=endpoint, params=QUICK)
    try:
        async with SttHarness(service) as h:
            await h.say(bytes(32000), pace=2.0)  # 1 s of audio in 20 ms frames
            assert (await h.final()).text == "32000 bytes"  # every byte arrived
    finally:
        await endpoint.aclose()
    assert h.errors == []  # no ErrorFrame: nothing failed
    appends = recognizer.count("input_audio_buffer.append")
    assert appends < 50  # the pause merged appends (1 s would be 50 of 20 ms)
