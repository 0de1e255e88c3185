"""Cut the quiet a TTS engine puts before an answer's first sound: the caller hears it as delay.

Piper starts every WAV with 25-60 ms of near-digital silence (peaks under -60 dBFS) before the
first phoneme, and an output transport plays audio in real time, so each answer was heard that
much later than its first audio frame went out. Only an answer's first audio is cut (the quiet
before its later sentences is the pause between them); a few milliseconds of it are kept so the
onset is not a click, and no more than :data:`MAX_CUT_S` is ever cut, so a voice that starts
softly is left as it is.
"""

from __future__ import annotations

import numpy as np

QUIET_PEAK = 32
"""A sample this loud or softer (-60 dBFS of PCM16 full scale) is quiet, not sound."""
KEEP_S = 0.005
"""Quiet kept before the first sound."""
MAX_CUT_S = 0.3
"""The most quiet cut: past it the answer plays as it came, quiet and all."""


class LeadInTrimmer:
    """Drops PCM16 audio until the first sound, fed an answer's audio chunk by chunk."""

    def __init__(self) -> None:
        self._cut_samples = 0
        self._kept = np.zeros(0, np.int16)
        self._done = False

    def cut(self, pcm: bytes, sample_rate: int, channels: int = 1) -> bytes:
        """``pcm`` less the answer's leading quiet (b"" while the chunk is all quiet)."""
        if self._done:
            return pcm
        samples = np.frombuffer(pcm, "<i2")
        keep = int(KEEP_S * sample_rate) * channels
        budget = int(MAX_CUT_S * sample_rate) * channels - self._cut_samples
        loud = np.flatnonzero(np.abs(samples.astype(np.int32)) > QUIET_PEAK)
        if loud.size == 0 and len(samples) < budget:
            self._cut_samples += len(samples)
            self._kept = np.concatenate([self._kept, samples])[-keep:] if keep else self._kept[:0]
            return b""
        first = min(int(loud[0]) if loud.size else len(samples), budget)
        first -= first % channels  # a whole frame of every channel
        from_here = min(first, keep)  # the quiet kept before the sound: this chunk's end...
        from_before = min(keep - from_here, len(self._kept))  # ...and the chunks' before it
        head = self._kept[len(self._kept) - from_before :]
        self._done = True
        return np.concatenate([head, samples[first - from_here :]]).astype("<i2").tobytes()
