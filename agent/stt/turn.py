"""Audio bookkeeping for one caller, free of any I/O so it can be tested alone.

Audio here is 16 kHz mono PCM16, except in the pre-roll.

- :class:`PreRoll` keeps the last ``preroll_s`` of audio heard while nobody was speaking, so
  the syllable that made the VAD fire is not lost. It keeps that audio as it arrived (any rate
  or channel count): most of a call's idle audio is never sent, so it is only resampled
  when a turn starts.
- :class:`Turn` is one user turn: every byte sent for it (kept until ``transcription.done``
  proves it arrived, so a dropped connection can be replayed and no word is lost) and the
  outbox that batches audio into ``chunk_bytes`` sends.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from agent.stt.protocol import SAMPLE_RATE

BYTES_PER_SECOND = SAMPLE_RATE * 2


def seconds_to_bytes(seconds: float) -> int:
    """Whole PCM16 samples' worth of bytes."""
    return int(seconds * BYTES_PER_SECOND) & ~1


class PreRoll:
    """A ring of the newest ``preroll_s`` of idle audio, in the format it arrived in.

    A change of format (sample rate or channels) starts the ring afresh.
    """

    def __init__(self, preroll_s: float) -> None:
        self.preroll_s = preroll_s
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self._use_format(SAMPLE_RATE, 1)

    def _use_format(self, sample_rate: int, channels: int) -> None:
        self.sample_rate, self.channels = sample_rate, channels
        self.capacity = int(self.preroll_s * sample_rate) * 2 * channels  # whole frames

    def hear(self, pcm: bytes, sample_rate: int = SAMPLE_RATE, channels: int = 1) -> None:
        if (sample_rate, channels) != (self.sample_rate, self.channels):
            self.take()
            self._use_format(sample_rate, channels)
        if self.capacity == 0 or not pcm:
            return
        self._chunks.append(pcm)
        self._size += len(pcm)
        while self._size - len(self._chunks[0]) >= self.capacity:
            self._size -= len(self._chunks.popleft())

    def take(self) -> bytes:
        """The pre-roll, trimmed to exactly the capacity, and cleared."""
        data = b"".join(self._chunks)[-self.capacity :] if self.capacity else b""
        self._chunks.clear()
        self._size = 0
        return data


@dataclass
class Turn:
    """One user turn on its way to a final transcript."""

    chunk_bytes: int
    max_bytes: int
    started_at: float = field(default_factory=time.monotonic)
    ended: bool = False
    text: str = ""
    recoveries: int = 0
    _audio: list[bytes] = field(default_factory=list)
    _size: int = 0
    _outbox: bytearray = field(default_factory=bytearray)

    def hear(self, pcm: bytes) -> bytes | None:
        """Record audio; returns a chunk once ``chunk_bytes`` are waiting to be sent."""
        if self._size + len(pcm) <= self.max_bytes:
            self._audio.append(pcm)
            self._size += len(pcm)
        self._outbox += pcm
        if len(self._outbox) < self.chunk_bytes:
            return None
        return self.take_outbox()

    def prepend(self, pcm: bytes) -> None:
        """Put earlier audio in front of this turn's (a segment the recognizer heard no words
        in alone); call it before the turn's generation begins, whose replay then sends it."""
        if pcm:
            self._audio.insert(0, pcm)
            self._size += len(pcm)

    def hold(self, chunk: bytes) -> None:
        """Put an unsent chunk back in front of the outbox (the server asked us to wait)."""
        self._outbox[:0] = chunk

    def take_outbox(self) -> bytes:
        """Whatever waits to be sent (at turn end, so nothing stays behind)."""
        chunk = bytes(self._outbox)
        self._outbox.clear()
        return chunk

    def replay(self) -> bytes:
        """All audio of this turn so far, for a fresh generation; empties the outbox."""
        data = b"".join(self._audio)
        self._audio = [data] if data else []
        self._outbox.clear()
        return data

    @property
    def audio_bytes(self) -> int:
        return self._size
