"""Stock per-call Silero VAD versus the shared, batched one, side by side in one run.

For N concurrent streams (default 1, 10, 50, 100), each sends 20 ms frames in real time at
its own random phase, as calls do, through ``analyze_audio`` on one event loop (uvloop when
installed, as under uvicorn). Three variants run the same schedule:

- ``pacing``: an analyzer that does nothing - the cost of the schedule itself, subtracted;
- ``stock``: one ``SileroVADAnalyzer`` per stream (its own ONNX session and executor thread);
- ``shared``: one ``SharedSileroVADAnalyzer`` per stream over the process's one session.

Printed: process CPU (all threads) per 32 ms VAD window, net of pacing, and the ratio; the
shared batcher's queueing delay (window queued -> confidence) and mean batch size; the
latency of each ``analyze_audio`` call that completed a window, for both; and RAM per call
(RSS growth per added, warmed-up analyzer, each kind measured in a fresh child process).

    .venv/bin/python -m bench.vad [--streams 1,10,50,100] [--seconds 5] [--sample-rate 16000]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from loguru import logger
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADAnalyzer, VADState

from agent.fastpath.shared_silero import SharedSileroVADAnalyzer
from agent.vad import BatcherStats, SileroBatcher

ROOT = Path(__file__).resolve().parent.parent
FRAME_S = 0.020
WINDOW_S = 0.032


class PacingOnly(VADAnalyzer):
    """Does no analysis: measures what the frame schedule itself costs."""

    def num_frames_required(self) -> int:
        return 512

    def voice_confidence(self, buffer: bytes) -> float:
        return 0.0

    async def analyze_audio(self, buffer: bytes) -> VADState:
        return VADState.QUIET


def test_audio(sample_rate: int, seconds: float = 12.0) -> bytes:
    """Speech with pauses (espeak via tests/fakes/speech.py when available, else noise bursts)."""
    try:
        from tests.fakes.speech import SENTENCES, espeak_available, speech_at

        if not espeak_available():
            raise RuntimeError("no espeak-ng")
        parts = [b"\0\0" * int(0.7 * sample_rate) + speech_at(s, sample_rate) for s in SENTENCES]
        pcm = b"".join(parts)
    except Exception:
        rng = np.random.default_rng(0)
        bursts = rng.normal(0, 3000, int(seconds * sample_rate)) * (
            np.sin(np.arange(int(seconds * sample_rate)) / sample_rate * 2) > 0
        )
        pcm = bursts.astype(np.int16).tobytes()
    needed = int(seconds * sample_rate) * 2
    return (pcm * (needed // len(pcm) + 1))[:needed]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def paced_run(
    analyzers: list[VADAnalyzer],
    pcm: bytes,
    sample_rate: int,
    seconds: float,
    after_warm_up: Callable[[], None],
) -> tuple[float, list[float]]:
    """Every analyzer gets 20 ms frames in real time; returns (CPU seconds, window latencies)."""
    frame_bytes = int(FRAME_S * sample_rate) * 2
    window_bytes = int(WINDOW_S * sample_rate) * 2
    frames = [pcm[i : i + frame_bytes] for i in range(0, len(pcm) - frame_bytes, frame_bytes)]
    for analyzer in analyzers:  # warm up: sessions, arenas, executor threads (not timed)
        for frame in frames[:10]:
            await analyzer.analyze_audio(frame)
    latencies: list[float] = []
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.05
    count = int(seconds / FRAME_S)

    async def stream(analyzer: VADAnalyzer, phase: float, offset: int) -> None:
        pending = 10 * frame_bytes
        for index in range(count):
            delay = start + phase + index * FRAME_S - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            pending += frame_bytes
            began = time.perf_counter()
            await analyzer.analyze_audio(frames[(offset + index) % len(frames)])
            if pending >= window_bytes:
                pending -= window_bytes
                latencies.append(time.perf_counter() - began)

    rng = random.Random(len(analyzers))
    after_warm_up()
    gc.collect()
    cpu = time.process_time()
    await asyncio.gather(
        *(stream(a, rng.random() * FRAME_S, rng.randrange(len(frames))) for a in analyzers)
    )
    return time.process_time() - cpu, latencies


def make(kind: str, sample_rate: int, batcher: SileroBatcher) -> VADAnalyzer:
    analyzer: VADAnalyzer
    if kind == "stock":
        analyzer = SileroVADAnalyzer()
    elif kind == "shared":
        analyzer = SharedSileroVADAnalyzer(batcher=batcher)
    else:
        analyzer = PacingOnly()
    analyzer.set_sample_rate(sample_rate)
    return analyzer


def restart_counting(batcher: SileroBatcher, delays: list[float]) -> None:
    """Forget the warm-up: count the batcher's delays and batches from here on."""
    delays.clear()
    batcher.stats = BatcherStats()


