"""The quiet after the caller's words is quiet for this line: a steady noise floor does not
break it, a word does, and without the caller's audio nothing is counted."""

from __future__ import annotations

import numpy as np
from pipecat.frames.frames import InputAudioRawFrame

from agent.turns.line_quiet import LineQuiet

RATE = 8000
FRAME_S = 0.06  # a phone call's frame


def frame(level: float, seed: int = 0) -> InputAudioRawFrame:
    """60 ms of white noise at ``level`` RMS (PCM16)."""
    rng = np.random.default_rng(seed)
    pcm = np.clip(rng.normal(0, level, int(RATE * FRAME_S)), -32768, 32767).astype(np.int16)
    return InputAudioRawFrame(audio=pcm.tobytes(), sample_rate=RATE, num_channels=1)


def hear(quiet: LineQuiet, level: float, seconds: float, *, speaking: bool) -> None:
    for index in range(round(seconds / FRAME_S)):
        quiet.hear(frame(level, index), speaking)


def test_a_steady_noise_floor_ten_db_under_the_speech_counts_as_quiet() -> None:
    quiet = LineQuiet()
    hear(quiet, 300, 1.0, speaking=False)  # the line before the first word: its noise
    hear(quiet, 1000, 1.0, speaking=True)  # the caller, 10 dB over it
    quiet.count_from_stop(0.2)
    hear(quiet, 300, 0.6, speaking=False)
    assert quiet.heard_s is not None and abs(quiet.heard_s - 0.8) < 1e-6
    assert quiet.missing_s(0.8) == 0.0


def test_a_word_the_vad_did_not_report_starts_the_quiet_again() -> None:
    quiet = LineQuiet()
    hear(quiet, 10, 1.0, speaking=False)
    hear(quiet, 1000, 1.0, speaking=True)
    quiet.count_from_stop(0.2)
    hear(quiet, 10, 0.6, speaking=False)
    hear(quiet, 800, 0.12, speaking=False)  # "bread", too short for the VAD
    hear(quiet, 10, 0.3, speaking=False)
    assert quiet.heard_s is not None and abs(quiet.heard_s - 0.3) < 1e-6
    # the clock says 1.22 s since the stop's quiet began; the audio heard 0.3 s of it
    assert abs(quiet.missing_s(1.22) - 0.92) < 1e-6


def test_the_frame_still_being_spoken_into_is_not_missing() -> None:
    quiet = LineQuiet()
    hear(quiet, 1000, 0.6, speaking=True)
    quiet.count_from_stop(0.2)
    hear(quiet, 10, 0.6, speaking=False)
    assert quiet.missing_s(0.8 + FRAME_S) == 0.0  # the next frame has not come: not late
    assert quiet.missing_s(0.8 + 2 * FRAME_S) > 0


def test_without_the_callers_audio_nothing_is_counted() -> None:
    quiet = LineQuiet()
    quiet.count_from_stop(0.2)
    assert quiet.heard_s is None
    assert quiet.missing_s(5.0) == 0.0  # the clock alone decides
