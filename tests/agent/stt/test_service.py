"""The Voxtral STT service against the strict realtime peer (``tests/fakes/realtime_peer.py``):
every rule of vLLM's realtime protocol is checked on the wire, and the peer's "transcript" is
the number of samples it received, so lost or duplicated audio shows up as a wrong number."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from agent.stt.channels import websocket_channel_factory
from agent.stt.params import RealtimeSTTParams
from agent.stt.protocol import ErrorEvent, TranscriptionDelta
from agent.stt.service import VoxtralRealtimeSTTService
from tests.agent.stt.harness import SttHarness
from tests.agent.transports.stack import async_wait_for
from tests.fakes.realtime_peer import Generation, RealtimePeer, Send

MODEL = "voxtral-test"


def tone(seconds: float, rate: int, freq: float = 440.0, channels: int = 1) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    mono = (np.sin(2 * np.pi * freq * t) * 8000).astype("<i2")
    return np.repeat(mono, channels).astype("<i2").tobytes()


def make_service(url: str, **kwargs: object) -> VoxtralRealtimeSTTService:
    options: dict[str, object] = {
        "preroll_s": 0.4,
        "reconnect_min_wait_s": 0.05,
        "reconnect_max_wait_s": 0.2,
    }
    options.update(kwargs)
    return VoxtralRealtimeSTTService(
        channel_factory=websocket_channel_factory(url),
        settings=VoxtralRealtimeSTTService.Settings(model=MODEL),
        params=RealtimeSTTParams(**options),  # type: ignore[arg-type]
    )


async def test_a_turn_is_one_generation_with_every_sample_and_a_finalized_transcript() -> None:
    async with RealtimePeer(model=MODEL) as peer:
        async with SttHarness(make_service(peer.url)) as h:
            await h.say(tone(1.0, 16_000))
            final = await h.final()
        assert final.finalized is True
        assert final.text == str(16_000)
        assert peer.transcripts() == [16_000]
        assert peer.violations == []


@pytest.mark.parametrize(
    ("rate", "channels"), [(8_000, 1), (24_000, 1), (48_000, 1), (48_000, 2), (16_000, 2)]
)
async def test_any_input_format_reaches_the_server_as_16khz_mono(rate: int, channels: int) -> None:
    async with RealtimePeer(model=MODEL) as peer:
        async with SttHarness(make_service(peer.url), sample_rate=rate) as h:
            await h.say(tone(1.0, rate, channels=channels), channels=channels)
            await h.final()
        assert peer.violations == []
        received = np.frombuffer(bytes(peer.generations[0].audio), "<i2").astype(float)
        # The resampler holds back a few ms at the end of a stream; nothing more is lost.
        assert 16_000 * 0.97 <= len(received) <= 16_000 * 1.01
        spectrum = np.abs(np.fft.rfft(received[1600:-1600]))
        peak_hz = np.argmax(spectrum) * 16_000 / (len(received) - 3200)
        assert abs(peak_hz - 440) < 10, f"tone arrived at {peak_hz:.0f} Hz: wrong sample rate"


async def test_preroll_carries_the_audio_heard_just_before_the_vad_fired() -> None:
    async with RealtimePeer(model=MODEL) as peer:
        async with SttHarness(make_service(peer.url, preroll_s=0.3)) as h:
            await h.frames(tone(1.0, 16_000, freq=200))  # idle audio, only its tail is kept
            await h.say(tone(0.5, 16_000))
            final = await h.final()
        assert final.text == str(int(0.3 * 16_000) + 8_000)
        assert peer.violations == []


async def test_idle_phone_audio_is_kept_as_it_came_and_resampled_only_when_a_turn_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agent.stt.audio import StreamConverter

    resampled: list[int] = []
    convert = StreamConverter.convert

    def counting_convert(self: StreamConverter, pcm: bytes, rate: int, channels: int = 1) -> bytes:
        resampled.append(len(pcm))
        return convert(self, pcm, rate, channels)

    monkeypatch.setattr(StreamConverter, "convert", counting_convert)
    async with RealtimePeer(model=MODEL) as peer:
        async with SttHarness(make_service(peer.url, preroll_s=0.3), sample_rate=8_000) as h:
            await h.frames(tone(2.0, 8_000, freq=200))  # idle: only its last 0.3 s is kept
            assert resampled == []
            await h.say(tone(0.5, 8_000))
            final = await h.final()
        # The pre-roll (0.3 s at 8 kHz) went through the resampler once, at the turn's start.
        assert resampled[0] == int(0.3 * 8_000) * 2
        assert 0.97 * 0.8 * 16_000 <= int(final.text) <= 1.01 * 0.8 * 16_000
        assert peer.violations == []


async def test_a_turn_without_audio_sends_no_commit_at_all() -> None:
    async with RealtimePeer(model=MODEL) as peer:
        async with SttHarness(make_service(peer.url, preroll_s=0.0)) as h:
            await h.say(b"")
            await h.say(tone(0.2, 16_000))
            final = await h.final()
        assert final.text == str(3_200)
        assert peer.violations == []
        assert len(peer.generations) == 1


async def test_deltas_become_accumulated_interim_frames_and_empty_ones_are_ignored() -> None:
    async def speak_back(send: Send, generation: Generation) -> None:
        count = len(generation.audio) // 640
        if count in (5, 10):
            await send(TranscriptionDelta(""))
            await send(TranscriptionDelta("hello" if count == 5 else " world"))

    async with RealtimePeer(model=MODEL, on_append=speak_back) as peer:
        async with SttHarness(make_service(peer.url, preroll_s=0.0)) as h:
            await h.say(tone(0.5, 16_000), pace=4)
            await h.final()
            texts = [frame.text for frame in h.downstream.interims]
        assert texts == ["hello", "hello world"]


async def test_a_new_turn_waits_for_the_previous_done_instead_of_overlapping() -> None:
    async with RealtimePeer(model=MODEL, hold_finals=asyncio.Event()) as peer:
        assert peer.hold_finals is not None
        async with SttHarness(make_service(peer.url, preroll_s=0.0, final_timeout_s=30)) as h:
            await h.say(tone(0.3, 16_000))
            await asyncio.sleep(0.2)
            await h.say(tone(0.5, 16_000))  # the user speaks again before the first done
            await asyncio.sleep(0.2)
            assert len(peer.generations) == 1  # the second turn is held back, not overlapped
            peer.hold_finals.set()
            one = await h.final()
            two = await h.final()
        assert (one.text, two.text) == ("4800", "8000")
        assert peer.violations == []


async def test_an_empty_turn_while_waiting_for_done_does_not_block_later_turns() -> None:
    async with RealtimePeer(model=MODEL, hold_finals=asyncio.Event()) as peer:
        assert peer.hold_finals is not None
        async with SttHarness(make_service(peer.url, preroll_s=0.0, final_timeout_s=30)) as h:
            await h.say(tone(0.3, 16_000))
            await asyncio.sleep(0.1)
            await h.say(b"")  # a VAD blip with no audio while the first done is pending
            await h.say(tone(0.2, 16_000))
            await asyncio.sleep(0.1)
            peer.hold_finals.set()
            one = await h.final()
            two = await h.final(timeout=5)
        assert (one.text, two.text) == ("4800", "3200")
        assert peer.violations == []


async def test_every_segment_is_answered_in_order_words_or_not() -> None:
    """A turn strategy counts on it: one ``SpeechSegmentTranscribedFrame`` per VAD segment,
    right after that segment's final when it had words, none missing for an empty one."""
    async with RealtimePeer(model=MODEL, words_from_samples=6_000) as peer:
        async with SttHarness(make_service(peer.url, preroll_s=0.0)) as h:
            await h.say(tone(0.5, 16_000))
            await h.final()
            await h.say(b"")  # a VAD blip with no audio at all
            await h.say(tone(0.2, 16_000))  # too short for words: joins the next segment
            await async_wait_for(
                lambda: len(h.downstream.segments) == 3, timeout_s=10, what="three segments"
            )
        kinds = [type(frame).__name__ for frame in h.downstream.order]
        assert kinds == [
            "TranscriptionFrame",
            "SpeechSegmentTranscribedFrame",
            "SpeechSegmentTranscribedFrame",
            "SpeechSegmentTranscribedFrame",
        ]
        assert [frame.text for frame in h.downstream.segments] == ["8000", "", ""]


