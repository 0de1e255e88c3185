"""The speech gate decides what Pipecat's VAD stage decides, on the same audio, with no
pipeline: each start and stop after the same frame, where in the audio it happened, the
pre-roll the STT gets, and the forced stop of a track that goes silent while speaking."""

from __future__ import annotations

import asyncio

from pipecat.audio.vad.vad_analyzer import VADParams
from pipecat.frames.frames import (
    InputAudioRawFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.worker import PipelineParams
from pipecat.processors.audio.vad_processor import VADProcessor
from pipecat.tests.utils import run_test

from agent.fastpath.shared_silero import SharedSileroVADAnalyzer
from agent.fastpath.speech_gate import SpeechEdge, SpeechGate
from tests.conftest import requires_espeak
from tests.fakes.speech import conversation, frames_of

RATE = 8000
FRAME_BYTES = 960  # 60 ms at 8 kHz, as the analytics tracks feed it
PARAMS = VADParams(stop_secs=0.5)


async def stage_decisions(frames: list[bytes]) -> list[tuple[str, int]]:
    """Pipecat's ``VADProcessor``: each start/stop and how many audio frames went before it."""
    down, _ = await run_test(
        VADProcessor(vad_analyzer=SharedSileroVADAnalyzer(params=PARAMS)),
        frames_to_send=[
            InputAudioRawFrame(audio=f, sample_rate=RATE, num_channels=1) for f in frames
        ],
        pipeline_params=PipelineParams(audio_in_sample_rate=RATE),
    )
    seen: list[tuple[str, int]] = []
    audio = 0
    for frame in down:
        if isinstance(frame, InputAudioRawFrame):
            audio += 1
        elif isinstance(frame, VADUserStartedSpeakingFrame):
            seen.append(("started", audio))
        elif isinstance(frame, VADUserStoppedSpeakingFrame):
            seen.append(("stopped", audio))
    return seen


async def gate_edges(frames: list[bytes]) -> list[tuple[SpeechEdge, int, bytes]]:
    """The gate on the same frames: each edge, the frames heard by then, and at a start the
    pre-roll it hands over."""
    gate = SpeechGate(SharedSileroVADAnalyzer(params=PARAMS), sample_rate=RATE, preroll_s=0.8)
    edges = []
    for index, frame in enumerate(frames, 1):
        edge = await gate.hear(frame)
        if edge is not None:
            preroll = gate.take_preroll() if edge.kind == "started" else b""
            edges.append((edge, index, preroll))
    return edges


@requires_espeak
async def test_the_gate_starts_and_stops_after_the_same_frames_as_the_vad_stage() -> None:
    frames = frames_of(conversation(RATE, gaps=(0.5, 1.5, 0.9)), FRAME_BYTES)
    stage = await asyncio.wait_for(stage_decisions(frames), 60)
    edges = await gate_edges(frames)
    assert [(edge.kind, index) for edge, index, _ in edges] == stage
    assert [kind for kind, _ in stage] == ["started", "stopped"] * 3


@requires_espeak
async def test_each_edge_says_where_in_the_track_the_speech_started_or_stopped() -> None:
    frames = frames_of(conversation(RATE, gaps=(0.5, 1.5)), FRAME_BYTES)
    counted = counted_params()
    for edge, index, _ in await gate_edges(frames):
        heard_s = index * FRAME_BYTES / 2 / RATE
        wait = counted.start_secs if edge.kind == "started" else counted.stop_secs
        assert abs(edge.audio_s - (heard_s - wait)) < 1e-9  # the confirmation wait taken off


def counted_params() -> VADParams:
    """The waits as the VAD counts them: whole 32 ms windows (0.2 s is 0.192 s)."""
    analyzer = SharedSileroVADAnalyzer(params=PARAMS)
    analyzer.set_sample_rate(RATE)
    return analyzer.params


@requires_espeak
async def test_a_start_hands_over_the_last_preroll_of_audio_up_to_the_deciding_frame() -> None:
    pcm = conversation(RATE, gaps=(1.5,))
    frames = frames_of(pcm, FRAME_BYTES)
    (edge, index, preroll), *_ = await gate_edges(frames)
    assert edge.kind == "started"
    heard = b"".join(frames[:index])
    assert preroll == heard[-int(0.8 * RATE) * 2 :]


async def speaking_gate(audio_idle_timeout: float = 1.0) -> SpeechGate:
    """A gate fed a sentence up to the frame that started it."""
    gate = SpeechGate(
        SharedSileroVADAnalyzer(params=PARAMS),
        sample_rate=RATE,
        preroll_s=0.8,
        audio_idle_timeout=audio_idle_timeout,
    )
    for frame in frames_of(conversation(RATE, gaps=(0.5,)), FRAME_BYTES):
        if await gate.hear(frame) is not None:
            return gate
    raise AssertionError("the sentence never started the gate")


@requires_espeak
async def test_a_track_whose_audio_stops_while_speaking_is_stopped_after_the_idle_timeout() -> None:
    gate = await speaking_gate()
    assert gate.speaking
    assert gate.idle_stop(gate.last_audio_at + 0.9) is None  # audio came recently enough
    edge = gate.idle_stop(gate.last_audio_at + 1.0)
    assert edge == SpeechEdge("stopped", gate.audio_s - counted_params().stop_secs)
    assert not gate.speaking
    assert gate.idle_stop(gate.last_audio_at + 5.0) is None  # stopped once


@requires_espeak
async def test_the_end_of_the_stream_stops_an_open_stretch_at_the_end_of_the_audio() -> None:
    gate = await speaking_gate()
    assert gate.end() == SpeechEdge("stopped", gate.audio_s)
    assert not gate.speaking
    assert gate.end() is None
