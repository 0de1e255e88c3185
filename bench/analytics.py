"""Call analytics: per-track STT latency and WER on real speech through both-tracks streams,
and how many concurrent both-tracks streams one core holds.

1. **Real speech** (the offline ASR server, the server in this process): for each test
   sentence pair, a Twilio both-tracks stream in which the caller and the agent speak one
   after the other (``sequential``, the baseline: one track speaking at a time) and one in
   which they speak at once (``overlapping``). Per track: WER against the sentence, and the
   delay from the end of the speech (its last frame sent) to the final utterance arriving on
   the live view's event stream (``/analytics/api/calls/{id}/live``): VAD stop wait (0.5 s)
   plus the STT.
2. **Capacity** (the server in a child pinned to core 0; the instant realtime peer of
   ``bench/peers.py`` and the load client on core 1): N streams, each carrying both tracks at
   real-time pace, the speakers taking turns with espeak sentences (1-2 s pauses, random
   lead-in). Server CPU over a window, and p50/p95 end of speech → final utterance event.
   Each N runs twice, in the same run: the server's track path (``gated``: the VAD inline,
   only speech down the STT's pipeline) and the baseline it replaced (``pipeline``: a
   VAD stage and a speech clock in each track's STT pipeline, every frame through it,
   :class:`PipelineTrack` below), so the ratio between them holds whatever else the machine
   does.

    .venv/bin/python -m bench.analytics [--steps 1,25,50,100] [--window 20] [--skip-speech]
        [--tracks pipeline,gated]

Results: bench/results/analytics.md. The machine may be shared: the report records ``uptime``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import websockets

from bench import peers
from bench.machine import describe
from tests.fakes.both_tracks_caller import BothTracksStream, ring, timeline
from tests.fakes.serving import free_port
from tests.fakes.speech import SENTENCES, word_error_rate
from tests.fakes.twilio_caller import FRAME_S, TOKEN, ulaw_speech

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "analytics.md"
OPERATOR = "bench-operator"
SERVER_CORE, CLIENT_CORE = 0, 1
WATCHED = 5
"""Streams whose live view the capacity step watches (their finals give its latency): an
operator watches a few calls, not every one, and each watcher costs the client too."""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def analytics_settings(stt_url: str, stt_model: str, **server: Any) -> Any:
    from agent.config import load_settings

    settings = load_settings(
        "default",
        overrides={
            "server": {"start_local_services": False, "api_token": OPERATOR, **server},
            "stt": {"url": stt_url, "model": stt_model},
            "analytics": {"enabled": True, "dial": "+15550100"},
        },
    )
    settings.twilio.auth_token = TOKEN
    return settings


@dataclass
class Heard:
    speaker: str
    text: str
    at: float  # monotonic arrival of the final utterance


@dataclass
class Watched:
    heard: list[Heard] = field(default_factory=list)
    max_late_s: float = 0.0
    """How late the caller's sending fell behind its 20 ms schedule at worst."""


async def watch(base_url: str, call_id: str, into: Watched) -> None:
    """Read a call's live events until it ends; keep each final utterance and its arrival."""
    path = f"{base_url}/analytics/api/calls/{call_id}/live"
    async with (
        httpx.AsyncClient(timeout=None) as http,
        http.stream("GET", path, headers={"Authorization": f"Bearer {OPERATOR}"}) as response,
    ):
        async for line in response.aiter_lines():
            if not line.strip():
                continue
            event = json.loads(line)
            if event["type"] == "utterance":
                into.heard.append(Heard(event["speaker"], event["text"], time.monotonic()))