async def test_a_short_segment_with_no_words_is_heard_again_with_the_next() -> None:
    """ "Hello there." in a breath comes back empty alone; its audio goes in front of the
    next segment's (already waiting, or begun soon after), so its words are not lost."""
    for gap_s in (0.0, 0.3):  # the next segment began before / after the empty final
        async with RealtimePeer(
            model=MODEL, words_from_samples=6_000, final_delay_s=0.2 if gap_s == 0 else 0.0
        ) as peer:
            async with SttHarness(make_service(peer.url, preroll_s=0.0)) as h:
                await h.say(tone(0.2, 16_000))
                await asyncio.sleep(gap_s)
                await h.say(tone(0.5, 16_000))
                final = await h.final()
            assert final.text == str(3_200 + 8_000), f"gap {gap_s}: {final.text}"
            assert [frame.text for frame in h.downstream.segments] == ["", final.text]
            assert peer.violations == []


@pytest.mark.parametrize(
    "code",
    [
        "invalid_json",
        "unknown_event",
        "invalid_audio",
        "model_not_validated",
        "model_not_found",
        "processing_error",
    ],
)
async def test_error_events_become_pipeline_errors_and_the_call_goes_on(code: str) -> None:
    sent = False

    async def complain_once(send: Send, generation: Generation) -> None:
        nonlocal sent
        if not sent:
            sent = True
            await send(ErrorEvent("something broke", code))

    async with RealtimePeer(model=MODEL, on_append=complain_once) as peer:
        async with SttHarness(make_service(peer.url, preroll_s=0.0)) as h:
            await h.say(tone(0.5, 16_000), pace=4)
            final = await h.final()
            await h.say(tone(0.25, 16_000))
            second = await h.final()
        assert any(f"[{code}]" in error.error for error in h.errors)
        assert all(not error.fatal for error in h.errors)
        assert final.text == "8000" and second.text == "4000"
        assert peer.violations == []


