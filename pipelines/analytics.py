"""Call analytics: one track of a listen-only call, transcribed as one speaker.

Each track (the caller's, the agent's) gets the captions' STT path: Silero VAD (the
process-wide batched model) cuts the track into stretches of speech, and each stretch goes to
the realtime STT endpoint of the profile through the very STT service the voice agent uses
(pre-roll, reconnect and replay included), run by a
:class:`~agent.stt.client.RealtimeTranscriber` that also reports where in the track each
stretch started and stopped.

Why one STT session per track, not one for the call: the realtime endpoint runs one generation
at a time per connection (a second commit while one runs is ignored), and the two speakers of a
call overlap; mixing them would also lose who said what. Two sessions transcribe overlapping
speech in parallel and keep each speaker's words apart, at the cost of a second connection
(vLLM has no per-connection cap; a session holds no GPU memory between utterances).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from loguru import logger
from pipecat.audio.vad.vad_analyzer import VADParams

from agent.config import STTSettings
from agent.stt.client import RealtimeTranscriber, TranscriptEvent
from pipelines.services import stt_service

VAD_STOP_SECS = 0.5
"""A pause this long ends an utterance (no turn to hand over: the captions' value)."""

FINAL_TIMEOUT_S = 5.0
"""At the end of the stream, how long the last utterance's final transcript may take."""


class TrackTranscription:
    """One speaker's track: PCM16 in (the phone's 8 kHz), events out to ``on_event``."""

    def __init__(
        self,
        settings: STTSettings,
        *,
        sample_rate: int,
        on_event: Callable[[TranscriptEvent], None],
    ) -> None:
        from agent.fastpath.shared_silero import SharedSileroVADAnalyzer

        self._transcriber = RealtimeTranscriber(
            stt_service(settings),
            sample_rate=sample_rate,
            vad_analyzer=SharedSileroVADAnalyzer(params=VADParams(stop_secs=VAD_STOP_SECS)),
            report_speech=True,
        )
        self._on_event = on_event
        self._relay: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._transcriber.__aenter__()
        self._relay = asyncio.create_task(self._relay_events(), name="analytics-track-events")

    async def feed(self, pcm: bytes) -> None:
        await self._transcriber.feed_frame(pcm)

    async def close(self, *, finish: bool) -> None:
        """Stop; with ``finish``, first wait (briefly) for the last utterance's transcript."""
        if finish:
            with contextlib.suppress(TimeoutError):
                await self._transcriber.finish(timeout=FINAL_TIMEOUT_S)
        await self._transcriber.__aexit__(None, None, None)
        if self._relay is not None:
            self._drain()
            self._relay.cancel()
            await asyncio.gather(self._relay, return_exceptions=True)

    async def _relay_events(self) -> None:
        events = self._transcriber.events
        while True:
            event = await events.get()
            self._handle(event)

    def _drain(self) -> None:
        events = self._transcriber.events
        while not events.empty():
            self._handle(events.get_nowait())

    def _handle(self, event: TranscriptEvent) -> None:
        try:
            self._on_event(event)
        except Exception:
            logger.exception("analytics: a transcript event could not be handled")


def track_transcription(
    settings: STTSettings,
) -> Callable[[int, Callable[[TranscriptEvent], None]], TrackTranscription]:
    """The factory the listen-only streams use: ``make(sample_rate, on_event)``."""

    def make(sample_rate: int, on_event: Callable[[TranscriptEvent], None]) -> TrackTranscription:
        return TrackTranscription(settings, sample_rate=sample_rate, on_event=on_event)

    return make
