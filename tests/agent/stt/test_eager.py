"""Eager end of turn: the STT sends the stable interim transcript when the VAD stops, so an
answer can start before the final transcript; the user speaking again withdraws it.

Pipecat's ``EagerEndOfTurnSTTServiceMixin`` frames (``EagerTranscriptionFrame``,
``EagerEndOfTurnCancelFrame``), so any Pipecat bot's turn strategies can act on them.
"""

from __future__ import annotations

import asyncio

from pipecat.frames.frames import EagerEndOfTurnCancelFrame, EagerTranscriptionFrame

from agent.stt.channels import websocket_channel_factory
from agent.stt.params import RealtimeSTTParams
from agent.stt.protocol import TranscriptionDelta
from agent.stt.service import VoxtralRealtimeSTTService
from tests.agent.stt.harness import SttHarness
from tests.agent.stt.test_service import tone
from tests.agent.transports.stack import async_wait_for
from tests.fakes.realtime_peer import Generation, RealtimePeer, Send

MODEL = "voxtral-test"


def eager_service(url: str, *, enabled: bool = True) -> VoxtralRealtimeSTTService:
    return VoxtralRealtimeSTTService(
        channel_factory=websocket_channel_factory(url),
        settings=VoxtralRealtimeSTTService.Settings(model=MODEL),
        params=RealtimeSTTParams(preroll_s=0.0, final_timeout_s=30, eager_stable_s=0.1),
        enable_eager_end_of_turn=enabled,
    )


def speaking(*words: str) -> RealtimePeer:
    """A peer that hears one of ``words`` per 100 ms of audio and holds its finals."""

    async def hear(send: Send, generation: Generation) -> None:
        step = generation.appends // 5
        if generation.appends % 5 == 1 and step < len(words):
            await send(TranscriptionDelta(("" if step == 0 else " ") + words[step]))

    return RealtimePeer(
        model=MODEL, transcript="What time is it?", on_append=hear, hold_finals=asyncio.Event()
    )


async def test_the_stable_interim_goes_out_as_an_eager_end_of_turn_before_the_final() -> None:
    async with speaking("what", "time", "is", "it") as peer:
        assert peer.hold_finals is not None
        async with SttHarness(eager_service(peer.url)) as h:
            await h.say(tone(0.5, 16_000), pace=1)
            await async_wait_for(lambda: bool(h.downstream.eager), timeout_s=5, what="eager")
            peer.hold_finals.set()
            final = await h.final()
        (eager,) = h.downstream.eager
        assert isinstance(eager, EagerTranscriptionFrame)
        assert eager.text == "what time is it"
        assert final.text == "What time is it?"
        assert peer.violations == []


async def test_the_user_speaking_again_withdraws_the_eager_end_of_turn() -> None:
    async with speaking("book", "a", "table") as peer:
        assert peer.hold_finals is not None
        async with SttHarness(eager_service(peer.url)) as h:
            await h.say(tone(0.4, 16_000), pace=1)
            await async_wait_for(lambda: bool(h.downstream.eager), timeout_s=5, what="eager")
            await h.say(tone(0.3, 16_000), pace=1)  # "... for two", before the final
            await async_wait_for(
                lambda: len(h.downstream.eager) == 2, timeout_s=5, what="the withdrawal"
            )
            peer.hold_finals.set()
            await h.final()
        assert [type(f) for f in h.downstream.eager[:2]] == [
            EagerTranscriptionFrame,
            EagerEndOfTurnCancelFrame,
        ]


async def test_without_eager_end_of_turn_nothing_but_the_final_goes_out() -> None:
    async with speaking("what", "time", "is", "it") as peer:
        assert peer.hold_finals is not None
        async with SttHarness(eager_service(peer.url, enabled=False)) as h:
            await h.say(tone(0.5, 16_000), pace=1)
            await asyncio.sleep(0.4)
            peer.hold_finals.set()
            await h.final()
        assert h.downstream.eager == []
