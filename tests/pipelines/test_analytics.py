"""One analytics track: the VAD decides inline and only speech (with its pre-roll) goes to
the STT, yet the STT endpoint receives exactly what the VAD-stage pipeline sent it, and the
track reports the same stretches of speech and one final per stretch. Against the strict
realtime peer, whose transcript is the number of samples each generation received."""

from __future__ import annotations

import asyncio

from pipecat.audio.vad.vad_analyzer import VADParams

from agent.config import STTSettings
from agent.fastpath.shared_silero import SharedSileroVADAnalyzer
from agent.stt.client import RealtimeTranscriber, TranscriptEvent
from agent.stt.params import RealtimeSTTParams
from pipelines.analytics import VAD_STOP_SECS, TrackTranscription
from pipelines.services import stt_service
from tests.conftest import requires_espeak
from tests.fakes.realtime_peer import RealtimePeer
from tests.fakes.speech import conversation, frames_of

RATE = 8000
FRAME_BYTES = 960  # 60 ms, as the listen-only stream feeds a track


def settings(url: str) -> STTSettings:
    return STTSettings(url=url, model="voxtral-test")


async def gated(pcm: bytes, url: str) -> list[TranscriptEvent]:
    events: list[TranscriptEvent] = []
    track = TrackTranscription(settings(url), sample_rate=RATE, on_event=events.append)
    await track.start()
    for frame in frames_of(pcm, FRAME_BYTES):
        await track.feed(frame)
    await track.close(finish=True)
    return events


async def vad_stage(pcm: bytes, url: str) -> list[TranscriptEvent]:
    """The same track through a pipeline with the VAD as a stage (every frame through it)."""
    transcriber = RealtimeTranscriber(
        stt_service(settings(url)),
        sample_rate=RATE,
        vad_analyzer=SharedSileroVADAnalyzer(params=VADParams(stop_secs=VAD_STOP_SECS)),
        report_speech=True,
    )
    async with transcriber:
        for frame in frames_of(pcm, FRAME_BYTES):
            await transcriber.feed_frame(frame)
        await transcriber.finish(timeout=10)
    events = []
    while not transcriber.events.empty():
        events.append(transcriber.events.get_nowait())
    return events


def speech(events: list[TranscriptEvent]) -> list[tuple[str, float | None]]:
    """The stretches of speech reported. (The VAD-stage pipeline also reports a stop at the
    end of the stream when nothing was open; the conversation ignores such a stop.)"""
    edges: list[tuple[str, float | None]] = []
    for event in events:
        if event.kind == "speech_started" or (
            event.kind == "speech_stopped" and edges and edges[-1][0] == "speech_started"
        ):
            edges.append((event.kind, event.audio_s))
    return edges


@requires_espeak
async def test_the_stt_gets_the_same_audio_per_utterance_as_through_a_vad_stage() -> None:
    pcm = conversation(RATE, gaps=(0.5, 1.5, 0.9))
    async with RealtimePeer(keep_audio=False) as peer:
        ours = await asyncio.wait_for(gated(pcm, peer.url), 60)
        ours_sent = peer.transcripts()
        peer.generations.clear()
        theirs = await asyncio.wait_for(vad_stage(pcm, peer.url), 60)
        theirs_sent = peer.transcripts()
    assert peer.violations == []
    assert speech(ours) == speech(theirs)
    assert [kind for kind, _ in speech(ours)] == ["speech_started", "speech_stopped"] * 3
    assert ours_sent == theirs_sent and len(ours_sent) == 3
    finals = [e.text for e in ours if e.kind == "final"]
    assert finals == [str(samples) for samples in ours_sent]  # one final per stretch, in order
    # Silence stayed out: the STT got the speech and its pre-roll, far from the whole track.
    assert sum(ours_sent) < 0.8 * (len(pcm) // 2) * 2


@requires_espeak
async def test_a_track_ending_mid_speech_stops_its_stretch_and_waits_for_its_final() -> None:
    pcm = conversation(RATE, gaps=(0.5,))
    cut = pcm[: 25 * FRAME_BYTES]  # 1.5 s: the stream stops a second into the sentence
    async with RealtimePeer(keep_audio=False) as peer:
        events = await asyncio.wait_for(gated(cut, peer.url), 60)
    assert [kind for kind, _ in speech(events)] == ["speech_started", "speech_stopped"]
    assert speech(events)[-1][1] == len(cut) / 2 / RATE  # at the end of the audio
    assert [e.kind for e in events][-1] == "final"


@requires_espeak
async def test_a_final_later_than_the_stt_timeout_at_the_end_of_the_stream_is_still_kept() -> None:
    """A busy recognizer: the last utterance's final is overdue by the STT's own measure, the
    STT restarts the generation and replays it, and the stream's end waits for that replay."""
    pcm = conversation(RATE, gaps=(0.5,))
    cut = pcm[: 25 * FRAME_BYTES]
    events: list[TranscriptEvent] = []
    release = asyncio.Event()
    async with RealtimePeer(keep_audio=False, hold_finals=release) as peer:
        slow = settings(peer.url).model_copy(
            update={"params": RealtimeSTTParams(final_timeout_s=1.0)}
        )
        track = TrackTranscription(slow, sample_rate=RATE, on_event=events.append)
        await track.start()
        for frame in frames_of(cut, FRAME_BYTES):
            await track.feed(frame)
        asyncio.get_running_loop().call_later(1.6, release.set)  # past the 1 s final timeout
        await asyncio.wait_for(track.close(finish=True), 10)
    assert [e.kind for e in events if e.kind == "final"] == ["final"]


@requires_espeak
async def test_a_track_whose_audio_stops_mid_speech_is_stopped_a_second_later() -> None:
    pcm = conversation(RATE, gaps=(0.5,))
    events: list[TranscriptEvent] = []
    async with RealtimePeer(keep_audio=False) as peer:
        track = TrackTranscription(settings(peer.url), sample_rate=RATE, on_event=events.append)
        await track.start()
        try:
            for frame in frames_of(pcm[: 25 * FRAME_BYTES], FRAME_BYTES):
                await track.feed(frame)
            assert [kind for kind, _ in speech(events)] == ["speech_started"]
            for _ in range(100):  # the carrier sends nothing more on this track
                if any(e.kind == "final" for e in events):
                    break
                await asyncio.sleep(0.05)
        finally:
            await track.close(finish=False)
    assert [kind for kind, _ in speech(events)] == ["speech_started", "speech_stopped"]
    assert [e.kind for e in events if e.kind == "final"] == ["final"]
