"""Synthetic ``FramePushed`` events for the observer tests: real Pipecat processor classes as
sources, and a turn whose stage times are known to the millisecond."""

from __future__ import annotations

from collections.abc import AsyncGenerator

from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    Frame,
    InterimTranscriptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.observers.base_observer import FramePushed
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.tts_service import TTSService
from pipecat.transports.base_output import BaseOutputTransport
from pipecat.transports.base_transport import TransportParams

from agent.observability.turn_latency import TurnLatencyObserver

MS = 1_000_000  # ns
DOWN = FrameDirection.DOWNSTREAM
UP = FrameDirection.UPSTREAM


class _TTS(TTSService):
    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        yield None


class Pipeline:
    """Named stand-ins for the processors of a call, and a clock in milliseconds."""

    def __init__(self) -> None:
        self.vad = FrameProcessor(name="vad")
        self.stt = FrameProcessor(name="stt")
        self.llm = FrameProcessor(name="llm")
        self.tts = _TTS(sample_rate=16_000)
        self.out = BaseOutputTransport(TransportParams())
        self.sink = FrameProcessor(name="sink")

    def push(
        self, source: FrameProcessor, frame: Frame, at_ms: float, direction: FrameDirection = DOWN
    ) -> FramePushed:
        return FramePushed(
            source=source,
            destination=self.sink,
            frame=frame,
            direction=direction,
            timestamp=int(at_ms * MS),
        )


def audio() -> TTSAudioRawFrame:
    return TTSAudioRawFrame(b"\0\0" * 320, 16_000, 1)


def answered_turn(p: Pipeline, start_ms: float) -> list[FramePushed]:
    """A turn whose speech ends at ``start_ms + 1000`` (VAD stop 200 ms later) and stages
    follow at +300 (STT final), +350 (first token), +500 (TTS audio), +520 (audio out)."""
    t = start_ms
    return [
        p.push(p.vad, VADUserStartedSpeakingFrame(start_secs=0.2), t),
        p.push(p.vad, VADUserStartedSpeakingFrame(start_secs=0.2), t, UP),
        p.push(p.stt, InterimTranscriptionFrame("what", "u", "now"), t + 600),
        p.push(p.vad, VADUserStoppedSpeakingFrame(stop_secs=0.2), t + 1200),
        p.push(p.vad, VADUserStoppedSpeakingFrame(stop_secs=0.2), t + 1200, UP),
        p.push(p.stt, TranscriptionFrame("what time is it", "u", "now"), t + 1300),
        p.push(p.llm, LLMFullResponseStartFrame(), t + 1320),
        p.push(p.llm, LLMTextFrame("It"), t + 1350),
        p.push(p.llm, LLMTextFrame(" is"), t + 1360),
        p.push(p.llm, LLMFullResponseEndFrame(), t + 1370),
        p.push(p.tts, audio(), t + 1500),
        p.push(p.tts, audio(), t + 1510),
        p.push(p.out, BotStartedSpeakingFrame(), t + 1520),
        p.push(p.out, BotStartedSpeakingFrame(), t + 1520, UP),
    ]


async def feed(observer: TurnLatencyObserver, events: list[FramePushed]) -> None:
    for event in events:
        await observer.on_push_frame(event)
