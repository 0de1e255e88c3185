"""A VAD hosted by the input transport emits what Pipecat's ``VADProcessor`` stage would."""

from __future__ import annotations

import asyncio

from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    Frame,
    InputAudioRawFrame,
    SpeechControlParamsFrame,
    StartFrame,
    UserSpeakingFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.worker import PipelineParams
from pipecat.processors.audio.vad_processor import VADProcessor
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor, FrameProcessorSetup
from pipecat.tests.utils import run_test

from agent.fastpath.inline_vad import InlineVAD
from agent.fastpath.shared_silero import SharedSileroVADAnalyzer
from agent.fastpath.vad_hosting_transport import VADHostingInputTransport
from agent.transports.traits import HostsVAD
from tests.conftest import requires_espeak
from tests.fakes.speech import conversation, frames_of

EVENTS = (
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
    UserSpeakingFrame,
    SpeechControlParamsFrame,
)


class AudioSource(FrameProcessor):
    """Hosts an :class:`InlineVAD` the way ``VADHostingInputTransport`` does: each audio frame
    is pushed on first, then analysed."""

    def __init__(self) -> None:
        super().__init__()
        self.vad = InlineVAD(self, SharedSileroVADAnalyzer())

    async def setup(self, setup: FrameProcessorSetup) -> None:  # type: ignore[override]
        await super().setup(setup)
        await self.vad.setup(setup)

    async def cleanup(self) -> None:
        await super().cleanup()
        await self.vad.cleanup()

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)
        if isinstance(frame, StartFrame):
            await self.vad.start()
        elif isinstance(frame, EndFrame | CancelFrame):
            await self.vad.stop()
        elif isinstance(frame, InputAudioRawFrame):
            await self.vad.process_frame(frame)


async def downstream(processor: FrameProcessor, frames: list[Frame]) -> list[tuple[str, int]]:
    """Each VAD frame, and how many audio frames had gone by when it came."""
    down, _ = await run_test(
        processor,
        frames_to_send=frames,
        pipeline_params=PipelineParams(audio_in_sample_rate=8000),
        ignore_start=False,
    )
    seen, audio = [], 0
    for frame in down:
        if isinstance(frame, InputAudioRawFrame):
            audio += 1
        elif isinstance(frame, EVENTS):
            seen.append((type(frame).__name__, audio))
    return seen


@requires_espeak
async def test_the_transport_hosted_vad_emits_the_vad_processors_frames_at_the_same_audio() -> None:
    pcm = conversation(8000, gaps=(0.5, 1.5))
    frames: list[Frame] = [
        InputAudioRawFrame(audio=f, sample_rate=8000, num_channels=1) for f in frames_of(pcm, 960)
    ]
    inline = await asyncio.wait_for(downstream(AudioSource(), frames), 60)
    stage = await asyncio.wait_for(
        downstream(VADProcessor(vad_analyzer=SharedSileroVADAnalyzer()), frames), 60
    )
    names = [name for name, _ in inline]
    assert names.count("VADUserStartedSpeakingFrame") == 2
    assert names.count("VADUserStoppedSpeakingFrame") == 2
    assert names[0] == "SpeechControlParamsFrame"
    assert "UserSpeakingFrame" in names  # paced by the wall clock, so counted only as present

    def decisions(seen: list[tuple[str, int]]) -> list[tuple[str, int]]:
        return [event for event in seen if event[0] != "UserSpeakingFrame"]

    assert decisions(inline) == decisions(stage)


def test_the_phone_transports_input_hosts_the_vad() -> None:
    assert issubclass(VADHostingInputTransport, HostsVAD)
