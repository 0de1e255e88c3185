"""The line's noise floor: a window of speech that has fallen to it, and that Silero is unsure of,
is quiet; nothing is quiet before the floor is known."""

from __future__ import annotations

import numpy as np
import pytest

from agent.vad.foreground import window_power
from agent.vad.line_floor import UNSURE, LineFloor

WINDOW = 256  # 32 ms at 8 kHz
WINDOW_S = WINDOW / 8000


def hiss(rms: float, seed: int = 0) -> float:
    """The power of a 32 ms PCM16 window of white noise at ``rms``."""
    samples = np.random.default_rng(seed).standard_normal(WINDOW) * rms
    return window_power(np.clip(np.round(samples), -32768, 32767).astype(np.int16).tobytes())


def learned(rms: float, windows: int = 40) -> LineFloor:
    """A floor that has heard ``windows`` of hiss at ``rms`` with no voice in it."""
    floor = LineFloor(3.0, WINDOW_S)
    for seed in range(windows):
        floor.is_quiet(hiss(rms, seed), confidence=0.02, in_speech=False)
    return floor


def test_nothing_is_quiet_before_the_line_was_heard_without_a_voice() -> None:
    floor = LineFloor(3.0, WINDOW_S)
    assert not floor.is_quiet(hiss(100), confidence=0.6, in_speech=True)


def test_a_window_at_the_hiss_that_silero_is_unsure_of_is_quiet() -> None:
    floor = learned(100)
    assert floor.is_quiet(hiss(100, seed=99), confidence=0.6, in_speech=True)


def test_a_window_silero_is_sure_of_is_speech_even_at_the_floor() -> None:
    """A fricative is noise-like and as loud as the hiss; Silero hears it in its word."""
    floor = learned(100)
    assert not floor.is_quiet(hiss(100, seed=99), confidence=UNSURE + 0.05, in_speech=True)


def test_a_window_over_the_floor_by_more_than_the_margin_is_speech() -> None:
    floor = learned(100)
    assert not floor.is_quiet(hiss(200, seed=99), confidence=0.6, in_speech=True)  # +6 dB


def test_the_floor_follows_the_line() -> None:
    floor = learned(100)
    assert not floor.is_quiet(hiss(400, seed=99), confidence=0.6, in_speech=True)  # +12 dB
    for seed in range(100):  # 3.2 s of a line four times as loud
        floor.is_quiet(hiss(400, seed), confidence=0.02, in_speech=False)
    assert floor.is_quiet(hiss(400, seed=99), confidence=0.6, in_speech=True)
    assert not floor.is_quiet(hiss(800, seed=99), confidence=0.6, in_speech=True)  # +6 dB


def test_windows_with_a_voice_teach_the_floor_nothing() -> None:
    floor = learned(100)
    for seed in range(50):
        floor.is_quiet(hiss(3000, seed), confidence=0.5, in_speech=True)
    assert floor.is_quiet(hiss(100, seed=99), confidence=0.6, in_speech=True)
    assert not floor.is_quiet(hiss(200, seed=99), confidence=0.6, in_speech=True)


def test_the_margin_must_be_positive() -> None:
    with pytest.raises(ValueError, match="margin_db"):
        LineFloor(0, WINDOW_S)


def test_on_a_line_with_talkers_behind_the_caller_a_dip_is_no_floor() -> None:
    """Babble has voice in almost every window: its rare voiceless dips make no floor."""
    floor = learned(100, windows=3)  # a dip of the babble, then talkers
    for seed in range(60):
        floor.is_quiet(hiss(100, seed), confidence=0.6, in_speech=False)
    assert not floor.is_quiet(hiss(100, seed=99), confidence=0.6, in_speech=True)
