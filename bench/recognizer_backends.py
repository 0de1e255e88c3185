"""The offline recognizer on CTranslate2's two CPU backends, oneDNN and Intel MKL, in one run.

CTranslate2 reads ``CT2_USE_MKL`` once, when it loads, so each backend runs in its own child
process; the children take turns, round after round, so a shared machine loads them alike.
Each child decodes the six test sentences (espeak at 16 kHz, and at 8 kHz resampled to
16 kHz as a phone call reaches the server), 2 s of low noise and a sentence cut mid-word, on
the short window and on faster-whisper's full 30 s window, and reports the numbers the short
window's trust check reads (average log-probability, no-speech probability, compression
ratio) with the decode times.

    .venv/bin/python -m bench.recognizer_backends [--rounds 3] [--variants 0,1] [--out FILE]

A variant is ``CT2_USE_MKL``'s value, optionally with an instruction set for
``CT2_FORCE_CPU_ISA`` (``0:AVX512``), to see how another CPU would decode.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RATE = 16_000


def cases() -> dict[str, tuple[str, np.ndarray]]:
    """Name → (reference text, 16 kHz float audio)."""
    from agent.local.recognizer import pcm16_to_float
    from agent.stt.audio import resample
    from tests.fakes.speech import SENTENCES, speech_at

    out: dict[str, tuple[str, np.ndarray]] = {}
    for sentence in SENTENCES:
        out[f"16k {sentence}"] = (sentence, pcm16_to_float(speech_at(sentence, RATE)))
        phone = resample(speech_at(sentence, 8_000), 8_000, RATE)
        out[f"8k {sentence}"] = (sentence, pcm16_to_float(phone))
    noise = np.random.default_rng(0).normal(0, 0.005, 2 * RATE).astype(np.float32)
    out["noise 2 s"] = ("", noise)
    cut = "turn on the lights in the kitchen"
    out["cut 0.15 s into a word"] = (cut, pcm16_to_float(speech_at(cut, RATE))[int(0.15 * RATE) :])
    return out


def child() -> None:
    """One pass over the cases on the backend this process was started with (JSON lines)."""
    from agent.local.recognizer import CPU_BACKEND, WhisperRecognizer
    from tests.fakes.speech import word_error_rate

    recognizer = WhisperRecognizer(cpu_threads=2)
    short = recognizer._short
    all_cases = cases()
    short.decode(next(iter(all_cases.values()))[1])  # warm-up
    for name, (reference, audio) in all_cases.items():
        started = time.perf_counter()
        hypothesis = short.decode(audio)
        short_s = time.perf_counter() - started
        started = time.perf_counter()
        full = recognizer._full_window(audio)
        full_s = time.perf_counter() - started
        assert hypothesis is not None
        record = {
            "backend": CPU_BACKEND,
            "case": name,
            "short_s": short_s,
            "full_s": full_s,
            "short_text": hypothesis.text,
            "avg_logprob": hypothesis.avg_logprob,
            "no_speech_prob": hypothesis.no_speech_prob,
            "compression_ratio": hypothesis.compression_ratio,
            "trusted": short.trusted(hypothesis),
            "full_text": full,
            "answer": recognizer.transcribe(audio),
            "short_wer": word_error_rate(reference, hypothesis.text) if reference else None,
            "full_wer": word_error_rate(reference, full) if reference else None,
        }
        print(json.dumps(record), flush=True)


def run_child(variant: str) -> list[dict[str, Any]]:
    mkl, _, isa = variant.partition(":")
    env = dict(os.environ, CT2_USE_MKL=mkl, HF_HUB_OFFLINE="1")
    env.pop("CT2_FORCE_CPU_ISA", None)
    if isa:
        env["CT2_FORCE_CPU_ISA"] = isa
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "bench.recognizer_backends", "--child"]
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def ms(seconds: list[float]) -> str:
    return f"{1000 * statistics.median(seconds):.0f}"


def report(results: dict[str, list[dict[str, Any]]], rounds: int) -> str:
    lines = [
        f"Median over {rounds} rounds; times in ms; 'trusted' = the short window's answer is "
        "kept without a full decode; sentences = the 12 sentence cases (6 at 16 kHz, 6 at 8 kHz).",
        "",
        "| variant | short window p50 | full window p50 | full / short | sentences trusted "
        "| avg_logprob (worst) | no_speech (max) | WER short / full | noise: short text, "
        "no_speech → answer | cut mid-word: short lp → answer |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for variant, records in results.items():
        speech = [
            r for r in records if r["short_wer"] is not None and not r["case"].startswith("cut")
        ]
        first = {r["case"]: r for r in records[: len(records) // rounds]}
        sentences = [r for r in first.values() if r in speech]
        noise, cut = first["noise 2 s"], first["cut 0.15 s into a word"]
        short_ms = [r["short_s"] for r in speech]
        full_ms = [r["full_s"] for r in speech]
        lines.append(
            f"| `CT2_USE_MKL={variant}` ({records[0]['backend']}) | {ms(short_ms)} | {ms(full_ms)} "
            f"| {statistics.median(full_ms) / statistics.median(short_ms):.1f}x "
            f"| {sum(r['trusted'] for r in sentences)}/{len(sentences)} "
            f"| {min(r['avg_logprob'] for r in sentences):.3f} "
            f"| {max(r['no_speech_prob'] for r in sentences):.2f} "
            f"| {statistics.mean(r['short_wer'] for r in sentences):.3f} / "
            f"{statistics.mean(r['full_wer'] for r in sentences):.3f} "
            f"| {noise['short_text']!r}, {noise['no_speech_prob']:.2f} → {noise['answer']!r} "
            f"| {cut['avg_logprob']:.2f} → {cut['answer']!r} |"
        )
    lines += ["", "Per case (first round):", ""]
    lines += ["| variant | case | short text | lp | no_speech | trusted | answer |"]
    lines += ["|---|---|---|---|---|---|---|"]
    for variant, records in results.items():
        for r in records[: len(records) // rounds]:
            lines.append(
                f"| {variant} | {r['case']} | {r['short_text']!r} | {r['avg_logprob']:.3f} "
                f"| {r['no_speech_prob']:.2f} | {r['trusted']} | {r['answer']!r} |"
            )
    return "\n".join(lines) + "\n"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="passes per variant (default 3)")
    parser.add_argument("--variants", default="0,1", help="CT2_USE_MKL[:ISA],… (default 0,1)")
    parser.add_argument("--out", type=Path, help="also write the tables to this file")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.child:
        child()
        return 0
    results: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for round_ in range(args.rounds):
        for variant in args.variants.split(","):
            print(f"round {round_ + 1}/{args.rounds}: CT2_USE_MKL={variant}", file=sys.stderr)
            results[variant] += run_child(variant)
    text = report(results, args.rounds)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
