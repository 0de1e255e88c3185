"""The quiet after the caller's words, as the caller's own audio says it: quiet for this line.

The adaptive end of turn (:mod:`agent.turns.adaptive_stop`) counts its waits on the clock, and
also in the caller's audio when it reaches the strategy, for two reasons: a busy server reads
audio late, so a timer alone could fire while the words that break the quiet are still queued;
and Silero reports speech only after 100-200 ms of it, so one short word between two pauses
("apples... bread... milk") can pass unreported, and the two pauses would count as one.
:class:`LineQuiet` keeps that count. Quiet means quiet for this line: below a quarter of the
caller's speech level and not clearly above the line's own noise floor, so a steady hiss does
not hold a turn open.
"""

from __future__ import annotations

import numpy as np
from pipecat.frames.frames import InputAudioRawFrame

SOUND_RATIO = 0.25
"""A frame at least this loud, relative to the caller's speech so far (-12 dB), is not quiet.
Silero reports speech only after 100-200 ms of it (``vad_start_secs``, ``barge_in_secs``), so
one short word between two pauses ("apples... bread... milk") can pass unreported, and the two
pauses would count as one long quiet."""

FLOOR_MARGIN = 2.0
"""A frame must be this many times the line's noise floor (+6 dB) to break the quiet: on a
line with background noise at 10 dB below the speech, every frame of noise would otherwise
count as sound (``SOUND_RATIO`` is -12 dB) and every unfinished turn would wait for the audio
past its deadline."""

FLOOR_TIME_S = 1.0
"""How fast the noise floor follows the line's level between words (the time constant of its
average over the frames the VAD calls quiet): slow enough that a short word in a pause barely
moves it, fast enough to learn a line's noise from the second before the first word."""


class LineQuiet:
    """The caller's speech level, the line's noise floor, and the quiet heard since the VAD's
    last stop (a sound starts the count again)."""

    def __init__(self) -> None:
        self.flows = False  # caller audio reaches us (Smart Turn on: CallerAudioFeed)
        self.frame_s = 0.0  # how much audio the caller's last frame carried (phone: 60 ms)
        self.heard_s: float | None = None  # quiet since the VAD's stop, while one is counted
        self._speech_rms = 0.0  # the caller's level while the VAD hears speech
        self._floor_rms: float | None = None  # the line's level while the VAD hears none

    def hear(self, frame: InputAudioRawFrame, speaking: bool) -> None:
        """Learn from one frame of the caller's audio (``speaking``: the VAD hears speech)."""
        self.flows = True
        self.frame_s = len(frame.audio) / 2 / max(frame.num_channels, 1) / frame.sample_rate
        pcm = np.frombuffer(frame.audio, dtype=np.int16)
        if pcm.size == 0:
            return
        rms = float(np.sqrt(np.mean(pcm.astype(np.float32) ** 2)))
        if speaking:
            self._speech_rms = rms if self._speech_rms == 0 else 0.9 * self._speech_rms + 0.1 * rms
            return
        if self._floor_rms is None:
            # Before the first word the line carries only its noise; after it, a loud frame
            # may be a word the VAD did not report, so the floor climbs from silence.
            self._floor_rms = rms if self._speech_rms == 0 else 0.0
        else:
            self._floor_rms += min(1.0, self.frame_s / FLOOR_TIME_S) * (rms - self._floor_rms)
        if self.heard_s is not None:
            if self._speech_rms > 0 and rms >= self._sound_level():
                self.heard_s = 0.0
            else:
                self.heard_s += self.frame_s

    def count_from_stop(self, stop_secs: float) -> None:
        """The VAD stopped after ``stop_secs`` of quiet: count on from there (if audio flows)."""
        self.heard_s = stop_secs if self.flows else None

    def stop_counting(self) -> None:
        """Speech again, or the turn ended: no quiet is counted."""
        self.heard_s = None

    def missing_s(self, quiet_s: float) -> float:
        """How much of ``quiet_s`` of quiet since the stop has not been heard yet, beyond the
        frame still being spoken into (0: all of it, or no quiet is counted)."""
        if self.heard_s is None:
            return 0.0
        missing = quiet_s - self.heard_s
        return 0.0 if missing <= self.frame_s + 0.005 else missing

    def _sound_level(self) -> float:
        """How loud a frame between words must be to count as sound, not quiet."""
        return max(SOUND_RATIO * self._speech_rms, FLOOR_MARGIN * (self._floor_rms or 0.0))
