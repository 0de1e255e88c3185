"""The shared, batched Silero VAD decides exactly as Pipecat's per-call Silero does.

Every comparison feeds the same audio (espeak sentences with quiet, slightly noisy gaps long
enough for Silero's periodic model resets) to a stock ``SileroVADAnalyzer`` and to
``SharedSileroVADAnalyzer``, and compares the state after every frame and the confidence of
every 32 ms window.
"""

from __future__ import annotations

import asyncio
import tracemalloc
from typing import Any

import numpy as np
import pytest
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADAnalyzer, VADParams, VADState
from pipecat.frames.frames import (
    InputAudioRawFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.worker import PipelineParams
from pipecat.processors.audio.vad_processor import VADProcessor
from pipecat.tests.utils import run_test

from agent.fastpath.shared_silero import SharedSileroVADAnalyzer
from agent.vad import SileroBatcher, SileroStream
from tests.conftest import requires_espeak
from tests.fakes.line_noise import line
from tests.fakes.paused_speech import phrase_audio
from tests.fakes.speech import conversation, frames_of, heard_changes

pytestmark = requires_espeak

QUESTION = "can you call me back tomorrow"
HISSY = "i would like to book a table for two people"
HANG_GUARD_S = 60.0  # only stops a hung test; nothing here asserts speed


class StockRecorder(SileroVADAnalyzer):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.confidences: list[float] = []
        self.resets = 0

    def voice_confidence(self, buffer: bytes) -> float:
        confidence = super().voice_confidence(buffer)
        self.confidences.append(float(np.asarray(confidence).reshape(-1)[0]))
        return confidence

    def _maybe_reset_model(self, confidence: float) -> None:
        super()._maybe_reset_model(confidence)
        self.resets += self._windows_since_reset == 0


class SharedRecorder(SharedSileroVADAnalyzer):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.confidences: list[float] = []
        self.resets = 0

    def _advance(self, window: bytes, confidence: np.float32, *, reset_check: bool = True) -> None:
        self.confidences.append(float(confidence))
        super()._advance(window, confidence, reset_check=reset_check)

    def _maybe_reset_model(self, confidence: float) -> None:
        super()._maybe_reset_model(confidence)
        self.resets += self._windows_since_reset == 0


async def feed(analyzer: VADAnalyzer, frames: list[bytes]) -> list[VADState]:
    return [await analyzer.analyze_audio(frame) for frame in frames]


def assert_same_run(
    stock: StockRecorder, stock_states: list[VADState], shared: SharedRecorder, states: list
) -> None:
    assert states == stock_states
    assert len(shared.confidences) == len(stock.confidences) > 0
    assert np.max(np.abs(np.subtract(shared.confidences, stock.confidences))) <= 1e-4
    assert shared.resets == stock.resets


@pytest.mark.parametrize("sample_rate", [16000, 8000])
async def test_same_decisions_as_stock_silero_frame_by_frame(sample_rate: int) -> None:
    """Pipecat's 20 ms frames: never two windows in one frame."""
    frames = frames_of(conversation(sample_rate), sample_rate // 25)
    stock = StockRecorder(sample_rate=sample_rate)
    stock.set_sample_rate(sample_rate)
    stock_states = await feed(stock, frames)
    shared = SharedRecorder(batcher=SileroBatcher(max_delay_s=0.004))
    shared.set_sample_rate(sample_rate)
    states = await feed(shared, frames)

    assert_same_run(stock, stock_states, shared, states)
    # The audio exercises what matters: speech found and ended, and the periodic model reset.
    assert VADState.SPEAKING in states and states[-1] == VADState.QUIET
    assert stock.resets >= 2


@pytest.mark.parametrize("sample_rate", [16000, 8000])
@pytest.mark.parametrize("frame_bytes", [None, 960], ids=["ragged", "60ms-at-8k"])
async def test_on_any_frames_decides_as_stock_silero_fed_window_by_window(
    sample_rate: int, frame_bytes: int | None
) -> None:
    """Frames of several windows (a phone call's 60 ms, or any size): each start and stop is
    the one stock Silero confirms fed a window at a time, reported with the frame that holds
    its window, and not only when it falls at a frame's end. Also covers the tick-level
    batcher (no delay window)."""
    pcm = conversation(sample_rate)
    window_bytes = 2 * (512 if sample_rate == 16000 else 256)
    stock = StockRecorder(sample_rate=sample_rate)
    stock.set_sample_rate(sample_rate)
    stock_changes = heard_changes(await feed(stock, frames_of(pcm, window_bytes)))
    frames = frames_of(pcm, frame_bytes)
    shared = SharedRecorder(batcher=SileroBatcher(max_delay_s=0.0))
    shared.set_sample_rate(sample_rate)
    changes = heard_changes(await feed(shared, frames))

    assert [state for _, state in changes] == [state for _, state in stock_changes]
    windows_done = np.cumsum([len(frame) for frame in frames]) // window_bytes
    for (frame, _), (window, _) in zip(changes, stock_changes, strict=True):
        assert (windows_done[frame - 1] if frame else 0) <= window < windows_done[frame]
    assert shared.confidences == pytest.approx(stock.confidences, abs=1e-4)
    assert shared.resets == stock.resets >= 2
    assert len(changes) >= 4


async def test_a_short_word_on_a_phone_line_is_heard_wherever_the_frames_cut_it() -> None:
    """French "Oui." (0.27 s from espeak-ng) at Pipecat's 0.2 s start, in a phone call's
    60 ms frames: whether it was heard used to depend on where its windows fell against the
    frames (the extended turn-taking bench's call missed it, the same word 10 ms later was
    answered)."""
    word = phrase_audio("oui", 8000, "espeak:fr")
    batcher = SileroBatcher(max_delay_s=0.0)
    missed = []
    for lead in range(0, 480, 40):  # every phase against the frames, 5 ms apart
        pcm = np.concatenate([np.zeros(4000 + lead, np.int16), word, np.zeros(4000, np.int16)])
        vad = SharedSileroVADAnalyzer(
            sample_rate=8000,
            params=VADParams(start_secs=0.2, stop_secs=0.2, confidence=0.5, min_volume=0.4),
            batcher=batcher,
        )
        vad.set_sample_rate(8000)
        states = await feed(vad, frames_of(pcm.tobytes(), 960))
        if [state for _, state in heard_changes(states)] != [VADState.SPEAKING, VADState.QUIET]:
            missed.append(lead)
    assert missed == []


async def test_ten_concurrent_calls_each_decide_as_their_own_stock_run() -> None:
    calls = []
    for call in range(10):
        rate = 16000 if call % 2 == 0 else 8000
        gaps = (0.3 + 0.1 * call, 2.2 + 0.05 * call)
        frames = frames_of(conversation(rate, first=call, gaps=gaps), rate // 25, seed=call)
        stock = StockRecorder()
        stock.set_sample_rate(rate)
        calls.append((rate, frames, stock, await feed(stock, frames)))

    batcher = SileroBatcher()
    shared = [SharedRecorder(batcher=batcher) for _ in calls]
    for analyzer, (rate, *_) in zip(shared, calls, strict=True):
        analyzer.set_sample_rate(rate)
    runs = [feed(analyzer, frames) for analyzer, (_, frames, *_) in zip(shared, calls, strict=True)]
    results = await asyncio.wait_for(asyncio.gather(*runs), HANG_GUARD_S)

    for analyzer, states, (_, _, stock, stock_states) in zip(shared, results, calls, strict=True):
        assert_same_run(stock, stock_states, analyzer, states)
    assert batcher.stats.windows == sum(len(a.confidences) for a in shared)
    assert batcher.stats.largest_batch >= 5  # windows of different calls really shared runs
    assert batcher.stats.batches < batcher.stats.windows / 3


async def test_a_call_that_stops_sending_or_is_cancelled_delays_no_one() -> None:
    batcher = SileroBatcher(max_delay_s=0.002)
    pcm = conversation(16000, gaps=(0.5,))
    silent, cancelled, active = (SharedRecorder(batcher=batcher) for _ in range(3))
    for analyzer in (silent, cancelled, active):
        analyzer.set_sample_rate(16000)

    await silent.analyze_audio(pcm[:1500])  # one window and a half, then nothing ever again
    stuck = asyncio.create_task(cancelled.analyze_audio(pcm[:1024]))
    await asyncio.sleep(0)  # its window is queued...
    stuck.cancel()  # ...and its caller goes away before the batch runs

    reference = StockRecorder(sample_rate=16000)
    reference.set_sample_rate(16000)
    frames = frames_of(pcm, 640)
    states = await asyncio.wait_for(feed(active, frames), HANG_GUARD_S)
    assert_same_run(reference, await feed(reference, frames), active, states)
    with pytest.raises(asyncio.CancelledError):
        await stuck
    # The cancelled call can carry on; its later windows are scored in order.
    assert await asyncio.wait_for(cancelled.analyze_audio(pcm[1024:4096]), HANG_GUARD_S)


async def test_bad_input_fails_only_its_own_call() -> None:
    batcher = SileroBatcher()
    good, bad = SileroStream(), SileroStream()
    window = conversation(16000)[:1024]
    results = await asyncio.gather(
        batcher.score(good, window, 16000),
        batcher.score(bad, window[:1000], 16000),
        batcher.score(bad, window, 44100),
        return_exceptions=True,
    )
    assert isinstance(results[0], np.float32)
    assert isinstance(results[1], ValueError) and "1024 bytes" in str(results[1])
    assert isinstance(results[2], ValueError) and "8000 or 16000" in str(results[2])
    with pytest.raises(ValueError, match="8000 or 16000"):
        SharedSileroVADAnalyzer().set_sample_rate(24000)


def test_synchronous_voice_confidence_matches_stock() -> None:
    """For code that calls ``voice_confidence`` directly (outside ``analyze_audio``)."""
    pcm = conversation(8000, gaps=(0.4,))
    windows = [pcm[i : i + 512] for i in range(0, len(pcm) - 511, 512)]
    stock, shared = SileroVADAnalyzer(), SharedSileroVADAnalyzer()
    stock.set_sample_rate(8000)
    shared.set_sample_rate(8000)
    expected = [float(np.asarray(stock.voice_confidence(w)).reshape(-1)[0]) for w in windows]
    assert np.allclose([shared.voice_confidence(w) for w in windows], expected, atol=1e-4)
    assert max(expected) > 0.7  # the speech was seen
    assert shared.voice_confidence(b"\0" * 10) == 0.0  # a wrong-size window is an error, logged


async def test_per_call_memory_is_a_few_kilobytes() -> None:
    batcher = SileroBatcher()
    pcm = conversation(16000, gaps=(0.2,))[: 16000 * 2]  # one second of audio each
    warm = SharedSileroVADAnalyzer(batcher=batcher)
    warm.set_sample_rate(16000)
    await warm.analyze_audio(pcm)  # session, numpy and logging warmed up outside the count

    count = 100
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        analyzers = [SharedSileroVADAnalyzer(batcher=batcher) for _ in range(count)]
        for analyzer in analyzers:
            analyzer.set_sample_rate(16000)
        await asyncio.gather(*(a.analyze_audio(pcm) for a in analyzers))
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    per_call = sum(s.size_diff for s in after.compare_to(before, "filename")) / count
    assert analyzers[0].state_nbytes <= 2048  # the model memory itself
    # Everything a call holds, including Pipecat's 0.4 s volume window (12.8 kB at 16 kHz),
    # against ~10 MB for a stock analyzer's own ONNX session.
    assert per_call < 48 * 1024, f"{per_call:.0f} bytes per call"


async def vad_stage_frames(
    analyzer: VADAnalyzer,
) -> list[tuple[VADUserStartedSpeakingFrame | VADUserStoppedSpeakingFrame, int]]:
    """Pipecat's VAD stage with ``analyzer`` on a sentence with a pause (16 kHz, 20 ms
    frames): each start and stop, and how many audio frames had gone by when it came."""
    pcm = conversation(16000, gaps=(0.5,))
    frames = [
        InputAudioRawFrame(audio=f, sample_rate=16000, num_channels=1) for f in frames_of(pcm, 640)
    ]
    down, _ = await asyncio.wait_for(
        run_test(
            VADProcessor(vad_analyzer=analyzer),
            frames_to_send=frames,
            pipeline_params=PipelineParams(audio_in_sample_rate=16000),
        ),
        HANG_GUARD_S,
    )
    events, audio_frames = [], 0
    for frame in down:
        if isinstance(frame, InputAudioRawFrame):
            audio_frames += 1
        elif isinstance(frame, VADUserStartedSpeakingFrame | VADUserStoppedSpeakingFrame):
            events.append((frame, audio_frames))
    return events


async def test_vad_processor_with_shared_analyzer_emits_the_stock_start_and_stop() -> None:
    shared = [(type(f).__name__, at) for f, at in await vad_stage_frames(SharedSileroVADAnalyzer())]
    assert [name for name, _ in shared] == [
        "VADUserStartedSpeakingFrame",
        "VADUserStoppedSpeakingFrame",
    ]
    stock = [(type(f).__name__, at) for f, at in await vad_stage_frames(SileroVADAnalyzer())]
    assert shared == stock  # after the same audio frame


@pytest.mark.parametrize(("asked_s", "counted_s"), [(0.2, 0.192), (0.12, 0.128)])
async def test_the_stop_frame_says_how_much_quiet_was_counted(
    asked_s: float, counted_s: float
) -> None:
    """Silero counts whole 32 ms windows of quiet (six for 0.2 s, four for 0.12 s), and the
    end of speech is the stop's time less the frame's ``stop_secs``: so the frame carries what
    was counted, not what was asked. The stop comes after the same audio as stock Silero's."""
    params = VADParams(stop_secs=asked_s)

    async def stops(analyzer: VADAnalyzer) -> list[tuple[int, float]]:
        return [
            (at, frame.stop_secs)
            for frame, at in await vad_stage_frames(analyzer)
            if isinstance(frame, VADUserStoppedSpeakingFrame)
        ]

    ours = await stops(SharedSileroVADAnalyzer(params=params))
    stock = await stops(SileroVADAnalyzer(params=params))
    assert [at for at, _ in ours] == [at for at, _ in stock] and len(ours) == 1
    assert ours[0][1] == pytest.approx(counted_s) and stock[0][1] == asked_s


@pytest.mark.parametrize(("sample_rate", "frame_bytes"), [(8000, 320), (16000, 640)])
async def test_with_the_talker_gate_a_quiet_line_starts_and_stops_as_stock_silero(
    sample_rate: int, frame_bytes: int
) -> None:
    """The gate (``foreground_margin_db``) acts only where the line's background, heard while
    the caller is quiet, is speech. On a quiet line it never does: the soft, fading ends of
    the utterances (which Silero still calls speech) are the caller's, and every start and
    stop is stock Silero's."""
    frames = frames_of(conversation(sample_rate), frame_bytes)

    async def states(margin_db: float | None) -> list[VADState]:
        # No batching delay: frames come back to back here, not 20 ms apart as on a call.
        batcher = SileroBatcher(max_delay_s=0.0)
        vad = SharedSileroVADAnalyzer(foreground_margin_db=margin_db, batcher=batcher)
        vad.set_sample_rate(sample_rate)
        return await feed(vad, frames)

    stock = await states(None)
    assert stock.count(VADState.SPEAKING) > 0
    assert await states(6.0) == stock


async def test_with_people_talking_behind_the_caller_the_gate_hears_the_caller_stop() -> None:
    """Four talkers 10 dB under a question, from a second before it to three after: Silero
    calls them speech, so without the gate the VAD never hears the caller stop."""
    question = phrase_audio(QUESTION, 8000, voice="piper")
    before, speech, after = line(question.tobytes(), 8000, "babble", 10, before_s=1.0, after_s=3.0)
    frames = frames_of(before + speech + after, 320)
    ends_at = (len(before) + len(speech)) // 320  # the frame where the question ends

    async def quiet_after_the_question(margin_db: float | None) -> int | None:
        batcher = SileroBatcher(max_delay_s=0.0)  # frames come back to back: no batching wait
        vad = SharedSileroVADAnalyzer(foreground_margin_db=margin_db, batcher=batcher)
        vad.set_sample_rate(8000)
        states = await feed(vad, frames)
        assert VADState.SPEAKING in states[:ends_at]
        quiet = [i for i in range(ends_at, len(states)) if states[i] == VADState.QUIET]
        return quiet[0] - ends_at if quiet else None

    assert await quiet_after_the_question(None) is None
    heard_stop = await quiet_after_the_question(6.0)
    assert heard_stop is not None, "the gate did not hear the caller stop"
    # The talkers go on for 3 s: the stop must be the caller's, not the end of the recording.
    assert heard_stop * 0.02 <= 1.0, f"heard the caller stop {heard_stop * 0.02:.2f} s late"


async def test_new_timing_mid_speech_keeps_the_speech_going() -> None:
    """The bot's state sets the VAD's start time (``agent.turns.barge_in``), so new params
    arrive while the caller speaks: when a barge-in stops the bot, or the bot starts over the
    end of a turn. Pipecat's analyzer starts over from QUIET on new params, and the next quiet
    window was then reported as a stop at once, cutting the caller's sentence in two (at 6 of
    these 10 frames); here the speech goes on, and stops after ``stop_secs``, as without the
    change."""
    first = phrase_audio("i would like to book a table", 16000)
    breath = np.zeros(int(0.1 * 16000), np.int16)  # well under stop_secs
    rest = phrase_audio("for two people", 16000)
    lead = np.zeros(8000, np.int16)
    frames = frames_of(np.concatenate([lead, first, breath, rest, lead]).tobytes(), 640)
    batcher = SileroBatcher(max_delay_s=0.0)

    async def heard(change_at: int | None) -> list[tuple[int, VADState]]:
        vad = SharedSileroVADAnalyzer(
            sample_rate=16000, params=VADParams(start_secs=0.2, stop_secs=0.2), batcher=batcher
        )
        vad.set_sample_rate(16000)
        states = await feed(vad, frames[:change_at])
        if change_at is not None:
            vad.set_params(VADParams(start_secs=0.1, stop_secs=0.2))
            states += await feed(vad, frames[change_at:])
        return heard_changes(states)

    unchanged = await asyncio.wait_for(heard(None), HANG_GUARD_S)
    assert [state for _, state in unchanged] == [VADState.SPEAKING, VADState.QUIET]
    breath_at = (len(lead) + len(first)) * 2 // 640
    for change_at in range(breath_at - 6, breath_at + 4):  # in the last word, then the breath
        assert await asyncio.wait_for(heard(change_at), HANG_GUARD_S) == unchanged, change_at


async def stop_and_starts(
    pcm: bytes, floor_margin_db: float | None, sample_rate: int = 8000
) -> list[tuple[int, VADState]]:
    """Where the product's VAD (the talker gate on) starts and stops on ``pcm``, fed as a phone
    call's 20 ms frames."""
    vad = SharedSileroVADAnalyzer(
        foreground_margin_db=6.0,
        floor_margin_db=floor_margin_db,
        batcher=SileroBatcher(max_delay_s=0.0),  # frames come back to back: no batching wait
    )
    vad.set_sample_rate(sample_rate)
    return heard_changes(await feed(vad, frames_of(pcm, sample_rate // 25)))


async def test_with_the_floor_a_quiet_line_starts_as_stock_silero_and_stops_no_later() -> None:
    """``floor_margin_db`` acts only inside the caller's speech and only toward quiet: every
    start is stock Silero's, and every stop comes at the same frame or sooner."""
    pcm = conversation(8000)
    stock = await asyncio.wait_for(stop_and_starts(pcm, None), HANG_GUARD_S)
    floor = await asyncio.wait_for(stop_and_starts(pcm, 3.0), HANG_GUARD_S)

    assert [state for _, state in floor] == [state for _, state in stock]
    assert len(stock) == 6
    for (at, state), (stock_at, _) in zip(floor, stock, strict=True):
        assert at == stock_at if state == VADState.SPEAKING else at <= stock_at


async def test_on_a_hissing_line_the_floor_hears_the_caller_stop_sooner() -> None:
    """White noise 10 dB under the speech: Silero's confidence lingers on the hiss after the
    last word, and the stop (and so the STT's final) came that much later."""
    pcm = phrase_audio(HISSY, 8000, voice="piper")
    before, speech, after = line(pcm.tobytes(), 8000, "white", 10, before_s=1.0, after_s=2.0)
    ends_at = (len(before) + len(speech)) // 320

    stock = await asyncio.wait_for(stop_and_starts(before + speech + after, None), HANG_GUARD_S)
    floor = await asyncio.wait_for(stop_and_starts(before + speech + after, 3.0), HANG_GUARD_S)

    assert [state for _, state in floor] == [VADState.SPEAKING, VADState.QUIET]
    assert [state for _, state in stock] == [VADState.SPEAKING, VADState.QUIET]
    assert floor[0] == stock[0]
    stock_lag, floor_lag = stock[1][0] - ends_at, floor[1][0] - ends_at
    assert floor_lag <= stock_lag - 3, f"stop {stock_lag} -> {floor_lag} frames after the end"


async def test_a_noise_like_sound_inside_a_word_does_not_end_the_speech() -> None:
    """The "ch" of "möchte" and the "sch" of "Tisch" are as loud as white noise 10 dB under the
    speech: by level alone they are the floor (that rule cut this sentence in three), but
    Silero is sure of them, so the sentence is one segment."""
    pcm = phrase_audio("ich möchte einen tisch für zwei personen", 8000, voice="espeak:de")
    before, speech, after = line(pcm.tobytes(), 8000, "white", 10, before_s=1.0, after_s=2.0)

    floor = await asyncio.wait_for(stop_and_starts(before + speech + after, 3.0), HANG_GUARD_S)

    assert [state for _, state in floor] == [VADState.SPEAKING, VADState.QUIET]


async def test_with_people_talking_behind_the_caller_the_floor_leaves_the_talker_gate_alone() -> (
    None
):
    """On babble a dip of the talkers is no floor: the talker gate decides alone."""
    pcm = phrase_audio(QUESTION, 8000, voice="piper")
    before, speech, after = line(pcm.tobytes(), 8000, "babble", 10, before_s=1.0, after_s=2.0)
    audio = before + speech + after

    floor = await asyncio.wait_for(stop_and_starts(audio, 3.0), HANG_GUARD_S)

    assert floor == await asyncio.wait_for(stop_and_starts(audio, None), HANG_GUARD_S)
    assert VADState.QUIET in [state for _, state in floor]
