"""Does the VAD start a turn for a one-word command on a phone line, and how often does it
start one for noise or breathing? Offline: no server, no clock.

For each VAD setting of a grid (``start_secs``, ``confidence``, ``min_volume``; stop 0.2 s),
the product's VAD (:class:`~agent.fastpath.shared_silero.SharedSileroVADAnalyzer`, which
decides as Pipecat's Silero analyzer does) hears, as a phone call carries it (8 kHz μ-law):

- short words: commands and answers in English, German, French and Spanish ("stop", "yes",
  "no", "cancel it", "stopp", "nein", "oui", "arrêtez", "sí", "para"...), from espeak-ng at
  its default rate (175 words a minute: ~0.3-0.5 s) and slower (140), at the speech level a
  phone call delivers and 10 and 20 dB below it; each word alone, between 1 s of silence
  before and after. Sensitivity: the share of words the VAD reported any speech for;
- no words: 12 s each of white noise and babble (``tests.fakes.line_noise``) at -45, -35 and
  -25 dBFS, and of breathing (noise shaped to 200-2,000 Hz, 0.5 s in and 0.7 s out, every
  2.5 s) at -40, -30 and -20 dBFS. False starts: VAD starts per minute.

    .venv/bin/python -m bench.vad_sensitivity [--no-write]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import sys
import time
from pathlib import Path

import numpy as np
from loguru import logger
from pipecat.audio.vad.vad_analyzer import VADParams, VADState

from agent.fastpath.shared_silero import SharedSileroVADAnalyzer
from bench import machine
from tests.fakes.line_noise import noise
from tests.fakes.paused_speech import phrase_audio
from tests.fakes.speech import frames_of, heard_changes
from tests.fakes.twilio_caller import from_ulaw, to_ulaw

ROOT = Path(__file__).resolve().parent.parent
RESULTS_MD = ROOT / "bench" / "results" / "vad_sensitivity.md"
RATE = 8000
WORDS = {
    "en": ("stop", "yes", "no", "cancel it"),
    "de": ("stopp", "ja", "nein"),
    "fr": ("oui", "non", "arrêtez"),
    "es": ("sí", "no", "para"),
}
LEVELS_DB = (0, -10, -20)
SPEEDS = (175, 140)
NOISE_S = 12.0
GRID = [
    (0.2, 0.7, 0.6),  # Pipecat's and our default
    (0.1, 0.7, 0.6),
    (0.2, 0.5, 0.6),
    (0.2, 0.7, 0.4),
    (0.2, 0.5, 0.4),
    (0.15, 0.6, 0.5),
    (0.1, 0.5, 0.4),
]
"""(start_secs, confidence, min_volume): one knob at a time from the default, then together."""
PIPECAT = (0.2, 0.7, 0.6)
"""Pipecat's ``VADParams`` (and ours before issue 20)."""


def default() -> tuple[float, float, float]:
    """Ours: ``turn.vad_start_secs``, ``turn.vad_confidence``, ``turn.vad_min_volume``."""
    from agent.config import TurnSettings

    turn = TurnSettings()
    return turn.vad_start_secs, turn.vad_confidence, turn.vad_min_volume


def espeak(word: str, language: str, speed: int) -> np.ndarray:
    return phrase_audio(word, RATE, f"espeak:{'en-us' if language == 'en' else language}@{speed}")


def phone(pcm: np.ndarray) -> bytes:
    clipped = np.clip(np.round(pcm), -32768, 32767).astype(np.int16)
    return from_ulaw(to_ulaw(clipped.tobytes())).astype(np.int16).tobytes()


def breathing(seconds: float, seed: int = 3) -> np.ndarray:
    """Unit-RMS breaths: band-limited noise, 0.5 s in and 0.7 s out, one every 2.5 s."""
    rng = np.random.default_rng(seed)
    white = rng.standard_normal(int(seconds * RATE))
    spectrum = np.fft.rfft(white)
    freqs = np.fft.rfftfreq(len(white), 1 / RATE)
    spectrum[(freqs < 200) | (freqs > 2000)] = 0
    shaped = np.fft.irfft(spectrum, len(white))
    envelope = np.zeros(len(white))
    period, breath_in, breath_out = int(2.5 * RATE), int(0.5 * RATE), int(0.7 * RATE)
    shape = np.concatenate(
        [np.sin(np.linspace(0, np.pi, breath_in)), 0.6 * np.sin(np.linspace(0, np.pi, breath_out))]
    )
    for start in range(0, len(white) - len(shape), period):
        envelope[start : start + len(shape)] = shape
    out = shaped * envelope
    return out / float(np.sqrt(np.mean(out[envelope > 0] ** 2)))