async def test_a_dropped_socket_mid_turn_is_replayed_so_no_audio_is_lost() -> None:
    async with RealtimePeer(model=MODEL, drop_after=25) as peer:  # 0.5 s in 20 ms appends
        async with SttHarness(make_service(peer.url, preroll_s=0.0)) as h:
            await h.say(tone(1.5, 16_000), pace=3)
            final = await h.final()
        assert peer.fired == {"drop"} and peer.connections == 2
        assert final.text == str(24_000)
        assert peer.violations == []


async def test_a_final_commit_left_unanswered_is_recovered_by_the_watchdog() -> None:
    async with RealtimePeer(model=MODEL) as peer:
        peer.answer_final = False
        service = make_service(peer.url, preroll_s=0.0, final_timeout_s=0.5)
        async with SttHarness(service) as h:
            await h.say(tone(0.5, 16_000))
            await asyncio.sleep(0.2)
            peer.answer_final = True  # the restarted generation gets an answer
            final = await h.final(timeout=10)
        assert final.text == "8000"
        assert peer.connections >= 2
        assert any("no final transcript" in error.error for error in h.errors)


async def test_an_unreachable_server_becomes_a_permanent_error_not_a_loop() -> None:
    service = make_service("ws://127.0.0.1:9/v1/realtime", reconnect_attempts=2)
    async with SttHarness(service) as h:
        for _ in range(100):
            if any("cannot connect" in e.error for e in h.errors) and not service.is_usable:
                break
            await asyncio.sleep(0.05)
    assert not service.is_usable
    assert any("cannot connect to the STT server" in e.error for e in h.errors)


async def test_the_connection_is_closed_when_the_pipeline_ends() -> None:
    async with RealtimePeer(model=MODEL) as peer:
        async with SttHarness(make_service(peer.url)) as h:
            await h.say(tone(0.2, 16_000))
            await h.final()
            assert peer.open_connections == 1
        for _ in range(50):
            if peer.open_connections == 0:
                break
            await asyncio.sleep(0.05)
        assert peer.open_connections == 0
