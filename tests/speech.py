"""Test speech made on the spot with espeak-ng (Debian package), cached per session.

Nothing is downloaded: espeak-ng synthesizes the sentences, soxr resamples them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import wave
from functools import cache
from pathlib import Path

from agent.audio import PcmAudio, read_wav, resample

SENTENCES = (
    "the quick brown fox jumps over the lazy dog",
    "please call me back tomorrow morning",
    "what is the weather like in paris today",
    "my account number is seven four two",
    "i would like to book a table for two people",
    "turn on the lights in the kitchen",
)

CACHE_DIR = Path(__file__).resolve().parent / "artifacts" / "speech"


def espeak_available() -> bool:
    return shutil.which("espeak-ng") is not None


@cache
def speak(text: str, *, speed: int = 150) -> PcmAudio:
    """espeak-ng's voice at its native 22.05 kHz, mono PCM16."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    path = CACHE_DIR / (re.sub(r"[^a-z0-9]+", "_", text.lower())[:60] + f"_{speed}.wav")
    if not path.exists():
        subprocess.run(
            ["espeak-ng", "-s", str(speed), "-w", str(path), text], check=True, capture_output=True
        )
    return read_wav(path)


def speech_at(text: str, sample_rate: int, channels: int = 1) -> bytes:
    """The sentence as PCM16 at ``sample_rate`` with ``channels`` identical channels."""
    audio = speak(text)
    pcm = resample(audio.pcm, audio.sample_rate, sample_rate)
    if channels == 1:
        return pcm
    import numpy as np

    mono = np.frombuffer(pcm, "<i2")
    return np.repeat(mono, channels).astype("<i2").tobytes()


def write_wav(path: Path, pcm: bytes, sample_rate: int, channels: int = 1) -> Path:
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(channels)
        wav.setsampwidth(2)
        wav.setframerate(sample_rate)
        wav.writeframes(pcm)
    return path


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Levenshtein distance over words, divided by the reference length."""
    ref, hyp = words(reference), words(hypothesis)
    previous = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        current = [i]
        for j, h in enumerate(hyp, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (r != h)))
        previous = current
    return previous[-1] / max(len(ref), 1)