async def one_call(
    base_url: str,
    call_sid: str,
    parts: list[tuple[float, str, bytes]],
    total_s: float,
    *,
    watched_live: bool = True,
) -> tuple[dict[str, list[float]], Watched]:
    """Play one forked call; returns each track's speech end times (monotonic) and what the
    live view heard (nothing unless ``watched_live``)."""
    forked = await ring(base_url, "twilio", call_sid)
    tracks = timeline(parts, total_s=total_s)  # type: ignore[arg-type]
    watched = Watched()
    async with websockets.connect(forked.url) as ws:
        stream = BothTracksStream(ws, "twilio", call_sid)
        await stream.start(forked.parameters)
        watching = None
        if watched_live:
            call_id = await _call_id(base_url, call_sid)
            watching = asyncio.create_task(watch(base_url, call_id, watched))
        await stream.play(tracks)
        await stream.stop()
        if watching is not None:
            await asyncio.wait_for(watching, 120)
        await stream.close()
    ends: dict[str, list[float]] = defaultdict(list)
    for start_s, track, ulaw in parts:  # when the speech's last frame was really sent
        speaker = "caller" if track == "inbound" else "agent"
        last = round(start_s / FRAME_S) + -(-len(ulaw) // 160) - 1
        ends[speaker].append(stream.sent_at[min(last, len(stream.sent_at) - 1)])
    watched.max_late_s = stream.max_late_s
    return ends, watched


async def _call_id(base_url: str, call_sid: str) -> str:
    async with httpx.AsyncClient() as http:
        for _ in range(200):
            listed = await http.get(
                f"{base_url}/analytics/api/calls", headers={"Authorization": f"Bearer {OPERATOR}"}
            )
            for call in listed.json()["calls"]:
                if call["attributes"].get("call_sid") == call_sid:
                    return str(call["id"])
            await asyncio.sleep(0.02)
    raise RuntimeError(f"call {call_sid} never appeared in /analytics/api/calls")


def matched(speech_ends: list[float], arrivals: list[float]) -> list[tuple[float, float | None]]:
    """Each end of speech with the first final that arrived after it and before the speaker's
    next end of speech (``None``: no final for it; a final the VAD split off is skipped)."""
    ordered = sorted(speech_ends)
    out: list[tuple[float, float | None]] = []
    for k, end in enumerate(ordered):
        next_end = ordered[k + 1] if k + 1 < len(ordered) else float("inf")
        arrived = next((at for at in sorted(arrivals) if end < at <= next_end), None)
        out.append((end, arrived))
    return out


def latencies(ends: dict[str, list[float]], watched: Watched) -> dict[str, list[float]]:
    """Per speaker: each final's arrival minus the end of the speech it belongs to."""
    out: dict[str, list[float]] = defaultdict(list)
    for speaker, speech_ends in ends.items():
        arrivals = [h.at for h in watched.heard if h.speaker == speaker]
        for end, at in matched(speech_ends, arrivals):
            if at is not None:
                out[speaker].append(at - end)
    return out


# ----------------------------------------------------------------------------- real speech


async def real_speech(lines: list[str]) -> None:
    from agent.config import ASRServerSettings
    from agent.local.asr_server import build_app
    from agent.server import create_app
    from tests.conftest import ASR_MODEL_NAME, wait_until_ready
    from tests.fakes.serving import BackgroundServer

    asr = BackgroundServer(
        build_app(ASRServerSettings(host="127.0.0.1", port=0, served_model_name=ASR_MODEL_NAME))
    )
    asr_port = asr.start()
    try:
        wait_until_ready(f"http://127.0.0.1:{asr_port}")
        settings = analytics_settings(f"ws://127.0.0.1:{asr_port}/v1/realtime", ASR_MODEL_NAME)
        server = BackgroundServer(create_app(settings))
        port = server.start()
        base = f"http://127.0.0.1:{port}"
        try:
            results: dict[str, dict[str, list[float]]] = {}
            for mode in ("sequential", "overlapping"):
                wer: dict[str, list[float]] = defaultdict(list)
                delay: dict[str, list[float]] = defaultdict(list)
                for index, caller_says in enumerate(SENTENCES):
                    agent_says = SENTENCES[(index + 1) % len(SENTENCES)]
                    caller = ulaw_speech(caller_says, trim=True)
                    agent = ulaw_speech(agent_says, trim=True)
                    agent_at = 0.4 if mode == "overlapping" else 0.4 + len(caller) / 8000 + 1.2
                    total = agent_at + len(agent) / 8000 + 2.0
                    parts = [(0.4, "inbound", caller), (agent_at, "outbound", agent)]
                    ends, watched = await one_call(base, f"CA-{mode}-{index}", parts, total)
                    said = {"caller": caller_says, "agent": agent_says}
                    for speaker, sentence in said.items():
                        text = " ".join(h.text for h in watched.heard if h.speaker == speaker)
                        wer[speaker].append(word_error_rate(sentence, text))
                    for speaker, values in latencies(ends, watched).items():
                        delay[speaker] += values
                results[mode] = {
                    **{f"wer_{s}": v for s, v in wer.items()},
                    **{f"delay_{s}": v for s, v in delay.items()},
                }
            lines += [
                "### Real speech through both-tracks streams (offline ASR server)",
                "",
                f"{len(SENTENCES)} espeak sentence pairs (8 kHz μ-law), caller on the inbound "
                "track, agent on the outbound; `sequential`: the agent speaks 1.2 s after the "
                "caller ends (one track speaking at a time: the baseline), `overlapping`: both "
                "speak at once. Delay = end of the speech → the final utterance on the live "
                "view's event stream (includes the VAD's 0.5 s stop wait).",
                "",
                "| mode | speaker | WER | finals | delay p50 ms | delay p95 ms |",
                "|---|---|---|---|---|---|",
            ]
            for mode, values in results.items():
                for speaker in ("caller", "agent"):
                    w = values.get(f"wer_{speaker}", [])
                    d = values.get(f"delay_{speaker}", [])
                    lines.append(
                        f"| {mode} | {speaker} | {statistics.mean(w):.3f} | {len(d)} | "
                        f"{1000 * statistics.median(d):.0f} | {1000 * percentile(d, 0.95):.0f} |"
                    )
            lines.append("")
        finally:
            server.stop()
    finally:
        asr.stop()


# ----------------------------------------------------------------------------- capacity


class PipelineTrack:
    """The baseline: the track path before the speech gate (as of commit 2ae49b1). The
    :class:`~agent.stt.client.RealtimeTranscriber` runs the VAD stage (``VADProcessor``) and
    its speech clock in each track's STT pipeline, so every 60 ms frame crosses them and the
    service, speech or silence."""

    def __init__(self, settings: Any, *, sample_rate: int, on_event: Callable[[Any], None]) -> None:
        from pipecat.audio.vad.vad_analyzer import VADParams

        from agent.fastpath.shared_silero import SharedSileroVADAnalyzer
        from agent.stt.client import RealtimeTranscriber
        from pipelines.analytics import VAD_STOP_SECS, final_wait_s
        from pipelines.services import stt_service

        self._transcriber = RealtimeTranscriber(
            stt_service(settings),
            sample_rate=sample_rate,
            vad_analyzer=SharedSileroVADAnalyzer(params=VADParams(stop_secs=VAD_STOP_SECS)),
            report_speech=True,
        )
        self._on_event = on_event
        self._final_wait_s = final_wait_s(settings)
        self._relay: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._transcriber.__aenter__()
        self._relay = asyncio.create_task(self._relay_events())

    async def feed(self, pcm: bytes) -> None:
        await self._transcriber.feed_frame(pcm)

    async def close(self, *, finish: bool) -> None:
        if finish:
            with contextlib.suppress(TimeoutError):
                await self._transcriber.finish(timeout=self._final_wait_s)
        await self._transcriber.__aexit__(None, None, None)
        if self._relay is not None:
            while not self._transcriber.events.empty():
                self._on_event(self._transcriber.events.get_nowait())
            self._relay.cancel()
            await asyncio.gather(self._relay, return_exceptions=True)

    async def _relay_events(self) -> None:
        while True:
            self._on_event(await self._transcriber.events.get())


def serve(port: int, stt_url: str, track: str) -> None:
    """The server child: pinned to its core, analytics on, the instant peer as its STT;
    ``track``: ``gated`` (the server's own) or ``pipeline`` (the baseline)."""
    import uvicorn
    from loguru import logger

    import agent.server
    from agent.server import create_app

    os.sched_setaffinity(0, {SERVER_CORE})
    logger.remove()
    logger.add(sys.stderr, level=os.environ.get("BENCH_SERVER_LOG", "WARNING"))
    if track == "pipeline":

        def baseline(stt: Any) -> Callable[[int, Callable[[Any], None]], PipelineTrack]:
            def make(rate: int, on_event: Callable[[Any], None]) -> PipelineTrack:
                return PipelineTrack(stt, sample_rate=rate, on_event=on_event)

            return make

        agent.server.track_transcription = baseline  # type: ignore[assignment]
    elif track != "gated":
        raise SystemExit(f"--serve: unknown track path {track!r} (gated or pipeline)")
    settings = analytics_settings(stt_url, "bench-model", max_calls=10_000)
    uvicorn.run(create_app(settings), host="127.0.0.1", port=port, log_level="warning")


@dataclass
class Step:
    n: int
    track: str = "gated"
    cpu_util: float = 0.0
    finals: int = 0
    expected: int = 0
    p50_s: float = float("nan")
    p95_s: float = float("nan")
    client_late_s: float = 0.0
    failed: int = 0
    """Streams that could not start or broke (e.g. the webhook timed out)."""
    cpu_per_stream_s: float = 0.0
    """Server CPU over the whole step (set-up, every stream's audio to its end, teardown) per
    second of stream: what a stream costs even when the server's core is shared and its
    work falls behind (then the window's CPU undercounts)."""


async def capacity_step(n: int, window_s: float, at: peers.Peers, track: str) -> Step:
    from bench.capacity import cpu_seconds

    port = free_port()
    argv = [sys.executable, "-m", "bench.analytics", "--serve", str(port), at.realtime_url, track]
    proc = subprocess.Popen(argv, cwd=ROOT)  # noqa: ASYNC220 (a spawn between measurements)
    base = f"http://127.0.0.1:{port}"
    step = Step(n, track)
    try:
        await asyncio.to_thread(peers.wait_http, f"{base}/healthz", proc)
        speech = [ulaw_speech(s, trim=True) for s in SENTENCES]
        cpu_start = cpu_seconds(proc.pid)
        rng = random.Random(n)
        ramp_s = min(10.0, 0.1 * n)
        total = ramp_s + window_s + 8.0
        calls = []
        for _ in range(n):
            parts: list[tuple[float, str, bytes]] = []
            t = rng.uniform(0.2, 3.0)
            track = "inbound"
            while True:
                ulaw = speech[rng.randrange(len(speech))]
                if t + len(ulaw) / 8000 > total - ramp_s - 2.0:
                    break
                parts.append((t, track, ulaw))
                t += len(ulaw) / 8000 + rng.uniform(1.0, 2.0)
                track = "outbound" if track == "inbound" else "inbound"
            calls.append(parts)

        async def run_call(i: int, parts: list[tuple[float, str, bytes]]) -> Any:
            await asyncio.sleep(ramp_s * i / n)
            sid = f"CA-load-{n}-{i}"
            return await one_call(base, sid, parts, total - ramp_s, watched_live=i < WATCHED)

        tasks = [asyncio.create_task(run_call(i, p)) for i, p in enumerate(calls)]
        window_from = time.monotonic() + ramp_s + 3.0
        await asyncio.sleep(window_from - time.monotonic())
        cpu0, wall0 = cpu_seconds(proc.pid), time.monotonic()
        await asyncio.sleep(window_s)
        cpu1, wall1 = cpu_seconds(proc.pid), time.monotonic()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        outcomes = [r for r in results if not isinstance(r, BaseException)]
        step.failed = len(results) - len(outcomes)
        await asyncio.sleep(1.0)  # the last streams' teardown
        step.cpu_per_stream_s = (cpu_seconds(proc.pid) - cpu_start) / (n * (total - ramp_s))
        step.cpu_util = (cpu1 - cpu0) / (wall1 - wall0)
        delays: list[float] = []
        for index, (ends, watched) in enumerate(outcomes):
            step.client_late_s = max(step.client_late_s, watched.max_late_s)
            if index >= WATCHED:
                continue
            for speaker, speech_ends in ends.items():
                arrivals = [h.at for h in watched.heard if h.speaker == speaker]
                for end, arrived in matched(speech_ends, arrivals):
                    if wall0 <= end <= wall1:
                        step.expected += 1
                        if arrived is not None:
                            delays.append(arrived - end)
        step.finals = len(delays)
        step.p50_s = statistics.median(delays) if delays else float("nan")
        step.p95_s = percentile(delays, 0.95)
        return step
    finally:
        peers.stop_process(proc)


async def capacity(lines: list[str], steps: list[int], window_s: float, tracks: list[str]) -> None:
    os.sched_setaffinity(0, {CLIENT_CORE})
    results: dict[str, list[Step]] = {track: [] for track in tracks}
    with peers.running(deltas="steps", delta_text="word ", core=CLIENT_CORE) as at:
        for n in steps:
            for track in [t for t in tracks if not _done(results[t])]:
                step = await capacity_step(n, window_s, at, track)
                results[track].append(step)
                print(
                    f"N={n} {track}: cpu {step.cpu_util:.0%}, "
                    f"{1 / step.cpu_per_stream_s:.0f} streams/core, p95 {step.p95_s * 1000:.0f} ms",
                    flush=True,
                )
            if all(_done(results[t]) for t in tracks):
                break
    lines += [
        "### Concurrent both-tracks streams on one core (instant STT peer)",
        "",
        f"Server pinned to core {SERVER_CORE}; the instant realtime peer (`bench/peers.py`, "
        f"`transcription.done` at once) and the load client on core {CLIENT_CORE}. Each stream "
        "carries both tracks at real-time pace (two 20 ms μ-law messages per 20 ms), the "
        "speakers taking turns with espeak sentences and 1-2 s pauses; each track is its own "
        f"VAD + STT session. Window {window_s:.0f} s after the ramp. Delay = end of a speech "
        f"→ its final utterance on the live event stream (VAD stop wait 0.5 s included), on the "
        f"first {WATCHED} streams, whose live view is watched. `client late`: how far the load "
        "client's sending fell behind its 20 ms schedule at worst (its core is shared with the "
        "peer). Track path `gated`: the server's (VAD inline, only speech down the STT "
        "pipeline); `pipeline`: the baseline it replaced (a VAD stage in each track's STT "
        "pipeline), each N run with both, one after the other. A path stops at the first N "
        "whose window saturates its core (CPU > 95 %) or loses a stream.",
        "",
        "| track path | streams | server CPU (window) | CPU-s per stream-s (window) | "
        "CPU-s per stream-s (whole step) | streams/core (whole step) | finals | "
        "p50 ms | p95 ms | p95 vs N=1 | client late ms | failed streams |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for track in tracks:
        base = results[track][0]
        for step in results[track]:
            per = step.cpu_util / step.n
            lines.append(
                f"| {track} | {step.n} | {step.cpu_util:.0%} | {per:.4f} | "
                f"{step.cpu_per_stream_s:.4f} | {1 / step.cpu_per_stream_s:.0f} | "
                f"{step.finals}/{step.expected} | {1000 * step.p50_s:.0f} | "
                f"{1000 * step.p95_s:.0f} | {step.p95_s / base.p95_s:.2f} | "
                f"{1000 * step.client_late_s:.0f} | {step.failed} |"
            )
    if len(tracks) == 2:
        lines += ["", f"Whole-step CPU per stream-second, `{tracks[1]}` / `{tracks[0]}`:", ""]
        by_n = {step.n: step for step in results[tracks[0]]}
        for step in results[tracks[1]]:
            if step.n in by_n:
                ratio = step.cpu_per_stream_s / by_n[step.n].cpu_per_stream_s
                lines.append(f"- N={step.n}: {ratio:.2f}")
    lines.append("")


def _done(steps: list[Step]) -> bool:
    return bool(steps) and (steps[-1].cpu_util > 0.95 or steps[-1].failed > 0)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench.analytics")
    parser.add_argument("--steps", default="1,25,50,100")
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument("--skip-speech", action="store_true")
    parser.add_argument("--skip-capacity", action="store_true")
    parser.add_argument(
        "--tracks", default="pipeline,gated", help="track paths to measure, baseline first"
    )
    parser.add_argument("--serve", nargs=3, metavar=("PORT", "STT_URL", "TRACK"))
    args = parser.parse_args(argv)
    if args.serve:
        serve(int(args.serve[0]), args.serve[1], args.serve[2])
        return 0
    started = time.monotonic()
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    lines = [
        "## Call analytics: both-tracks streams",
        "",
        f"Run {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC on {describe()}. "
        f"`uptime` at the start: `{uptime}` (a shared machine: other jobs ran beside it). "
        f"Command: `.venv/bin/python -m bench.analytics {' '.join(argv)}`.",
        "",
    ]
    if not args.skip_speech:
        asyncio.run(real_speech(lines))
    if not args.skip_capacity:
        steps = [int(n) for n in args.steps.split(",")]
        from agent.serve import event_loop_factory

        tracks = args.tracks.split(",")
        asyncio.run(capacity(lines, steps, args.window, tracks), loop_factory=event_loop_factory())
    end_uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    lines.append(f"`uptime` at the end: `{end_uptime}`; {time.monotonic() - started:.0f} s in all.")
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
