"""Tell the caller from the talkers behind them by level: on a line whose background is other
people talking, a window Silero calls speech counts only when it is clearly over the talkers'
level or near the caller's own.

Silero scores any human voice as speech. On a line with other people talking behind the
caller (a café, an office, a television) it never reports the end of the caller's speech, so
the turn never ends: on ``bench/turn_taking.py``'s babble lines (four talkers 20 or 10 dB
below the caller) no turn was answered at all. The caller is the talker closest to the
microphone, so their speech is the loudest on the line. While the line's background is talkers,
a speech window is the caller's only when it is at least ``margin_db`` over the talkers' level
or within ``margin_db`` of the caller's; anything else is someone else's.

What the background is, is learned from the line while the caller is not talking (between
turns from the call's first window, and under the bot's speech), and inside a turn from a
voice that has stayed far under the caller's level for a while (:data:`FAR_UNDER`): every
window there that is not the caller's (quiet, or refused) counts, and the share that Silero
calls speech rises and falls over ``BACKGROUND_S`` (faster at first:
:data:`BACKGROUND_PRIOR`). It falls at once (``QUIET_S``) on any window with no voice in it at
all (:data:`NO_VOICE`), in the background or in a pause of the caller's: silence or hiss. The
gate acts from a share of :data:`BACKGROUND_SPEECH` until it falls under
:data:`BACKGROUND_SPEECH_OFF`, so the talkers' lulls do not let them in; and on a line that has
had talkers, a voice far under the caller starts no turn even where a lull has switched the
gate off. The talkers' level is the average level of the voiced windows among them.

The caller's own speech never counts as background: a first form that learned it from the
windows under the caller's level let the soft, fading syllables of a clean phrase switch the
gate on and clip "table" to "thing". On a quiet or hissing line the gate never acts, so every
start and stop is stock Silero's (``tests/agent/fastpath/test_shared_silero.py``).

The caller's level is learned from the windows that pass: it rises within a fraction of a
second, jumps to a window more than ``margin_db`` over it (the talkers, heard before the gate
knew them, were taken for the caller until the caller spoke), and falls over two seconds. A
caller who gets quieter (a phone moved away) stays heard while over the talkers by the margin;
within it, they cannot be told from them by level.

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
talking) that Silero calls speech, and of the talkers' level."""

QUIET_S = 0.1
"""The same share falls this fast on windows with no voice at all (:data:`NO_VOICE`): silence
or hiss in the background, or in a pause of the caller's, shows at once that the background is
no talker, while other talkers leave almost no such windows."""

NO_VOICE = 0.1
"""Silero's confidence below which a window has no voice in it at all. Silence and hiss score
under it (white noise at 10 and 20 dB on a phone line: 99 % of windows); four talkers 20 dB
under the caller dip below the VAD's threshold in 8 % of windows but below this in 1 %, so a
dip in the talkers' voices lowers the share at the slow pace only (before, each dip lowered it
by a third, and at 20 dB the gate let the talkers back in within a second of the caller's
end)."""

BACKGROUND_SPEECH = 0.3
"""The gate starts to act once this share of the background is speech: other talkers. Four
talkers 20 dB under the caller are speech to Silero in only about half of their windows, and
on two of the bench's four draws of that babble the share stood under a half when the caller
spoke (median 0.49 and 0.33 over its 43 utterances; 0.74 and 0.75 on the other two), so the
gate learned them only after the caller's last word, and the VAD heard the end 0.31 and
0.39 s after it (p50), against 0.19-0.21 s on the other two draws
(``bench/results/talker_gate.md``); from 0.3, 0.20 and 0.24 s after it, and whole calls on
those draws were answered 27-467 ms sooner (p50). On quiet and hissing lines the share stays
far under either (their windows have no voice at all), and nothing changed on them or at
10 dB."""

BACKGROUND_SPEECH_OFF = 0.25
"""It stops acting when the share falls below this: talkers' voices have lulls where Silero
is unsure (confidence 0.3-0.5 for half a second at 20 dB), and a gate that let them in at every
lull restarted the VAD on them after the caller's turn."""


