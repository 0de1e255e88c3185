"""The foreground gate: speech windows from talkers behind the caller are refused, a quiet or
hissing line's are never touched, and a caller who gets quieter is heard again."""

from __future__ import annotations

import numpy as np
import pytest

from agent.vad.foreground import ForegroundTalker

WINDOW_S = 0.032
SAMPLES = 256  # 32 ms at 8 kHz


def window(db: float, seed: int = 0) -> bytes:
    """32 ms of noise at ``db`` dB full scale (RMS), as PCM16."""
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal(SAMPLES)
    scaled = noise / np.sqrt(np.mean(noise**2)) * 32768 * 10 ** (db / 20)
    return np.clip(np.round(scaled), -32768, 32767).astype(np.int16).tobytes()


def feed(gate: ForegroundTalker, db: float, seconds: float, speech: bool) -> list[bool]:
    """The gate's answers for ``seconds`` of windows at ``db``."""
    count = round(seconds / WINDOW_S)
    return [gate.is_caller(window(db, seed=i), speech) for i in range(count)]


def test_on_a_quiet_line_every_speech_window_is_the_callers() -> None:
    gate = ForegroundTalker(margin_db=6, window_s=WINDOW_S)
    feed(gate, -90, 1.0, speech=False)
    assert all(feed(gate, -20, 1.0, speech=True))
    # A soft word 20 dB under the caller's level, between pauses: still theirs.
    feed(gate, -90, 0.5, speech=False)
    assert all(feed(gate, -40, 0.25, speech=True))


def test_on_a_hissing_line_the_callers_soft_words_still_count() -> None:
    """Steady noise Silero does not call speech: the background is no talker. (A soft stretch
    of the caller's own speech that lasts half a second or more does read as talkers behind
    them: the limit of telling people apart by level alone.)"""
    gate = ForegroundTalker(margin_db=6, window_s=WINDOW_S)
    feed(gate, -35, 1.0, speech=False)
    for _ in range(3):
        assert all(feed(gate, -20, 0.6, speech=True))
        assert all(feed(gate, -30, 0.3, speech=True))
        feed(gate, -35, 0.4, speech=False)


def test_talkers_behind_the_caller_are_refused_once_the_caller_has_spoken() -> None:
    gate = ForegroundTalker(margin_db=6, window_s=WINDOW_S)
    # Before the caller says anything, the talkers are all there is to hear.
    assert all(feed(gate, -32, 1.0, speech=True))
    assert all(feed(gate, -20, 1.5, speech=True))  # the caller, 12 dB above them
    after = feed(gate, -32, 2.0, speech=True)  # the caller stops; the talkers go on
    refused_from = after.index(False)
    assert refused_from * WINDOW_S <= 0.5, f"refused only after {refused_from * WINDOW_S} s"
    assert not any(after[refused_from + 8 :]), "the talkers were heard again"


def test_a_caller_who_gets_quieter_is_heard_again() -> None:
    gate = ForegroundTalker(margin_db=6, window_s=WINDOW_S)
    feed(gate, -32, 1.0, speech=True)
    feed(gate, -20, 1.5, speech=True)
    feed(gate, -32, 1.0, speech=True)  # talkers behind: refused
    # The caller moves the phone away: 10 dB quieter, 2 dB above the talkers.
    quieter = feed(gate, -30, 8.0, speech=True)
    assert not quieter[0]
    assert quieter.index(True) * WINDOW_S <= 6.0
    assert all(quieter[-round(1.0 / WINDOW_S) :])


@pytest.mark.parametrize("margin", [0, -3])
def test_the_margin_must_be_positive(margin: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        ForegroundTalker(margin_db=margin, window_s=WINDOW_S)
