"""A noisy line made from clean test speech: white noise or babble mixed in at a chosen
signal-to-noise ratio, over the whole call (before, between and after the words), as a phone
line or a room carries it.

The SNR is taken against the speech's own level (the RMS of its loud part, not of the pauses),
so "10 dB" means the same for a short command as for a long sentence. Babble is other
sentences of the test speech spoken over each other, offset in time, so it sounds like a room
of people without being any one of them. Everything is drawn from a fixed seed (one per
``draw``).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from tests.fakes.speech import SENTENCES, speech_at

Noise = Literal["white", "babble"]
NOISES: tuple[Noise, ...] = ("white", "babble")
SPEECH_PEAK = 300
"""Samples louder than this (of 32767) are the speech whose level the SNR is taken against."""
BABBLE_TALKERS = 4


def speech_level(pcm: np.ndarray) -> float:
    """The RMS of the loud part of ``pcm`` (int16 samples)."""
    loud = pcm[np.abs(pcm.astype(np.int32)) > SPEECH_PEAK].astype(np.float64)
    return float(np.sqrt(np.mean(loud**2))) if loud.size else 0.0


def noise(kind: Noise, samples: int, sample_rate: int, seed: int = 0) -> np.ndarray:
    """``samples`` of unit-RMS noise (float64)."""
    rng = np.random.default_rng(seed)
    if kind == "white":
        out = rng.standard_normal(samples)
    elif kind == "babble":
        out = np.zeros(samples)
        for talker in range(BABBLE_TALKERS):
            voice = np.frombuffer(speech_at(" ".join(SENTENCES), sample_rate), np.int16)
            start = int(rng.integers(0, len(voice)))
            stream = np.roll(voice.astype(np.float64), -start - talker * sample_rate // 3)
            out += np.resize(stream, samples)
    else:
        raise ValueError(f"noise is 'white' or 'babble', not {kind!r}")
    rms = float(np.sqrt(np.mean(out**2))) or 1.0
    return out / rms


def line(
    pcm: bytes,
    sample_rate: int,
    kind: Noise,
    snr_db: float,
    *,
    before_s: float,
    after_s: float,
    draw: int = 0,
) -> tuple[bytes, bytes, bytes]:
    """The call's audio on a noisy line: ``before_s`` of noise, the speech with noise, and
    ``after_s`` of noise (as PCM16 bytes each), at ``snr_db`` below the speech's level.
    ``draw`` picks another noise of the same kind (for babble: other stretches of the talkers
    around the caller's words)."""
    speech = np.frombuffer(pcm, np.int16)
    lead, tail = int(before_s * sample_rate), int(after_s * sample_rate)
    padded = np.concatenate([np.zeros(lead, np.int16), speech, np.zeros(tail, np.int16)])
    level = speech_level(speech) / 10 ** (snr_db / 20)
    mixed = padded.astype(np.float64) + level * noise(kind, len(padded), sample_rate, seed=draw)
    out = np.clip(np.round(mixed), -32768, 32767).astype(np.int16)
    return (
        out[:lead].tobytes(),
        out[lead : lead + len(speech)].tobytes(),
        out[lead + len(speech) :].tobytes(),
    )
