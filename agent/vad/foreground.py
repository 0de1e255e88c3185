"""Tell the caller from the talkers behind them by level: on a line whose background is other
people talking, a window Silero calls speech counts only when it is near the caller's level.

Silero scores any human voice as speech. On a line with other people talking behind the
caller (a café, an office, a television) it never reports the end of the caller's speech, so
the turn never ends: on ``bench/turn_taking.py``'s babble lines (four talkers 20 or 10 dB
below the caller) no turn was answered at all. The caller is the talker closest to the
microphone, so their speech is the loudest on the line. A speech window is refused as someone
else's when it is more than ``margin_db`` under the caller's level, and only while the line's
background is talkers.

What the background is, is learned from the line while the caller is not talking (between
turns, and under the bot's speech): the share of those windows that Silero calls speech,
rising over ``BACKGROUND_S``. It falls at once (``QUIET_S``) on any background window Silero
does not call speech, and on any window of a pause of the caller's that is silence or hiss.
The caller's own speech never counts as background: a first form that learned it from the
windows under the caller's level let the soft, fading syllables of a clean phrase switch the
gate on and clip "table" to "thing". On a quiet or hissing line the gate never acts, so every
start and stop is stock Silero's (``tests/agent/fastpath/test_shared_silero.py``).

The caller's level is learned from the windows that pass: it rises within a fraction of a
second (the first words on a line that already carried other talkers lift it off their level)
and falls over two seconds. While speech is refused it sinks by ``DECAY_DB_PER_S``, so a
caller who does get quieter (a phone moved away) is heard again within seconds.

Levels are the line's short-term power in dB, averaged over ``SMOOTH_S``: Pipecat's volume
(the loudness of the last 400 ms, smoothed) lags the speech by a few hundred milliseconds, so
at the start of a word after a pause it still reads the pause; a single 32 ms window's level
swings 10 dB and more between a vowel and a consonant.
"""

from __future__ import annotations

import math

import numpy as np

SMOOTH_S = 0.1
"""The time constant of the line's short-term level: about a syllable, so the quiet of a
consonant inside a word is bridged and the quiet after the last word is not."""

RISE_S = 0.15
"""The time constant, in seconds of the caller's speech, of their level rising to it."""

FALL_S = 2.0
"""The same, falling: a softer stretch of the caller's speech lowers the level slowly."""

BACKGROUND_S = 0.5
"""The time constant of the share of the background (the line while the caller is not
talking) that Silero calls speech."""

QUIET_S = 0.1
"""The same share falls this fast on windows Silero does not call speech: silence or hiss in
the background, or in a pause of the caller's, shows at once that the background is no talker,
while other talkers leave few such windows."""

BACKGROUND_SPEECH = 0.5
"""The gate acts only while at least this share of the background is speech: other talkers."""

DECAY_DB_PER_S = 1.0
"""How fast the caller's level sinks while speech is refused."""


class ForegroundTalker:
    """The caller's speech level on one call, what the line's background is, and whether a
    window that Silero calls speech is the caller's."""

    def __init__(self, margin_db: float, window_s: float) -> None:
        """Create the gate.

        Args:
            margin_db: How far below the caller's level a window may be and still be theirs.
            window_s: The VAD window's length (32 ms for Silero), the step of every average.
        """
        if margin_db <= 0:
            raise ValueError(f"margin_db must be positive, not {margin_db}")
        self._margin = margin_db
        self._smooth = min(1.0, window_s / SMOOTH_S)
        self._rise = min(1.0, window_s / RISE_S)
        self._fall = min(1.0, window_s / FALL_S)
        self._decay = DECAY_DB_PER_S * window_s
        self._power: float | None = None
        self._level: float | None = None
        self._background_speech = 0.0  # the share of the background Silero calls speech
        self._background_rate = min(1.0, window_s / BACKGROUND_S)
        self._quiet_rate = min(1.0, window_s / QUIET_S)

    def is_caller(self, window: bytes, *, voiced: bool, speech: bool, between_turns: bool) -> bool:
        """Whether a window (PCM16) is the caller's speech. Pass every window: the line's levels
        are learned from all of them.

        Args:
            window: The window's samples.
            voiced: Silero calls it someone's speech (its confidence alone).
            speech: The VAD's own test passes (voiced, and loud enough).
            between_turns: The VAD is not in a segment of the caller's speech.
        """
        power = window_power(window)
        self._power = (
            power if self._power is None else self._power + self._smooth * (power - self._power)
        )
        db = 10.0 * math.log10(self._power + 1e-10)
        if between_turns and not speech:
            rate = self._background_rate if voiced else self._quiet_rate
            self._background_speech += rate * (voiced - self._background_speech)
        elif not voiced and self._level is not None and db < self._level - self._margin:
            self._background_speech -= self._quiet_rate * self._background_speech
        if not speech:
            return False
        if self._level is None:
            self._level = db
            return True
        if self._background_speech < BACKGROUND_SPEECH or db >= self._level - self._margin:
            rate = self._rise if db > self._level else self._fall
            self._level += rate * (db - self._level)
            return True
        self._level -= self._decay
        return False


def window_power(window: bytes) -> float:
    """A PCM16 window's mean power, relative to full scale."""
    samples = np.frombuffer(window, np.int16).astype(np.float32)
    return float(np.dot(samples, samples)) / (samples.size * 32768.0**2) if samples.size else 0.0
