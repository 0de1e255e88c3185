"""Use the STT service outside a voice agent: files (``voice-agent transcribe``) and captions.

:class:`RealtimeTranscriber` runs :class:`VoxtralRealtimeSTTService` in a minimal Pipecat
pipeline and turns what comes out into :class:`TranscriptEvent`s. It is the exact client code
the voice agent uses (session, turns, pre-roll, reconnect and replay), not a second one.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from pipecat.audio.vad.vad_analyzer import VADAnalyzer
from pipecat.frames.frames import (
    DataFrame,
    ErrorFrame,
    Frame,
    InputAudioRawFrame,
    InterimTranscriptionFrame,
    SystemFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.audio.vad_processor import VADProcessor
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner

from agent.stt.service import VoxtralRealtimeSTTService

FRAME_S = 0.02


@dataclass(frozen=True, slots=True)
class TranscriptEvent:
    """What a transcriber reports: growing text, a final transcript, or an error; with
    ``report_speech``, also where in the audio each stretch of speech started and stopped."""

    kind: Literal["interim", "final", "error", "speech_started", "speech_stopped"]
    text: str
    fatal: bool = False
    vad_wait_s: float | None = None
    """A final's VAD stop wait: the silence the VAD heard before it ended the turn."""
    stt_s: float | None = None
    """A final's STT delay: seconds from the VAD stop to this transcript, on this client."""
    audio_s: float | None = None
    """``speech_started``/``speech_stopped``: where in the audio fed so far the speech
    started or stopped (seconds; the VAD's confirmation wait taken off)."""

    @property
    def after_speech_s(self) -> float | None:
        """A final's delay from the end of the speech (VAD wait + STT), if it was timed."""
        if self.vad_wait_s is None or self.stt_s is None:
            return None
        return self.vad_wait_s + self.stt_s

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, "text": self.text, **({"fatal": True} if self.fatal else {})}


@dataclass
class _FlushMarker(SystemFrame):
    """Queued behind the audio (system frames too); when it comes out, the service has seen
    all of it."""

    reached: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class _EventsMarker(DataFrame):
    """A data frame: it reaches the end of the pipeline behind every transcript the service
    pushed before it (system frames may overtake data frames; data frames keep their order)."""

    reached: asyncio.Event = field(default_factory=asyncio.Event)


class _EventTap(FrameProcessor):
    """Copies transcription and error frames into the transcriber's event queue.

    The sink tap also times each final from the VAD stop that ended its turn: the latest stop
    not yet used. (A turn with no words gives no final, so matching stops to finals first in,
    first out would drift for good after one cough; the latest stop is wrong only while a
    turn's final is still due when the next turn ends, and the next final puts it right.)
    """

    def __init__(self, events: asyncio.Queue[TranscriptEvent], *, sink: bool) -> None:
        # Direct mode: a tap only copies, so frames cross it in the pusher's task, not
        # through a queue and two tasks of its own (the per-frame cost of a pipeline stage).
        super().__init__(enable_direct_mode=True)
        self._events = events
        self._sink = sink
        self._in_turn = False
        self._vad_stop: tuple[float, float] | None = None  # (monotonic time, stop_secs)

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, _FlushMarker | _EventsMarker):
            if self._sink:
                frame.reached.set()
        elif isinstance(frame, VADUserStartedSpeakingFrame):
            if direction is FrameDirection.DOWNSTREAM:
                self._in_turn = True
        elif isinstance(frame, VADUserStoppedSpeakingFrame):
            # A stop that ends no turn (finish() after the VAD's own stop) times nothing.
            if self._sink and self._in_turn and direction is FrameDirection.DOWNSTREAM:
                self._vad_stop = (time.monotonic(), frame.stop_secs)
            self._in_turn = False
        elif isinstance(frame, TranscriptionFrame):
            wait = stt = None
            if self._vad_stop is not None:
                stopped_at, wait = self._vad_stop
                stt = time.monotonic() - stopped_at
                self._vad_stop = None
            self._events.put_nowait(
                TranscriptEvent("final", frame.text, vad_wait_s=wait, stt_s=stt)
            )
        elif isinstance(frame, InterimTranscriptionFrame):
            self._events.put_nowait(TranscriptEvent("interim", frame.text))
        elif isinstance(frame, ErrorFrame):
            permanent = bool(frame.fatal or (frame.processor and not frame.processor.is_usable))
            self._events.put_nowait(TranscriptEvent("error", frame.error, fatal=permanent))
        await self.push_frame(frame, direction)


class _SpeechClock(FrameProcessor):
    """Right behind the VAD: counts the audio that passed and reports where each stretch of
    speech started and stopped in it (the VAD pushes its frames in line with the audio)."""

    def __init__(self, events: asyncio.Queue[TranscriptEvent]) -> None:
        super().__init__(enable_direct_mode=True)  # a counter: no queue of its own (as the taps)
        self._events = events
        self._samples = 0
        self._rate = 16000

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, InputAudioRawFrame):
            self._samples += len(frame.audio) // (2 * frame.num_channels)
            self._rate = frame.sample_rate
        elif direction is FrameDirection.DOWNSTREAM and self._samples:
            now = self._samples / self._rate
            if isinstance(frame, VADUserStartedSpeakingFrame):
                at = max(0.0, now - frame.start_secs)
                self._events.put_nowait(TranscriptEvent("speech_started", "", audio_s=at))
            elif isinstance(frame, VADUserStoppedSpeakingFrame):
                at = max(0.0, now - frame.stop_secs)
                self._events.put_nowait(TranscriptEvent("speech_stopped", "", audio_s=at))
        await self.push_frame(frame, direction)


