"""Call analytics: one track of a listen-only call, transcribed as one speaker.

Each track (the caller's, the agent's) gets the captions' STT path: Silero VAD (the
process-wide batched model) cuts the track into stretches of speech, and each stretch goes to
the realtime STT endpoint of the profile through the very STT service the voice agent uses
(pre-roll, reconnect and replay included), run by a
:class:`~agent.stt.client.RealtimeTranscriber`; the track also reports where in its audio each
stretch started and stopped.

The VAD runs inline, in the task that reads the stream (:class:`~agent.fastpath.speech_gate.
SpeechGate`, the ``VADController``'s decisions without a pipeline stage), and only speech goes
down the STT's pipeline: at a start, the pre-roll the gate kept (so the service's own pre-roll
holds what it would have held), then the speech, then the stop. Silence, most of a track,
costs a table lookup and a VAD window; a pipeline stage per track cost every frame two queue
hops and task switches even in silence (``bench/analytics.py``).

Why one STT session per track, not one for the call: the realtime endpoint runs one generation
at a time per connection (a second commit while one runs is ignored), and the two speakers of a
call overlap; mixing them would also lose who said what. Two sessions transcribe overlapping
speech in parallel and keep each speaker's words apart, at the cost of a second connection
(vLLM has no per-connection cap; a session holds no GPU memory between utterances).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from loguru import logger
from pipecat.audio.vad.vad_analyzer import VADParams

from agent.config import STTSettings
from agent.stt.client import RealtimeTranscriber, TranscriptEvent
from pipelines.services import stt_service

if TYPE_CHECKING:
    from agent.fastpath.speech_gate import SpeechEdge

VAD_STOP_SECS = 0.5
"""A pause this long ends an utterance (no turn to hand over: the captions' value)."""


def final_wait_s(settings: STTSettings) -> float:
    """At the end of the stream, how long the last utterance's final transcript may take.

    Nobody waits on it (the call is over) and a record without its last words is worse than a
    slot held a few seconds longer, so the wait covers the STT's own handling of a slow final:
    overdue at ``final_timeout_s``, the generation restarted with its audio replayed, and that
    replay's final. A flat 5 s lost the last words of a long utterance (a card number read out,
    8.9 s of audio) when a busy CPU recognizer took longer (CI, 2026-12-05).
    """
    return 3 * settings.params.final_timeout_s


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
        from agent.fastpath.speech_gate import SpeechGate

        # Nothing after the service needs the audio: no passthrough, one hop less per frame.
        self._transcriber = RealtimeTranscriber(
            stt_service(settings, audio_passthrough=False), sample_rate=sample_rate
        )
        self._gate = SpeechGate(
            SharedSileroVADAnalyzer(params=VADParams(stop_secs=VAD_STOP_SECS)),
            sample_rate=sample_rate,
            preroll_s=settings.params.preroll_s,
        )
        self._on_event = on_event
        self._final_wait_s = final_wait_s(settings)
        self._relay: asyncio.Task[None] | None = None
        self._idle_watch: asyncio.TimerHandle | None = None
        self._idle_stop: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._transcriber.__aenter__()
        self._relay = asyncio.create_task(self._relay_events(), name="analytics-track-events")

    async def feed(self, pcm: bytes) -> None:
        """One frame of the track: speech goes on to the STT (as the VAD stage pushed each
        frame on before analysing it), silence stays in the gate's pre-roll."""
        gate = self._gate
        if gate.speaking:
            await self._transcriber.feed_frame(pcm)
        edge = await gate.hear(pcm)
        if edge is None:
            return
        self._report(edge)
        if edge.kind == "started":
            preroll = gate.take_preroll()
            if preroll:
                await self._transcriber.feed_frame(preroll)
            await self._transcriber.start_turn(start_secs=gate.analyzer.params.start_secs)
            self._watch_idle()
        else:
            await self._transcriber.end_turn(stop_secs=gate.analyzer.params.stop_secs)

    async def close(self, *, finish: bool) -> None:
        """Stop; with ``finish``, first wait (briefly) for the last utterance's transcript."""
        if self._idle_watch is not None:
            self._idle_watch.cancel()
            self._idle_watch = None
        if finish:
            edge = self._gate.end()
            if edge is not None:
                self._report(edge)
            with contextlib.suppress(TimeoutError):
                await self._transcriber.finish(timeout=self._final_wait_s)
        await self._transcriber.__aexit__(None, None, None)
        if self._idle_stop is not None:
            await asyncio.gather(self._idle_stop, return_exceptions=True)
        if self._relay is not None:
            self._drain()
            self._relay.cancel()
            await asyncio.gather(self._relay, return_exceptions=True)

    def _report(self, edge: SpeechEdge) -> None:
        """A speech edge goes through the transcriber's event queue, in order with its
        transcripts (a final must meet the stretch it belongs to already stopped)."""
        kind: Literal["speech_started", "speech_stopped"] = (
            "speech_started" if edge.kind == "started" else "speech_stopped"
        )
        self._transcriber.events.put_nowait(TranscriptEvent(kind, "", audio_s=edge.audio_s))

    def _watch_idle(self) -> None:
        """While speaking, stop the stretch if the track's audio stops coming (Pipecat's
        VAD controller does the same for a muted microphone): one timer, no task."""
        gate = self._gate
        if self._idle_watch is not None or gate.audio_idle_timeout <= 0:
            return  # a timer runs already (it re-arms itself while speaking)
        due = gate.last_audio_at + gate.audio_idle_timeout - time.monotonic()
        self._idle_watch = asyncio.get_running_loop().call_later(max(0.0, due), self._idle_due)

    def _idle_due(self) -> None:
        self._idle_watch = None
        if not self._gate.speaking:
            return
        edge = self._gate.idle_stop()
        if edge is None:
            self._watch_idle()
            return
        logger.warning("analytics: no audio on a track while speaking; forcing a speech stop")
        self._report(edge)
        self._idle_stop = asyncio.create_task(
            self._transcriber.end_turn(stop_secs=self._gate.analyzer.params.stop_secs)
        )

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
