"""An answer's leading quiet is cut, its sound and a few ms before it are kept."""

from __future__ import annotations

import numpy as np

from agent.lead_in import KEEP_S, MAX_CUT_S, QUIET_PEAK, LeadInTrimmer

RATE = 22_050


def pcm(*samples: np.ndarray) -> bytes:
    return np.concatenate(samples).astype("<i2").tobytes()


def quiet(seconds: float, peak: int = 3) -> np.ndarray:
    return np.random.default_rng(0).integers(-peak, peak + 1, int(seconds * RATE))


def tone(seconds: float, peak: int = 8000) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (peak * np.cos(2 * np.pi * 220 * t)).astype(np.int64)  # loud from its first sample


def fed(trimmer: LeadInTrimmer, audio: bytes, chunk: int, channels: int = 1) -> bytes:
    return b"".join(
        trimmer.cut(audio[i : i + chunk], RATE, channels) for i in range(0, len(audio), chunk)
    )


def test_the_quiet_before_the_first_sound_is_cut_to_a_few_milliseconds() -> None:
    sound = tone(0.3)
    for chunk in (64, 4096, 1 << 20):  # the onset inside the first chunk, or chunks later
        out = np.frombuffer(fed(LeadInTrimmer(), pcm(quiet(0.05), sound), chunk), "<i2")
        keep = int(KEEP_S * RATE)
        assert len(out) == keep + len(sound), chunk
        assert np.abs(out[:keep]).max() <= QUIET_PEAK  # the quiet kept is the quiet that was
        assert np.array_equal(out[keep:], sound)


def test_audio_after_the_first_sound_passes_untouched_quiet_and_all() -> None:
    trimmer = LeadInTrimmer()
    first = trimmer.cut(pcm(quiet(0.04), tone(0.1)), RATE)
    pause = pcm(quiet(0.2))
    assert first
    assert trimmer.cut(pause, RATE) == pause


def test_a_voice_that_starts_softly_loses_no_more_than_the_most_it_may_cut() -> None:
    soft = quiet(1.0, peak=QUIET_PEAK)  # never over the quiet peak
    out = fed(LeadInTrimmer(), pcm(soft), 4096)
    assert len(out) // 2 == len(soft) - int(MAX_CUT_S * RATE) + int(KEEP_S * RATE)


def test_an_answer_with_no_quiet_before_it_is_left_whole() -> None:
    audio = pcm(tone(0.2))
    assert LeadInTrimmer().cut(audio, RATE) == audio


def test_stereo_is_cut_on_a_whole_frame_of_both_channels() -> None:
    mono = np.concatenate([quiet(0.03), tone(0.1)])
    stereo = np.repeat(mono, 2)
    out = np.frombuffer(fed(LeadInTrimmer(), pcm(stereo), 1000, channels=2), "<i2")
    assert len(out) % 2 == 0
    assert np.array_equal(out[0::2], out[1::2])
