"""Drive one STT service in a real Pipecat pipeline, the way a transport and a VAD would.

``async with SttHarness(service) as h`` starts a ``PipelineWorker`` around the service and
records everything it emits; :meth:`SttHarness.say` plays audio as 20 ms input frames framed
by VAD start/stop, and :meth:`SttHarness.final` waits for the next final transcript.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pipecat.frames.frames import (
    EagerEndOfTurnCancelFrame,
    EagerTranscriptionFrame,
    ErrorFrame,
    Frame,
    InputAudioRawFrame,
    InterimTranscriptionFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner

from agent.stt.frames import SpeechSegmentTranscribedFrame
from agent.stt.service import VoxtralRealtimeSTTService


class Recorder(FrameProcessor):
    """Passes frames on and remembers the ones a test asks about."""

    def __init__(self) -> None:
        super().__init__()
        self.finals: asyncio.Queue[TranscriptionFrame] = asyncio.Queue()
        self.interims: list[InterimTranscriptionFrame] = []
        self.errors: list[ErrorFrame] = []
        self.eager: list[EagerTranscriptionFrame | EagerEndOfTurnCancelFrame] = []
        self.segments: list[SpeechSegmentTranscribedFrame] = []
        self.order: list[Frame] = []  # finals and segment frames, as they came

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, (EagerTranscriptionFrame, EagerEndOfTurnCancelFrame)):
            self.eager.append(frame)
        elif isinstance(frame, TranscriptionFrame):
            self.finals.put_nowait(frame)
            self.order.append(frame)
        elif isinstance(frame, SpeechSegmentTranscribedFrame):
            self.segments.append(frame)
            self.order.append(frame)
        elif isinstance(frame, InterimTranscriptionFrame):
            self.interims.append(frame)
        elif isinstance(frame, ErrorFrame):
            self.errors.append(frame)
        await self.push_frame(frame, direction)


class SttHarness:
    def __init__(self, service: VoxtralRealtimeSTTService, *, sample_rate: int = 16_000) -> None:
        self.service = service
        self.sample_rate = sample_rate
        self.upstream = Recorder()  # sees ErrorFrames pushed upstream
        self.downstream = Recorder()
        self.worker = PipelineWorker(
            Pipeline([self.upstream, service, self.downstream]),
            params=PipelineParams(audio_in_sample_rate=sample_rate, enable_metrics=True),
            idle_timeout_secs=None,
            enable_rtvi=False,
        )
        self._run: asyncio.Task[Any] | None = None

    async def __aenter__(self) -> SttHarness:
        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(self.worker)
        self._run = asyncio.create_task(runner.run())
        for _ in range(200):
            if self.service.connected:
                break
            await asyncio.sleep(0.025)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.worker.cancel()
        if self._run is not None:
            await asyncio.wait_for(self._run, 10)

    @property
    def errors(self) -> list[ErrorFrame]:
        return self.upstream.errors

    async def frames(self, pcm: bytes, *, channels: int = 1, pace: float = 0.0) -> None:
        """Send PCM as 20 ms input frames, ``pace`` times real time (0 = as fast as possible)."""
        step = int(self.sample_rate * 0.02) * 2 * channels
        for offset in range(0, len(pcm), step):
            await self.worker.queue_frame(
                InputAudioRawFrame(pcm[offset : offset + step], self.sample_rate, channels)
            )
            await asyncio.sleep(0.02 / pace if pace else 0)

    async def say(self, pcm: bytes, *, channels: int = 1, pace: float = 0.0) -> None:
        """VAD start, the audio, VAD stop: one user turn."""
        await self.worker.queue_frame(VADUserStartedSpeakingFrame(start_secs=0.2))
        await self.frames(pcm, channels=channels, pace=pace)
        await self.worker.queue_frame(VADUserStoppedSpeakingFrame(stop_secs=0.2))

    async def final(self, timeout: float = 20.0) -> TranscriptionFrame:
        return await asyncio.wait_for(self.downstream.finals.get(), timeout)