BACKGROUND_PRIOR = 4
"""Until the background has been heard for :data:`BACKGROUND_S`, its share of speech is the
plain average of what has been heard, as if it had begun with this many windows with no
voice (0.13 s): the half-second average alone starts from "no talkers" and needed 0.6 s of
them, mostly voiced, to call them talkers, and a caller may speak within half a second of the
call's start. On the bench's fourth draw of the babble at 10 dB the VAD then stopped inside
the caller's words and never heard the rest in 12 of 43 utterances, 2 since; the prior keeps a
single soft voiced window from switching the gate on by itself."""

FAR_UNDER = 2.0
"""A voice this many margins (12 dB by default) under the caller's level, for
:data:`FAR_UNDER_S` without a break, is the background's even inside a segment of the
caller's speech. The background is learned between turns; but talkers the gate did not yet
know when the VAD started (a caller who speaks within half a second of the call's start,
talkers Silero was unsure of at first) hold the VAD in that segment for as long as they talk,
so there is no quiet between turns to learn them in: on other draws of the bench's babble at
20 dB, before this, a third of the turns never ended (``bench/results/talker_gate.md``)."""

FAR_UNDER_S = 0.3
"""Inside the caller's speech the line dips that far under them only for a consonant or a gap
between words, under 0.2 s on the test speech (on all 53 utterances of the two turn-taking
sets, clean and with white noise, the VAD's states with the gate equal those without it; a
voice Silero is sure of that far under the caller, 0.13 s at most); after their last word the
talkers go on. A voice Silero is sure of all that time is talkers at once: the gate acts from
the next window, not once their share of the background has climbed to
:data:`BACKGROUND_SPEECH` (on the bench's third and fourth draws of the babble at 20 dB, the
turn that never ended and a French "Arrêtez" that ended after the call, now end)."""


