"""PCM16 audio helpers: read WAV files of any rate and channel count, and convert streams to
the 16 kHz mono (:data:`~agent.stt.protocol.SAMPLE_RATE`) the realtime endpoint needs.

Conversion is done once per frame, in numpy, with no work at all when the input already is
16 kHz mono (the pipeline's own rate), so the common path costs nothing.

Resampling runs in float32 and is rounded to PCM16 here: soxr dithers integer output with a
random seed per stream, so the same call resampled twice (or beside other calls) reached the
recognizer as different samples, and tiny.en heard "turn on the lights in the kitchen" as
three different sentences. Rounding ourselves makes the recognizer's input a function of the
caller's audio alone.
"""

from __future__ import annotations

import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soxr

from agent.stt.protocol import SAMPLE_RATE


class AudioFormatError(ValueError):
    """The input is not audio we can read (not a WAV file, or not PCM)."""


@dataclass(frozen=True, slots=True)
class PcmAudio:
    """Interleaved little-endian PCM16 samples."""

    pcm: bytes
    sample_rate: int
    channels: int

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / (2 * self.channels * self.sample_rate)


def read_wav(path: str | Path) -> PcmAudio:
    """Read a PCM WAV file (8/16/24/32-bit integer samples, any rate, any channels).

    Raises:
        AudioFormatError: the file is not a readable PCM WAV file.
    """
    try:
        with wave.open(str(path), "rb") as wav:
            width = wav.getsampwidth()
            channels = wav.getnchannels()
            rate = wav.getframerate()
            frames = wav.readframes(wav.getnframes())
    except (wave.Error, EOFError) as exc:
        raise AudioFormatError(f"{path} is not a PCM WAV file: {exc}") from exc
    if rate <= 0 or channels <= 0:
        raise AudioFormatError(f"{path} has an invalid header (rate {rate}, {channels} channels)")
    return PcmAudio(_to_int16(frames, width), rate, channels)


def _to_int16(frames: bytes, width: int) -> bytes:
    if width == 2:
        return frames
    if width == 1:  # unsigned 8-bit
        samples = (np.frombuffer(frames, np.uint8).astype(np.int16) - 128) << 8
        return samples.astype("<i2").tobytes()
    if width == 3:
        raw = np.frombuffer(frames, np.uint8).reshape(-1, 3)
        return raw[:, 1:].copy().tobytes()  # keep the two most significant bytes
    if width == 4:
        return (np.frombuffer(frames, "<i4") >> 16).astype("<i2").tobytes()
    raise AudioFormatError(f"unsupported sample width: {width} bytes")


def downmix(pcm: bytes, channels: int) -> bytes:
    """Average interleaved channels into mono."""
    if channels == 1:
        return pcm
    samples = np.frombuffer(pcm, "<i2")
    usable = len(samples) - len(samples) % channels
    mono = samples[:usable].reshape(-1, channels).mean(axis=1)
    return mono.astype("<i2").tobytes()


def resample(pcm: bytes, from_rate: int, to_rate: int = SAMPLE_RATE) -> bytes:
    """Resample a whole mono buffer (files, tests); streams use :class:`StreamConverter`."""
    if from_rate == to_rate or not pcm:
        return pcm
    samples = np.frombuffer(pcm, "<i2").astype(np.float32)
    return to_pcm16(soxr.resample(samples, from_rate, to_rate, quality="HQ"))


def to_pcm16(samples: np.ndarray) -> bytes:
    """Float samples on the PCM16 scale, rounded and clipped (no dither: the same audio in
    gives the same bytes out)."""
    return np.clip(np.rint(samples), -32768, 32767).astype("<i2").tobytes()


def to_target(audio: PcmAudio, to_rate: int = SAMPLE_RATE) -> bytes:
    """Whole-buffer conversion to mono PCM16 at ``to_rate``."""
    return resample(downmix(audio.pcm, audio.channels), audio.sample_rate, to_rate)


class StreamConverter:
    """Turns a stream of PCM16 frames at any rate/channel count into 16 kHz mono.

    Keeps one soxr stream per input format, so the filter state carries across frames and
    no clicks appear at frame edges. The stream resampler holds back a few milliseconds of
    audio; :meth:`flush` returns them at the end of an utterance.
    """

    def __init__(self, to_rate: int = SAMPLE_RATE) -> None:
        self._to_rate = to_rate
        self._format: tuple[int, int] | None = None
        self._stream: soxr.ResampleStream | None = None

    def convert(self, pcm: bytes, sample_rate: int, channels: int = 1) -> bytes:
        if channels != 1:
            pcm = downmix(pcm, channels)
        if sample_rate == self._to_rate:
            return pcm
        if self._format != (sample_rate, channels) or self._stream is None:
            self._format = (sample_rate, channels)
            self._stream = soxr.ResampleStream(
                sample_rate, self._to_rate, 1, dtype="float32", quality="HQ"
            )
        samples = np.frombuffer(pcm, "<i2").astype(np.float32)
        return to_pcm16(self._stream.resample_chunk(samples))

    def flush(self) -> bytes:
        """Drain what the resampler still holds (call at the end of the stream)."""
        if self._stream is None:
            return b""
        tail = to_pcm16(self._stream.resample_chunk(np.zeros(0, np.float32), last=True))
        self._stream = None
        self._format = None
        return tail


def silence(duration_s: float, sample_rate: int = SAMPLE_RATE) -> bytes:
    return b"\x00\x00" * int(duration_s * sample_rate)