async def starts(pcm: bytes, params: VADParams) -> int:
    """How many times the VAD reported speech starting in ``pcm`` (fed in 20 ms frames)."""
    vad = SharedSileroVADAnalyzer(params=params)
    vad.set_sample_rate(RATE)
    states = [await vad.analyze_audio(frame) for frame in frames_of(pcm, 320)]
    return sum(state == VADState.SPEAKING for _, state in heard_changes(states))


def clips() -> tuple[list[tuple[str, bytes]], list[tuple[str, bytes]]]:
    quiet = np.zeros(RATE, np.float64)
    words = []
    for language, items in WORDS.items():
        for word, speed, level in itertools.product(items, SPEEDS, LEVELS_DB):
            pcm = espeak(word, language, speed).astype(np.float64) * 10 ** (level / 20)
            words.append((language, phone(np.concatenate([quiet, pcm, quiet]))))
    noises = []
    for kind, levels in (("white", (-45, -35, -25)), ("babble", (-45, -35, -25))):
        for dbfs in levels:
            unit = noise(kind, int(NOISE_S * RATE), RATE, seed=7)  # type: ignore[arg-type]
            noises.append((f"{kind} {dbfs} dBFS", phone(unit * 32768 * 10 ** (dbfs / 20))))
    for dbfs in (-40, -30, -20):
        noises.append(
            (f"breathing {dbfs} dBFS", phone(breathing(NOISE_S) * 32768 * 10 ** (dbfs / 20)))
        )
    return words, noises


async def run() -> list[str]:
    words, noises = clips()
    header = (
        "| start_secs | confidence | min_volume | short words heard | "
        + " | ".join(language for language in WORDS)
        + " | false starts / min: "
        + " | ".join(name for name, _ in noises)
        + " |"
    )
    rows = [header, "|" + "---|" * (4 + len(WORDS) + len(noises))]
    for start_secs, confidence, min_volume in GRID:
        params = VADParams(
            start_secs=start_secs, stop_secs=0.2, confidence=confidence, min_volume=min_volume
        )
        heard = {language: [0, 0] for language in WORDS}
        for language, pcm in words:
            heard[language][0] += await starts(pcm, params) > 0
            heard[language][1] += 1
        total = sum(h for h, _ in heard.values()), sum(n for _, n in heard.values())
        false_starts = [await starts(pcm, params) / (NOISE_S / 60) for _, pcm in noises]
        setting = (start_secs, confidence, min_volume)
        mark = " (ours)" if setting == default() else " (Pipecat's)" if setting == PIPECAT else ""
        rows.append(
            f"| {start_secs}{mark} | {confidence} | {min_volume} | {total[0]} of {total[1]} | "
            + " | ".join(f"{h}/{n}" for h, n in heard.values())
            + " | "
            + " | ".join(f"{f:.0f}" for f in false_starts)
            + " |"
        )
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    logger.remove()
    load = os.getloadavg()[0]
    began = time.monotonic()
    rows = asyncio.run(run())
    report = "\n".join(
        [
            "# VAD: short words heard vs false starts on noise and breathing (phone line)",
            "",
            f"`python -m bench.vad_sensitivity`, {time.strftime('%Y-%m-%d')}, "
            f"{machine.describe()}, load average {load:.1f} at the start, "
            f"{(time.monotonic() - began) / 60:.1f} min. Words: {len(WORDS)} languages, "
            f"{sum(map(len, WORDS.values()))} words x {len(SPEEDS)} rates x {len(LEVELS_DB)} "
            "levels (0, -10, -20 dB from espeak's level), each alone on an 8 kHz μ-law line. "
            f"Noise: {NOISE_S:g} s of each, false starts per minute (one start in a clip is "
            f"{60 / NOISE_S:g} per minute; on babble it is one start the VAD never ends).",
            "",
            *rows,
        ]
    )
    print(report)
    if not args.no_write:
        RESULTS_MD.write_text(report + "\n")
        print(f"written to {RESULTS_MD}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
