"""The noisy line is what it says: noise at the declared level below the speech, over the
whole call, the same every time."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import requires_espeak
from tests.fakes.line_noise import line, noise, speech_level
from tests.fakes.speech import speech_at

pytestmark = requires_espeak


@pytest.mark.parametrize("kind", ["white", "babble"])
@pytest.mark.parametrize("snr_db", [20, 10])
def test_the_noise_is_the_declared_level_below_the_speech(kind: str, snr_db: float) -> None:
    speech = speech_at("can you call me back tomorrow", 8000)
    before, noisy, after = line(speech, 8000, kind, snr_db, before_s=1.0, after_s=2.0)  # type: ignore[arg-type]
    assert len(before) == 2 * 8000 and len(after) == 2 * 16000
    assert len(noisy) == len(speech)
    alone = np.frombuffer(before + after, np.int16).astype(np.float64)
    level = speech_level(np.frombuffer(speech, np.int16))
    heard_db = 20 * np.log10(level / np.sqrt(np.mean(alone**2)))
    assert heard_db == pytest.approx(snr_db, abs=1.0)
    again = line(speech, 8000, kind, snr_db, before_s=1.0, after_s=2.0)  # type: ignore[arg-type]
    assert again == (before, noisy, after)


@pytest.mark.parametrize("kind", ["white", "babble"])
def test_another_draw_is_another_noise_at_the_same_level(kind: str) -> None:
    speech = speech_at("can you call me back tomorrow", 8000)
    first = line(speech, 8000, kind, 20, before_s=1.0, after_s=1.0, draw=0)  # type: ignore[arg-type]
    second = line(speech, 8000, kind, 20, before_s=1.0, after_s=1.0, draw=1)  # type: ignore[arg-type]
    assert first[0] != second[0] and first[2] != second[2]
    rms = [
        np.sqrt(np.mean(np.frombuffer(d[0] + d[2], np.int16).astype(np.float64) ** 2))
        for d in (first, second)
    ]
    assert 20 * np.log10(rms[0] / rms[1]) == pytest.approx(0, abs=0.5)


def test_an_unknown_noise_is_refused() -> None:
    with pytest.raises(ValueError, match="white"):
        noise("pink", 100, 8000)  # type: ignore[arg-type]
