"""How long a caller on a noisy line waits for the offline recognizer's final, and what it
writes, with and without faster-whisper's temperature fallback. Offline: the product's
recognizer, no server.

The offline recognizer decodes a turn on a short window and keeps the text unless it looks
doubtful (:meth:`agent.local.recognizer._ShortWindowDecoder.trusted`); a doubtful turn goes
to faster-whisper's full 30 s window. There faster-whisper retries a doubtful decode at
temperatures 0.2 to 1.0, up to five more decodes, which on a noisy line is most of them. This
bench puts every English phrase of the extended turn-taking set (``tests.fakes.paused_speech``)
on the lines ``bench/turn_taking.py`` plays (clean, white and babble noise at 20 and 10 dB,
its first draw; 8 kHz μ-law, resampled to 16 kHz as the server does), cuts each phrase out as
a VAD segment would be (0.3 s of the line before it, 0.2 s after), and for each phrase the
short window doubts times, in one run, alternating which goes first:

- the product's full path (:meth:`agent.local.recognizer.WhisperRecognizer._full_window`:
  greedy, one decode), and
- faster-whisper's default (the same call with its temperature fallback), the baseline;

with the word error against the phrase for each (digits as written count as errors for both).

    .venv/bin/python -m bench.noisy_finals [--no-write]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "noisy_finals.md"
LINES: tuple[tuple[str, float | None], ...] = (
    ("clean", None),
    ("white", 20),
    ("white", 10),
    ("babble", 20),
    ("babble", 10),
)
BEFORE_S, AFTER_S = 0.3, 0.2
"""The line kept around a phrase: about what the VAD's pre-roll and its stop wait add."""
FALLBACK = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
"""faster-whisper's default temperatures."""


def segments(kind: str, snr_db: float | None) -> list[tuple[str, np.ndarray]]:
    """Every English phrase of the extended set on this line, as 16 kHz float audio."""
    from agent.local.recognizer import pcm16_to_float
    from agent.stt.audio import resample
    from tests.fakes.line_noise import line
    from tests.fakes.paused_speech import extended
    from tests.fakes.twilio_caller import from_ulaw, to_ulaw

    out = []
    for utterance in extended():
        if utterance.language != "en":
            continue
        pcm, _ = utterance.audio(8000)
        lead = int(0.6 * 8000)
        if snr_db is None:
            audio = np.concatenate([np.zeros(lead, np.int16), np.frombuffer(pcm, np.int16)])
        else:
            parts = line(pcm, 8000, kind, snr_db, before_s=0.6, after_s=1.0)  # type: ignore[arg-type]
            audio = np.frombuffer(b"".join(parts), np.int16)
        phone = from_ulaw(to_ulaw(audio.tobytes())).astype(np.int16).tobytes()
        samples = np.frombuffer(phone, np.int16)
        for phrase, (start_s, end_s) in zip(
            utterance.phrases, utterance.phrase_spans_s(8000), strict=True
        ):
            a = lead + int((start_s - BEFORE_S) * 8000)
            b = min(len(samples), lead + int((end_s + AFTER_S) * 8000))
            cut = resample(samples[max(0, a) : b].tobytes(), 8000, 16_000)
            out.append((phrase, pcm16_to_float(cut)))
    return out


def decode_with_fallback(recognizer: Any, audio: np.ndarray) -> str:
    """faster-whisper's full path as it comes: the product's call, with the fallback."""
    from agent.local.recognizer import FULL_WINDOW_OPTIONS

    options = {**FULL_WINDOW_OPTIONS, "temperature": FALLBACK}
    segments_, _ = recognizer._model.transcribe(audio, **options)
    return "".join(segment.text for segment in segments_).strip()


def timed(decode: Callable[[np.ndarray], str], audio: np.ndarray) -> tuple[str, float]:
    started = time.perf_counter()
    text = decode(audio)
    return text, time.perf_counter() - started


def measure() -> tuple[list[str], list[str]]:
    """The summary rows and the per-phrase rows."""
    from agent.local.recognizer import WhisperRecognizer
    from tests.fakes.speech import word_error_rate

    recognizer = WhisperRecognizer(cpu_threads=2)
    short = recognizer._short
    summary, detail = [], []
    for kind, snr_db in LINES:
        name = kind if snr_db is None else f"{kind} {snr_db:g} dB"
        doubted = 0
        greedy_s, fallback_s, greedy_wer, fallback_wer = [], [], [], []
        cases = segments(kind, snr_db)
        for index, (phrase, audio) in enumerate(cases):
            hypothesis = short.decode(audio)
            if hypothesis is None or short.trusted(hypothesis):
                continue
            doubted += 1
            runs: list[tuple[str, Callable[[np.ndarray], str]]] = [
                ("greedy", recognizer._full_window),
                ("fallback", lambda audio: decode_with_fallback(recognizer, audio)),
            ]
            if index % 2:  # which goes first alternates
                runs.reverse()
            texts = {label: timed(decode, audio) for label, decode in runs}
            (g_text, g_s), (f_text, f_s) = texts["greedy"], texts["fallback"]
            greedy_s.append(g_s)
            fallback_s.append(f_s)
            greedy_wer.append(word_error_rate(phrase, g_text))
            fallback_wer.append(word_error_rate(phrase, f_text))
            detail.append(
                f"| {name} | {phrase} | {hypothesis.text!r} ({hypothesis.avg_logprob:.2f}) "
                f"| {f_text!r} | {1000 * f_s:.0f} | {g_text!r} | {1000 * g_s:.0f} |"
            )
        if not doubted:
            summary.append(f"| {name} | {len(cases)} | 0 | - | - | - | - |")
            continue
        summary.append(
            f"| {name} | {len(cases)} | {doubted} "
            f"| {ms(fallback_s)} / {1000 * max(fallback_s):.0f} "
            f"| {ms(greedy_s)} / {1000 * max(greedy_s):.0f} "
            f"| {statistics.median(greedy_s) / statistics.median(fallback_s):.2f}x "
            f"| {statistics.mean(fallback_wer):.2f} / {statistics.mean(greedy_wer):.2f} |"
        )
        print(summary[-1], flush=True)
    return summary, detail


def ms(seconds: list[float]) -> str:
    return f"{1000 * statistics.median(seconds):.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    from bench.machine import describe

    started = time.time()
    summary, detail = measure()
    report = [
        "## The final on a noisy line: faster-whisper's temperature fallback against one greedy "
        "decode (`bench/noisy_finals.py`)",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))}, {describe()}, "
        f"{time.time() - started:.0f} s. Every English phrase of the extended set, cut out of "
        f"the line with {BEFORE_S} s before and {AFTER_S} s after it; a phrase goes to the full "
        "window when the short window doubts it. Times are the full path's alone (the short "
        "window's decode comes before either); word error against the phrase.",
        "",
        "| line | phrases | doubted by the short window | with the fallback: p50 / max ms "
        "| greedy (the product): p50 / max ms | greedy / fallback p50 "
        "| word error, fallback / greedy |",
        "|---|---|---|---|---|---|---|",
        *summary,
        "",
        "Per doubted phrase:",
        "",
        "| line | phrase | short window (avg log-prob) | with the fallback | ms | greedy | ms |",
        "|---|---|---|---|---|---|---|",
        *detail,
        "",
    ]
    text = "\n".join(report)
    print(text)
    if not args.no_write:
        RESULTS.write_text(text)
        print(f"written to {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