def ms(values: list[float], *quantiles: float) -> str:
    return " / ".join(f"{percentile(values, q) * 1e3:.2f}" for q in quantiles)


async def cpu_table(args: argparse.Namespace) -> None:
    pcm = test_audio(args.sample_rate)
    print(f"## CPU per 32 ms VAD window ({args.sample_rate} Hz, {args.seconds:g} s per run)\n")
    print(
        "| streams | stock µs/window | shared µs/window | stock / shared "
        "| shared CPU-s per call-s | shared batch mean | queue delay p50 / p95 / max ms "
        "| analyze latency stock p50 / p95 ms | shared p50 / p95 ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for n in args.streams:
        delays: list[float] = []
        batcher = SileroBatcher(max_delay_s=args.max_delay_ms / 1000, on_delay=delays.append)
        restart = functools.partial(restart_counting, batcher, delays)
        results: dict[str, tuple[float, list[float]]] = {}
        for kind in ("pacing", "stock", "shared"):
            analyzers = [make(kind, args.sample_rate, batcher) for _ in range(n)]
            results[kind] = await paced_run(analyzers, pcm, args.sample_rate, args.seconds, restart)
            for analyzer in analyzers:
                await analyzer.cleanup()
            del analyzers
            gc.collect()
        windows = n * args.seconds / WINDOW_S
        pacing = results["pacing"][0]
        net = {k: max(results[k][0] - pacing, 0.0) / windows for k in ("stock", "shared")}
        batch_mean = batcher.stats.windows / max(batcher.stats.batches, 1)
        print(
            f"| {n} | {net['stock'] * 1e6:.0f} | {net['shared'] * 1e6:.0f} "
            f"| {net['stock'] / max(net['shared'], 1e-12):.2f} "
            f"| {net['shared'] / WINDOW_S:.4f} | {batch_mean:.1f} "
            f"| {ms(delays, 0.5, 0.95, 1.0)} "
            f"| {ms(results['stock'][1], 0.5, 0.95)} | {ms(results['shared'][1], 0.5, 0.95)} |",
            flush=True,
        )
    print(
        f"\nµs/window is process CPU (all threads) net of the pacing-only run; batcher window "
        f"max_delay {args.max_delay_ms:g} ms. A call-second holds {1 / WINDOW_S:.2f} windows."
    )


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def rss_probe(kind: str, count: int, sample_rate: int) -> None:
    """Child process: RSS growth per analyzer, each having analyzed a second of audio."""
    pcm = test_audio(sample_rate, seconds=1.0)
    batcher = SileroBatcher()
    first = make(kind, sample_rate, batcher)
    await first.analyze_audio(pcm)  # libraries, the shared session, first arenas
    gc.collect()
    before = rss_bytes()
    keep = [make(kind, sample_rate, batcher) for _ in range(count)]
    await asyncio.gather(*(a.analyze_audio(pcm) for a in keep))
    gc.collect()
    print((rss_bytes() - before) / count)


def rss_table(args: argparse.Namespace) -> None:
    print("\n## RAM per call (RSS growth per added analyzer, fresh process each)\n")
    print("| analyzer | analyzers added | RSS per call |\n|---|---|---|")
    per_call: dict[str, float] = {}
    for kind, count in (("stock", 20), ("shared", 500)):
        command = [sys.executable, "-m", "bench.vad", "--rss-probe", kind, "--count", str(count)]
        command += ["--sample-rate", str(args.sample_rate)]
        out = subprocess.run(
            command, capture_output=True, text=True, check=True, timeout=600, cwd=ROOT
        )
        per_call[kind] = float(out.stdout.strip().splitlines()[-1])
        print(f"| {kind} | {count} | {per_call[kind] / 1024:.1f} kB |")
    print(f"\nstock / shared: {per_call['stock'] / max(per_call['shared'], 1):.0f}x")


def run(main: Callable[[], object]) -> None:
    try:
        import uvloop

        uvloop.run(main())  # type: ignore[arg-type]
    except ImportError:
        asyncio.run(main())  # type: ignore[arg-type]


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--streams", default="1,10,50,100", type=lambda s: [int(x) for x in s.split(",")]
    )
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--sample-rate", type=int, default=16000, choices=(8000, 16000))
    parser.add_argument("--max-delay-ms", type=float, default=20.0)
    parser.add_argument("--rss-probe", choices=("stock", "shared"), help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=20, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    logger.remove()
    if args.rss_probe:
        run(lambda: rss_probe(args.rss_probe, args.count, args.sample_rate))
        return 0
    run(lambda: cpu_table(args))
    rss_table(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