class ForegroundTalker:
    """The caller's speech level on one call, what the line's background is, and whether a
    window that Silero calls speech is the caller's."""

    def __init__(self, margin_db: float, window_s: float) -> None:
        """Create the gate.

        Args:
            margin_db: How far below the caller's level a window may be and still be theirs,
                and how far over the talkers' level a window is the caller's at any level.
            window_s: The VAD window's length (32 ms for Silero), the step of every average.
        """
        if margin_db <= 0:
            raise ValueError(f"margin_db must be positive, not {margin_db}")
        self._margin = margin_db
        self._smooth = min(1.0, window_s / SMOOTH_S)
        self._rise = min(1.0, window_s / RISE_S)
        self._fall = min(1.0, window_s / FALL_S)
        self._power: float | None = None
        self._level: float | None = None
        self._talkers: float | None = None  # the talkers' level behind the caller (dB)
        self._background_speech = 0.0  # the share of the background Silero calls speech
        self._background_heard = 0  # windows of the background heard so far
        self._talkers_behind = False
        self._talkers_heard = False  # the background has been talkers at some point in the call
        self._background_rate = min(1.0, window_s / BACKGROUND_S)
        self._quiet_rate = min(1.0, window_s / QUIET_S)
        self._window_s = window_s
        self._far_under_s = 0.0  # how long the line has been far under the caller's level
        self._voice_under_s = 0.0  # ... with a voice in it that Silero is sure of
        self._handed_over = True  # the caller's voice went over to it with no voiceless break

    def is_caller(
        self,
        power: float,
        *,
        confidence: float,
        voiced: bool,
        speech: bool,
        between_turns: bool,
    ) -> bool:
        """Whether a window is the caller's speech. Pass every window: the line's levels are
        learned from all of them.

        Args:
            power: The window's mean power (:func:`window_power`).
            confidence: Silero's speech probability for it.
            voiced: Silero calls it someone's speech (its confidence alone).
            speech: The VAD's own test passes (voiced, and loud enough).
            between_turns: The VAD is not in a segment of the caller's speech.
        """
        self._power = (
            power if self._power is None else self._power + self._smooth * (power - self._power)
        )
        db = 10.0 * math.log10(self._power + 1e-10)
        window_db = 10.0 * math.log10(power + 1e-10)
        caller = speech and self._near_the_caller(db, window_db, between_turns)
        no_voice = confidence < NO_VOICE
        self._time_far_under(db, window_db, voiced=voiced, no_voice=no_voice)
        left_behind = self._far_under_s >= FAR_UNDER_S
        if self._voice_under_s >= FAR_UNDER_S and not between_turns:
            self._background_speech = max(self._background_speech, BACKGROUND_SPEECH)
        if (between_turns and not caller) or (voiced and left_behind):
            self._background_heard += 1
            rate = max(
                self._quiet_rate if no_voice else self._background_rate,
                1.0 / (self._background_heard + BACKGROUND_PRIOR),
            )
            self._background_speech += rate * (voiced - self._background_speech)
            if voiced:
                self._talkers = (
                    db
                    if self._talkers is None
                    else self._talkers + self._background_rate * (db - self._talkers)
                )
        elif no_voice and self._level is not None and db < self._level - self._margin:
            self._background_speech -= self._quiet_rate * self._background_speech
        if self._background_speech >= BACKGROUND_SPEECH_OFF:
            self._talkers_heard = True
        if self._background_speech >= BACKGROUND_SPEECH:
            self._talkers_behind = True
        elif self._background_speech < BACKGROUND_SPEECH_OFF:
            self._talkers_behind = False
        return caller

    def _time_far_under(self, db: float, window_db: float, *, voiced: bool, no_voice: bool) -> None:
        """Time how long the line has stayed far under the caller's level (and with a voice
        Silero is sure of) since the caller's voice went over to it, for :data:`FAR_UNDER_S`.

        A stretch counts from the caller's voice, and only while no window in it has no voice
        at all: one that began in, or went through, silence or hiss is a pause of the
        caller's, and what follows may be the caller again, softer (before, a caller who
        came back 20 dB softer after a pause on a quiet line was taken for talkers within half
        a second)."""
        far_under = self._far_under_the_caller(db)
        if no_voice:
            self._handed_over = False
        elif voiced and not self._far_under_the_caller(window_db):
            self._handed_over = True  # the caller's voice (the short-term level lags it)
        if not (far_under and self._handed_over):
            self._far_under_s = self._voice_under_s = 0.0
            return
        self._far_under_s += self._window_s
        self._voice_under_s = self._voice_under_s + self._window_s if voiced else 0.0

    def _far_under_the_caller(self, db: float) -> bool:
        """Whether the line's short-term level is so far under the caller's speech that a
        voice in it is someone else's, even within the caller's turn."""
        return self._level is not None and db < self._level - FAR_UNDER * self._margin

    def _talkers_in_a_lull(self, db: float, window_db: float) -> bool:
        """Whether a voice that would start a turn is the talkers', heard in a lull of the gate.

        The gate goes off in the talkers' lulls (a quarter second of windows with no voice at
        all), and after the caller's last word on the bench's fourth draw of the babble at
        20 dB the talkers then started the VAD in 17 of 43 utterances, 20-25 dB under the
        caller: a call takes them for the caller and holds the turn on them. So on a line
        that has had talkers on it (their share of the background has reached
        :data:`BACKGROUND_SPEECH_OFF` at some point in the call), a voice :data:`FAR_UNDER`
        margins under the caller's level starts no turn, by the line's short-term level and
        the window's own (the short-term level lags a soft first syllable after a pause). On
        lines that never had talkers (clean, white noise) this never acts."""
        return self._talkers_heard and self._far_under_the_caller(max(db, window_db))

    def _near_the_caller(self, db: float, window_db: float, between_turns: bool) -> bool:
        """Whether a speech window at ``db`` (the line's short-term level; ``window_db``: the
        window's own) is the caller's, learning their level from it."""
        if between_turns and self._talkers_in_a_lull(db, window_db):
            return False
        if self._talkers_behind:
            above_talkers = self._talkers is not None and window_db >= self._talkers + self._margin
            near_caller = self._level is not None and db >= self._level - self._margin
            if not (above_talkers or near_caller):
                return False
        if self._level is None or db > self._level + self._margin:
            self._level = db
        else:
            rate = self._rise if db > self._level else self._fall
            self._level += rate * (db - self._level)
        return True


def window_power(window: bytes) -> float:
    """A PCM16 window's mean power, relative to full scale."""
    samples = np.frombuffer(window, np.int16).astype(np.float32)
    return float(np.dot(samples, samples)) / (samples.size * 32768.0**2) if samples.size else 0.0