class RealtimeTranscriber:
    """Feed audio in, read :class:`TranscriptEvent`s out.

    Example::

        async with RealtimeTranscriber(service, sample_rate=16000) as transcriber:
            await transcriber.start_turn()
            await transcriber.feed(pcm)
            await transcriber.end_turn()
            async for event in transcriber.events_until_final():
                print(event)
    """

    def __init__(
        self,
        service: VoxtralRealtimeSTTService,
        *,
        sample_rate: int,
        channels: int = 1,
        vad_analyzer: VADAnalyzer | None = None,
        report_speech: bool = False,
    ) -> None:
        """``vad_analyzer`` cuts the audio into turns by itself (live captions); without it
        the caller marks turns with :meth:`start_turn` / :meth:`end_turn` (files).
        ``report_speech`` (with a VAD): also report where speech starts and stops in the
        audio (``speech_started``/``speech_stopped`` events: call analytics' timeline)."""
        self.service = service
        self.sample_rate = sample_rate
        self.channels = channels
        self.events: asyncio.Queue[TranscriptEvent] = asyncio.Queue()
        vad: list[FrameProcessor] = (
            [VADProcessor(vad_analyzer=vad_analyzer)] if vad_analyzer else []
        )
        if vad and report_speech:
            vad.append(_SpeechClock(self.events))
        self._worker = PipelineWorker(
            Pipeline(
                [
                    _EventTap(self.events, sink=False),
                    *vad,
                    service,
                    _EventTap(self.events, sink=True),
                ]
            ),
            params=PipelineParams(audio_in_sample_rate=sample_rate, enable_metrics=True),
            idle_timeout_secs=None,
            enable_rtvi=False,
            enable_turn_tracking=False,
        )
        self._run: asyncio.Task[None] | None = None

    async def __aenter__(self) -> RealtimeTranscriber:
        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(self._worker)
        self._run = asyncio.create_task(runner.run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._worker.cancel()
        if self._run is not None:
            await asyncio.wait_for(self._run, 10)

    async def wait_connected(self, timeout: float) -> bool:
        """Wait until the service has a configured session (False if it never came)."""
        async with asyncio.timeout(timeout):
            while not self.service.connected:
                if not self.service.is_usable:
                    return False
                await asyncio.sleep(0.02)
        return True

    async def start_turn(self, *, start_secs: float = 0.0) -> None:
        """A turn starts here (``start_secs``: the VAD's confirmation wait, if one decided)."""
        await self._worker.queue_frame(VADUserStartedSpeakingFrame(start_secs=start_secs))

    async def end_turn(self, *, stop_secs: float = 0.0) -> None:
        """The turn ends here (``stop_secs``: the silence a VAD waited for, if one decided;
        the final's ``vad_wait_s``)."""
        await self._worker.queue_frame(VADUserStoppedSpeakingFrame(stop_secs=stop_secs))

    async def feed(self, pcm: bytes, *, realtime: bool = False) -> None:
        """Send PCM16 at the transcriber's rate as 20 ms frames, optionally at real speed."""
        step = int(self.sample_rate * FRAME_S) * 2 * self.channels
        loop = asyncio.get_running_loop()
        started = loop.time()
        for index, offset in enumerate(range(0, len(pcm), step)):
            frame = InputAudioRawFrame(pcm[offset : offset + step], self.sample_rate, self.channels)
            await self._worker.queue_frame(frame)
            if realtime:
                await asyncio.sleep(max(0.0, started + (index + 1) * FRAME_S - loop.time()))
            elif index % 50 == 49:
                await asyncio.sleep(0)  # let the service send while we queue

    async def feed_frame(self, pcm: bytes) -> None:
        """Send one frame of PCM16 at the transcriber's rate as it is (a media stream's own
        pacing: a frame per message or per few messages)."""
        await self._worker.queue_frame(InputAudioRawFrame(pcm, self.sample_rate, self.channels))

    async def finish(self, timeout: float) -> None:
        """End the turn in progress, wait until every turn has its final transcript, and
        until those transcripts are in :attr:`events`."""
        audio_seen = _FlushMarker()
        await self._worker.queue_frame(audio_seen)
        async with asyncio.timeout(timeout):
            await audio_seen.reached.wait()  # the service has seen all the audio fed so far
            await self.end_turn()
            while self.service.has_pending_turns:  # noqa: ASYNC110 - state of the service
                await asyncio.sleep(0.02)
            events_out = _EventsMarker()
            await self._worker.queue_frame(events_out)
            await events_out.reached.wait()

    async def next_event(self, timeout: float) -> TranscriptEvent:
        return await asyncio.wait_for(self.events.get(), timeout)
