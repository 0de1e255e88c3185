"""The offline recognizer: a turn is decoded on an encoder window sized to it, not on
Whisper's 30 s, with faster-whisper's full path as the fallback for a doubtful hypothesis."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from agent.local import recognizer as recognizer_module
from agent.local.recognizer import WhisperRecognizer, pcm16_to_float
from tests.conftest import requires_espeak
from tests.fakes.speech import SENTENCES, speech_at, word_error_rate

RATE = 16_000


@pytest.fixture(scope="module")
def whisper() -> Iterator[WhisperRecognizer]:
    pytest.importorskip("faster_whisper", reason="the offline recognizer needs faster-whisper")
    yield WhisperRecognizer()


@requires_espeak
def test_a_turn_is_decoded_on_a_short_window_about_as_well_as_on_the_full_one(
    whisper: WhisperRecognizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    audio = {s: pcm16_to_float(speech_at(s, RATE)) for s in SENTENCES}
    full = [word_error_rate(s, whisper._full_window(a)) for s, a in audio.items()]
    fallbacks: list[int] = []
    monkeypatch.setattr(whisper, "_full_window", lambda a: fallbacks.append(1) or "")
    short = [word_error_rate(s, whisper.transcribe(a)) for s, a in audio.items()]
    assert not fallbacks, "the short window was not trusted"
    # At most one more word wrong over the six sentences than the full window gets.
    assert sum(short) <= sum(full) + 1 / 7 + 1e-9, (short, full)
    assert max(short) <= 0.2, short


@requires_espeak
@pytest.mark.parametrize("cut_s", [0.15, 0.35])
def test_speech_that_starts_mid_word_is_not_dropped_as_silence(
    whisper: WhisperRecognizer, cut_s: float
) -> None:
    """A turn can reach the server mid-word (a late VAD); the short window then doubts it is
    speech at all (no-speech probability > 0.6) and must not answer "": the full window
    decides, and hears words (tiny.en guesses at the cut word, so not which ones)."""
    speech = pcm16_to_float(speech_at("turn on the lights in the kitchen", RATE))
    text = whisper.transcribe(speech[int(cut_s * RATE) :])
    assert len(text.split()) >= 3, text


def test_silence_is_no_text(whisper: WhisperRecognizer) -> None:
    assert whisper.transcribe(np.zeros(RATE, np.float32)) == ""
    noise = np.random.default_rng(0).normal(0, 0.005, 2 * RATE).astype(np.float32)
    assert whisper.transcribe(noise) == ""


@pytest.mark.parametrize(
    ("text", "looping"),
    [
        ("Turn on the lights in the kitchen.", False),
        ("Turn on the light in the kitchen turn on the light in", True),
        ("Send the report. Send the report.", True),
        ("No, no, no.", False),  # a word said three times is speech, not a loop
        ("", False),
    ],
)
def test_a_hypothesis_stuck_in_a_loop_is_recognised(text: str, looping: bool) -> None:
    assert recognizer_module._repeats(text) is looping
