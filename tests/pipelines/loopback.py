"""An in-process transport for driving a whole pipeline: speech in, paced audio out.

Input audio is pushed as 20 ms ``InputAudioRawFrame`` s at real-time pace (the VAD and the
realtime STT are built for a live stream); output audio is "played" in real time too, like a
sound card, so interruptions cut the bot off exactly as on a call.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pipecat.frames.frames import InputAudioRawFrame, OutputAudioRawFrame, StartFrame
from pipecat.transports.base_input import BaseInputTransport
from pipecat.transports.base_output import BaseOutputTransport
from pipecat.transports.base_transport import BaseTransport, TransportParams

from tests.fakes.paused_speech import TRIM_PEAK

RATE = 16_000
CHUNK_BYTES = RATE * 2 * 20 // 1000  # 20 ms


class LoopbackInput(BaseInputTransport):
    """A microphone: silence (room tone) all the time, speech when :meth:`say` is called."""

    def __init__(self, params: TransportParams, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self._pending: deque[tuple[bytes, asyncio.Future[float]]] = deque()
        self._feeder: asyncio.Task[None] | None = None

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        await self.set_transport_ready(frame)
        if self._feeder is None:
            self._feeder = self.create_task(self._feed(), "loopback-mic")

    async def cleanup(self) -> None:
        if self._feeder is not None:
            await self.cancel_task(self._feeder)
            self._feeder = None
        await super().cleanup()

    async def say(self, pcm: bytes) -> float:
        """Queue 16 kHz PCM16 speech; returns the moment its last voiced 20 ms frame went in:
        the end of the speech. A clip's own quiet after it (0.43 s in espeak-ng's "what time
        is it in paris") is the line after the speech, and a fast answer starts inside it: on
        a loaded CI machine most of a 0.5 s answer once played before the clip's last frame
        went in, and a test that listened from there heard too little of it."""
        done: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._pending.append((pcm, done))
        return await done

    async def _feed(self) -> None:
        started = time.monotonic()
        sent = 0
        silence = bytes(CHUNK_BYTES)
        while True:
            if self._pending:
                pcm, done = self._pending.popleft()
                chunks = [pcm[i : i + CHUNK_BYTES] for i in range(0, len(pcm), CHUNK_BYTES)]
            else:
                chunks, done = [silence], None
            voiced_at = None
            for chunk in chunks:
                await self.push_audio_frame(
                    InputAudioRawFrame(chunk.ljust(CHUNK_BYTES, b"\0"), RATE, 1)
                )
                if done is not None and _peak(chunk) > TRIM_PEAK:  # speech, not its quiet
                    voiced_at = time.monotonic()
                sent += 1
                await asyncio.sleep(max(0.0, started + sent * 0.02 - time.monotonic()))
            if done is not None and not done.done():
                done.set_result(voiced_at or time.monotonic())


def _peak(chunk: bytes) -> int:
    return int(np.abs(np.frombuffer(chunk, "<i2").astype(np.int32)).max(initial=0))


@dataclass
class Played:
    at: float
    audio: bytes


class LoopbackOutput(BaseOutputTransport):
    def __init__(self, params: TransportParams) -> None:
        super().__init__(params)
        self.played: list[Played] = []
        self._next_at = 0.0

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        await self.set_transport_ready(frame)

    async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
        now = time.monotonic()
        self.played.append(Played(now, frame.audio))
        duration = len(frame.audio) / 2 / frame.sample_rate
        self._next_at = max(self._next_at, now) + duration
        await asyncio.sleep(max(0.0, self._next_at - time.monotonic()))
        return True

    def voiced_since(self, moment: float) -> list[Played]:
        """Played chunks after ``moment`` that are not silence."""
        return [p for p in self.played if p.at >= moment and any(p.audio)]


@dataclass
class LoopbackTransport(BaseTransport):
    params: TransportParams = field(
        default_factory=lambda: TransportParams(
            audio_in_enabled=True,
            audio_in_sample_rate=RATE,
            audio_out_enabled=True,
            audio_out_sample_rate=RATE,
        )
    )

    def __post_init__(self) -> None:
        super().__init__()
        self._input = LoopbackInput(self.params, name="loopback-in")
        self._output = LoopbackOutput(self.params)

    def input(self) -> LoopbackInput:
        return self._input

    def output(self) -> LoopbackOutput:
        return self._output
