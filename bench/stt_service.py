"""What the Voxtral STT service itself costs, against a peer that answers instantly.

Measured in one run, each beside its baseline:

1. Final-transcript latency: VAD stop → final ``TranscriptionFrame`` through the service (in
   a real Pipecat pipeline), versus a bare ``websockets`` client sending the final commit and
   reading ``transcription.done`` over the same kind of connection. Ratio printed.
2. CPU per 20 ms audio frame: the service (pipeline + conversion + framing + send) versus the
   bare client sending the same appends; µs per frame and the streams per core it implies,
   for each ``chunk_ms`` choice (the default is picked from this).
3. Append framing: our concatenating encoder versus ``json.dumps``.

The peer (the test fakes' strict realtime peer: ``done`` at once after one empty delta; run by
``bench/peers.py``) is a separate process so its CPU is not counted.

    .venv/bin/python -m bench.stt_service [--turns 40] [--frames 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import statistics
import time

from loguru import logger
from websockets.asyncio.client import ClientConnection, connect

from agent.stt.channels import websocket_channel_factory
from agent.stt.client import RealtimeTranscriber
from agent.stt.params import RealtimeSTTParams
from agent.stt.protocol import Commit, SessionUpdate, encode_pcm_append
from agent.stt.service import VoxtralRealtimeSTTService
from bench import peers

MODEL = "bench-model"
FRAME = b"\x10\x00" * 320  # 20 ms at 16 kHz


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def until_done(ws: ClientConnection) -> None:
    """Read past the deltas (vLLM sends an empty one before ``done``) to ``done``."""
    while '"transcription.done"' not in await ws.recv():
        pass


async def bare_final_latency(url: str, turns: int) -> list[float]:
    samples = []
    async with connect(url, compression=None) as ws:
        await ws.recv()
        await ws.send(SessionUpdate(MODEL).to_json())
        for _ in range(turns):
            await ws.send(Commit().to_json())
            await ws.send(encode_pcm_append(FRAME * 10))
            started = time.perf_counter()
            await ws.send(Commit(final=True).to_json())
            await until_done(ws)
            samples.append(time.perf_counter() - started)
    return samples


def make_service(url: str, chunk_ms: int = 20) -> VoxtralRealtimeSTTService:
    return VoxtralRealtimeSTTService(
        channel_factory=websocket_channel_factory(url),
        settings=VoxtralRealtimeSTTService.Settings(model=MODEL),
        params=RealtimeSTTParams(preroll_s=0.0, chunk_ms=chunk_ms),
    )


async def service_final_latency(url: str, turns: int) -> list[float]:
    samples = []
    async with RealtimeTranscriber(make_service(url), sample_rate=16_000) as transcriber:
        await transcriber.wait_connected(timeout=10)
        for _ in range(turns):
            await transcriber.start_turn()
            await transcriber.feed(FRAME * 10)
            await asyncio.sleep(0.01)
            started = time.perf_counter()
            await transcriber.end_turn()
            while (await transcriber.next_event(timeout=5)).kind != "final":
                pass
            samples.append(time.perf_counter() - started)
    return samples


async def bare_cpu_per_frame(url: str, frames: int) -> float:
    async with connect(url, compression=None) as ws:
        await ws.recv()
        await ws.send(SessionUpdate(MODEL).to_json())
        await ws.send(Commit().to_json())
        started = time.process_time()
        for index in range(frames):
            await ws.send(encode_pcm_append(FRAME))
            if index % 50 == 49:
                await asyncio.sleep(0)
        await ws.send(Commit(final=True).to_json())
        await until_done(ws)
        return (time.process_time() - started) / frames


async def service_cpu_per_frame(url: str, frames: int, chunk_ms: int) -> float:
    async with RealtimeTranscriber(make_service(url, chunk_ms), sample_rate=16_000) as transcriber:
        await transcriber.wait_connected(timeout=10)
        await transcriber.start_turn()
        started = time.process_time()
        await transcriber.feed(FRAME * frames)
        await transcriber.end_turn()
        while (await transcriber.next_event(timeout=30)).kind != "final":
            pass
        return (time.process_time() - started) / frames


def framing_ratio(rounds: int = 20_000) -> tuple[float, float]:
    audio = base64.b64encode(FRAME).decode()
    started = time.perf_counter()
    for _ in range(rounds):
        json.dumps({"type": "input_audio_buffer.append", "audio": audio})
    dumps = (time.perf_counter() - started) / rounds
    started = time.perf_counter()
    for _ in range(rounds):
        encode_pcm_append(FRAME)  # includes the base64 step json.dumps was spared
    ours = (time.perf_counter() - started) / rounds
    return dumps, ours


async def main(args: argparse.Namespace, url: str) -> None:
    logger.remove()
    await bare_final_latency(url, 5)  # warm up both paths
    await service_final_latency(url, 5)
    bare = await bare_final_latency(url, args.turns)
    ours = await service_final_latency(url, args.turns)
    print("## Final transcript latency (instant peer)\n")
    print("| path | p50 ms | p95 ms |\n|---|---|---|")
    for name, values in (("bare websockets client", bare), ("VoxtralRealtimeSTTService", ours)):
        print(
            f"| {name} | {statistics.median(values) * 1e3:.2f} | "
            f"{percentile(values, 0.95) * 1e3:.2f} |"
        )
    print(f"\nratio service/bare (p50): {statistics.median(ours) / statistics.median(bare):.2f}\n")

    bare_cpu = await bare_cpu_per_frame(url, args.frames)
    print("## CPU per 20 ms audio frame\n")
    print("| path | µs/frame | streams per core | ratio to bare |\n|---|---|---|---|")
    print(f"| bare websockets client | {bare_cpu * 1e6:.1f} | {0.02 / bare_cpu:.0f} | 1.00 |")
    for chunk_ms in (20, 40, 100):
        cpu = await service_cpu_per_frame(url, args.frames, chunk_ms)
        print(
            f"| service, chunk_ms={chunk_ms} | {cpu * 1e6:.1f} | {0.02 / cpu:.0f} | "
            f"{cpu / bare_cpu:.2f} |"
        )
    dumps, concat = framing_ratio()
    print("\n## Append framing\n")
    print(
        f"json.dumps (base64 precomputed): {dumps * 1e6:.2f} µs; "
        f"encode_pcm_append (base64 included): {concat * 1e6:.2f} µs; "
        f"ratio {concat / dumps:.2f}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=40, help="turns per latency measurement")
    parser.add_argument("--frames", type=int, default=3000, help="20 ms frames per CPU figure")
    arguments = parser.parse_args()
    with peers.running(deltas="none") as peer:
        asyncio.run(main(arguments, peer.realtime_url))
