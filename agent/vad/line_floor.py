"""Hear the caller stop where their speech falls to the line's own noise, not where Silero's
confidence has decayed.

Silero's confidence lingers after the last word: on the extended set's phone lines the VAD
reported the end of speech (its stop less ``stop_secs``) 70-94 ms after the words ended on a
clean line (p50 per language), and 91-192 ms after (at most 299 ms) with white noise 10 dB under
the speech (``bench/results/vad_stop.md``). The
STT commits the segment at that stop, so every turn's final transcript, and its answer, came
that much later on a hissing line: a steady noise floor held the turn open.

So, once the caller's speech is under way, a window whose level is within ``margin_db`` of the
line's noise floor counts as quiet when Silero is not sure of it either (confidence under
:data:`UNSURE`): the stop is counted from there, and still needs ``stop_secs`` of such windows.
Level alone is not enough: a fricative ("ch" in "möchte", "sch" in "Tisch") is noise-like and as
loud as white noise at 10 dB, and a level-only rule cut "ich möchte einen Tisch" in three;
Silero is sure of those (over 0.9) and of no noise.

The floor is the average power of the windows with no voice in them at all (Silero under
:data:`~agent.vad.foreground.NO_VOICE`: silence or hiss), over :data:`FLOOR_S`; in power, not in
dB, so a window of digital silence (a jitter buffer's fill) hardly moves it. It counts only on a
line whose background (the windows outside the caller's speech) is mostly such windows
(:data:`STEADY_SHARE`): on a line with other people talking behind the caller, a window with no
voice is a dip of the babble, no floor, and the talker gate (:mod:`agent.vad.foreground`)
decides there; acting on babble 20 dB under the caller let the babble open a second segment
after the caller's stop. Both averages start as plain means of what was heard, so a caller who
speaks 0.6 s into the call is served from the first word. Starts are never touched, so the
VAD's sensitivity to short words stays as measured.
"""

from __future__ import annotations

from agent.vad.foreground import NO_VOICE

UNSURE = 0.9
"""Silero's confidence under which a window at the floor is quiet. Inside words it stays over
this even on noise-like sounds; in its decay after the last word it falls through it first."""

FLOOR_S = 0.5
"""The time constant of the floor's average (of power) over the windows with no voice."""

STEADY_S = 1.0
"""The time constant of the share of the background that has no voice in it."""

STEADY_SHARE = 0.5
"""The floor counts from this share of voiceless background on: silence and hiss are 99 % such
windows, four talkers 20 dB under the caller 1 %."""


class LineFloor:
    """The line's noise floor on one call, and whether a window of speech has fallen to it."""

    def __init__(self, margin_db: float, window_s: float) -> None:
        """Create the floor.

        Args:
            margin_db: How close to the floor (dB) a window's level must be to count as quiet.
            window_s: The VAD window's length (32 ms for Silero), the step of the averages.
        """
        if margin_db <= 0:
            raise ValueError(f"margin_db must be positive, not {margin_db}")
        self._margin_factor = 10.0 ** (margin_db / 10.0)
        self._floor_windows = max(1, round(FLOOR_S / window_s))
        self._steady_windows = max(1, round(STEADY_S / window_s))
        self._floor_power = 0.0
        self._voiceless = 0  # windows with no voice heard so far
        self._background = 0  # windows outside the caller's speech heard so far
        self._voiceless_share = 0.0  # of the background: silence or hiss, not talkers

    def is_quiet(self, power: float, confidence: float, *, in_speech: bool) -> bool:
        """Whether a window of mean power ``power`` (:func:`~agent.vad.foreground.window_power`)
        is quiet though Silero may call it speech: at the floor of a line whose background is
        steady, and not surely speech. Pass every window, with whether the caller's speech is
        under way: the floor is learned from them."""
        voiceless = confidence < NO_VOICE
        if voiceless:
            self._voiceless += 1
            rate = 1.0 / min(self._voiceless, self._floor_windows)
            self._floor_power += rate * (power - self._floor_power)
        if not in_speech:
            self._background += 1
            rate = 1.0 / min(self._background, self._steady_windows)
            self._voiceless_share += rate * (voiceless - self._voiceless_share)
        return (
            self._voiceless > 0
            and self._voiceless_share >= STEADY_SHARE
            and confidence < UNSURE
            # within margin_db of the floor, compared in power (no logarithm per window)
            and power + 1e-10 < (self._floor_power + 1e-10) * self._margin_factor
        )
