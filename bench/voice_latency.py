"""Voice-to-voice latency of a phone call on loopback, stage by stage.

A Twilio Media Streams caller (20 ms 8 kHz μ-law frames at real-time pace, silence between
questions, as Twilio sends) talks to our server (``agent.server.create_app``, the product's
pipeline from ``pipelines.voice_agent``) over ``WS /telephony/twilio/ws``. For each turn the
caller notes when the question's last speech frame left it and when the first non-silent
``media`` frame came back: that gap is the voice-to-voice latency the caller hears.

A Pipecat observer inside the server timestamps the stages of the same turn::

    end of speech → VAD stop         Silero's vad_stop_secs of quiet, plus its own lag
                  → STT final        final commit → transcription.done → TranscriptionFrame
                  → LLM first token  turn end, context aggregation, the LLM's first LLMTextFrame
                  → TTS first audio  sentence aggregation, synthesis, first TTSAudioRawFrame
                  → transport out    BotStartedSpeakingFrame (the output transport writes audio)
                  → caller hears     serializer, WebSocket, the caller's decoding

Client and server share one process (and ``time.monotonic``), so no clock alignment is
needed; the models run where ``voice-agent serve`` runs them. Two configurations, one run:

- ``default``: the offline profile as ``voice-agent serve`` starts it -- the CPU ASR server
  (faster-whisper tiny.en behind vLLM's realtime protocol) and Piper's HTTP server as child
  processes under :class:`agent.local.supervisor.Supervisor`, and the built-in offline
  responder in place of an LLM.
- ``instant``: scripted peers that answer at once, in one child process: a realtime STT peer
  (deltas while audio flows, ``transcription.done`` with a fixed text on the final commit),
  an OpenAI-compatible chat server streaming a short SSE answer (so the LLM service path is
  exercised), and an OpenAI-compatible ``/v1/audio/speech`` returning a fixed tone. What is
  left is our server's own overhead (plus Silero VAD, which is part of it).

Everything it starts, it stops. Results go to ``bench/results/voice_latency.md``.

    .venv/bin/python bench/voice_latency.py [--turns 20] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import datetime
import json
import math
import os
import platform
import socket
import statistics
import sys
import time
import warnings
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

with warnings.catch_warnings():  # μ-law as the tests speak it; Python 3.12 still ships it
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import uvicorn  # noqa: E402
import websockets  # noqa: E402
from fastapi import FastAPI  # noqa: E402
from loguru import logger  # noqa: E402

from agent.local.supervisor import ChildSpec, Supervisor  # noqa: E402
from bench.capacity_peers import TONE_RATE, peers_app  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "voice_latency.md"
QUESTIONS = (
    "turn on the lights in the kitchen",
    "please call me back tomorrow morning",
    "what is the weather like in paris today",
    "i would like to book a table for two people",
)
TONE_SECONDS = 0.4
"""Length of the instant TTS peer's answer."""

FRAME_BYTES = 160  # 20 ms of 8 kHz μ-law
FRAME_S = 0.02
ULAW_SILENCE = b"\xff" * FRAME_BYTES
LOUD_PEAK = 300
"""A returned frame whose decoded peak exceeds this (of 32767) counts as bot audio."""
SPEECH_PEAK = 500
"""Trailing samples of the question quieter than this are trimmed: speech ends at the last
louder sample, so the VAD's wait is measured from the real end of the words."""

STAGES = (
    ("vad_stop", "VAD stop wait (end of speech → VADUserStoppedSpeaking)"),
    ("stt_final", "STT final (VAD stop → final TranscriptionFrame)"),
    ("llm_first", "LLM first token (final → first LLMTextFrame)"),
    ("tts_first", "TTS first audio (first token → first TTSAudioRawFrame)"),
    ("transport_out", "transport out (TTS audio → BotStartedSpeaking)"),
    ("heard", "to the caller (transport out → first loud media frame)"),
)


# ----------------------------------------------------------------------------- scripted peers


def instant_peers_app() -> FastAPI:
    """The ``instant`` configuration's STT, LLM and TTS on one port, all answering at once."""
    return peers_app(reply_seconds=TONE_SECONDS)


def serve_instant_peers(port: int) -> None:
    """Entry point of the peers' child process (``--serve-peers PORT``)."""
    uvicorn.run(instant_peers_app(), host="127.0.0.1", port=port, log_level="warning")


# ----------------------------------------------------------------------------- server side


@dataclass
class StageLog:
    """Stage events of every call, as ``(kind, time.monotonic())`` in push order."""

    events: list[tuple[str, float]] = field(default_factory=list)

    def first(self, kind: str, after: float, before: float = math.inf) -> float | None:
        return next((t for k, t in self.events if k == kind and after <= t < before), None)


def stage_observer(log: StageLog) -> Any:
    """A Pipecat observer that writes the stage events of a call into ``log``.

    Observers run from a queue, after the fact, so the time comes from the frame's push
    timestamp (the pipeline clock), mapped back onto ``time.monotonic``.
    """
    from pipecat.frames.frames import (
        BotStartedSpeakingFrame,
        LLMTextFrame,
        TranscriptionFrame,
        TTSAudioRawFrame,
        VADUserStoppedSpeakingFrame,
    )
    from pipecat.observers.base_observer import BaseObserver, FramePushed
    from pipecat.processors.frame_processor import FrameDirection
    from pipecat.transports.base_output import BaseOutputTransport

    class StageObserver(BaseObserver):
        async def on_push_frame(self, data: FramePushed) -> None:
            if not data.first_push:
                return
            frame = data.frame
            kind: str | None = None
            if isinstance(frame, VADUserStoppedSpeakingFrame):
                kind = "vad_stop"
            elif isinstance(frame, TranscriptionFrame) and frame.text.strip():
                kind = "stt_final"
            elif type(frame) is LLMTextFrame:
                kind = "llm_first"
            elif isinstance(frame, TTSAudioRawFrame):
                kind = "tts_first"
            elif (
                isinstance(frame, BotStartedSpeakingFrame)
                and isinstance(data.source, BaseOutputTransport)
                and data.direction == FrameDirection.DOWNSTREAM
            ):
                kind = "transport_out"
            if kind is None:
                return
            clock = data.source.get_clock()
            start_ns = time.monotonic_ns() - clock.get_time()
            log.events.append((kind, (start_ns + data.timestamp) / 1e9))

    return StageObserver()


def observed_task_factory(log: StageLog) -> Any:
    """The product's pipeline (``build_voice_agent_task``) with the stage observer added."""
    from pipelines.voice_agent import build_voice_agent_task

    def factory(
        transport: Any, settings: Any, *, call_id: str, observers: list[Any] | None = None
    ) -> Any:
        watched = [*(observers or []), stage_observer(log)]
        return build_voice_agent_task(transport, settings, call_id=call_id, observers=watched)

    return factory


@contextlib.asynccontextmanager
async def running_server(settings: Any, log: StageLog) -> AsyncIterator[str]:
    """Our app on 127.0.0.1 (a free port) in this process and loop; yields the ws URL."""
    from agent.server import create_app

    app = create_app(settings, task_factory=observed_task_factory(log))
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    )
    serving = asyncio.create_task(server.serve(), name="bench-server")
    try:
        while not server.started:
            if serving.done():
                serving.result()
                raise RuntimeError("the server exited before it started")
            await asyncio.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"ws://127.0.0.1:{port}/telephony/twilio/ws"
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 20)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def configuration(name: str) -> tuple[Any, list[ChildSpec]]:
    """Settings and the child processes to supervise for ``default`` or ``instant``."""
    from agent.config import load_settings
    from agent.serve import local_children

    if name == "default":
        asr_port, tts_port = free_port(), free_port()
        settings = load_settings(
            "default",
            overrides={
                "asr_server": {"port": asr_port},
                "stt": {"url": f"ws://127.0.0.1:{asr_port}/v1/realtime"},
                "tts": {"base_url": f"http://127.0.0.1:{tts_port}"},
            },
        )
        return settings, local_children(settings)  # exactly what `voice-agent serve` starts
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    settings = load_settings(
        "default",
        overrides={
            "server": {"start_local_services": False},
            "stt": {"url": f"ws://127.0.0.1:{port}/v1/realtime"},
            "llm": {"base_url": f"{base}/v1", "model": "bench-instant"},
            "tts": {"kind": "openai", "base_url": f"{base}/v1", "sample_rate": TONE_RATE},
        },
    )
    peers = ChildSpec(
        name="instant-peers",
        argv=[sys.executable, str(Path(__file__).resolve()), "--serve-peers", str(port)],
        ready_url=f"{base}/health",
    )
    return settings, [peers]


# ----------------------------------------------------------------------------- the caller


class TwilioCaller:
    """The Twilio side of a media stream: a frame every 20 ms, speech when queued, else silence."""

    def __init__(self, ws: websockets.ClientConnection) -> None:
        self.ws = ws
        self.loud: list[float] = []  # arrival times of non-silent media frames
        self.speech_ended = asyncio.Event()
        self.speech_end = 0.0
        self._pending: list[bytes] = []
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        await self.ws.send(json.dumps({"event": "connected", "protocol": "Call", "version": "1"}))
        start = {
            "streamSid": "MZbench",
            "accountSid": "ACbench",
            "callSid": "CAbench",
            "tracks": ["inbound"],
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
            "customParameters": {},
        }
        await self.ws.send(json.dumps({"event": "start", "streamSid": "MZbench", "start": start}))
        self._tasks = [asyncio.create_task(self._send()), asyncio.create_task(self._read())]

    async def say(self, ulaw: bytes) -> float:
        """Queue a question; returns when its last frame was sent (the end of speech)."""
        self.speech_ended.clear()
        self._pending = [
            ulaw[i : i + FRAME_BYTES].ljust(FRAME_BYTES, b"\xff")
            for i in range(0, len(ulaw), FRAME_BYTES)
        ]
        await self.speech_ended.wait()
        return self.speech_end

    async def stop(self) -> None:
        stop = {"event": "stop", "streamSid": "MZbench", "stop": {"callSid": "CAbench"}}
        with contextlib.suppress(websockets.ConnectionClosed):
            await self.ws.send(json.dumps(stop))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._tasks[1], 10)  # the server closes the stream
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _send(self) -> None:
        begin = time.monotonic()
        sent = 0
        while True:
            speaking = bool(self._pending)
            frame = self._pending.pop(0) if speaking else ULAW_SILENCE
            payload = base64.b64encode(frame).decode()
            message = {"event": "media", "streamSid": "MZbench", "media": {"payload": payload}}
            await self.ws.send(json.dumps(message))
            if speaking and not self._pending:
                self.speech_end = time.monotonic()
                self.speech_ended.set()
            sent += 1
            await asyncio.sleep(max(0.0, begin + sent * FRAME_S - time.monotonic()))

    async def _read(self) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for message in self.ws:
                event = json.loads(message)
                if event.get("event") != "media":
                    continue
                pcm = audioop.ulaw2lin(base64.b64decode(event["media"]["payload"]), 2)
                if audioop.max(pcm, 2) > LOUD_PEAK:
                    self.loud.append(time.monotonic())

    def first_loud(self, after: float) -> float | None:
        return next((t for t in self.loud if t >= after), None)

    async def wait_bot_done(self, after: float, *, quiet_s: float, timeout_s: float) -> None:
        """Wait for bot audio after ``after``, then until none has come for ``quiet_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            heard = self.first_loud(after)
            if heard is not None and time.monotonic() - self.loud[-1] >= quiet_s:
                return
            await asyncio.sleep(0.05)


def question_audio(text: str, voice: str) -> bytes:
    """The question as 8 kHz μ-law, trailing quiet trimmed so it ends with the last word."""
    from tests.speech import speech_at

    pcm = np.frombuffer(speech_at(text, 8000, voice=voice), "<i2")
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > SPEECH_PEAK)
    start = max(0, int(loud[0]) - 800) if loud.size else 0  # keep 100 ms before the first word
    end = int(loud[-1]) + 1 if loud.size else len(pcm)
    return audioop.lin2ulaw(pcm[start:end].tobytes(), 2)


# ----------------------------------------------------------------------------- measuring


@dataclass
class Turn:
    question: str
    marks: dict[str, float]  # stage → seconds since the end of speech (cumulative)
    problem: str | None = None


def timeline(log: StageLog, caller: TwilioCaller, speech_start: float, speech_end: float) -> Turn:
    """The turn's milestones, each the first of its kind after the previous one."""
    marks: dict[str, float] = {}
    early = log.first("transport_out", speech_start, speech_end)
    after = speech_end
    for kind, _label in STAGES:
        t = caller.first_loud(after) if kind == "heard" else log.first(kind, after)
        if t is None:
            return Turn("", marks, f"no {kind} event")
        marks[kind] = t - speech_end
        after = t
    problem = "bot audio started before the question ended" if early is not None else None
    return Turn("", marks, problem)


async def measure(name: str, turns: int, calls: int, voice: str, warmup: int) -> list[Turn]:
    """Start the configuration, place ``calls`` calls with ``turns`` turns in all, stop it."""
    settings, children = configuration(name)
    questions = {q: question_audio(q, voice) for q in QUESTIONS}
    log = StageLog()
    results: list[Turn] = []
    per_call = [turns // calls + (1 if i < turns % calls else 0) for i in range(calls)]
    started = time.monotonic()
    async with Supervisor(children) as _supervisor, running_server(settings, log) as url:
        print(f"[{name}] ready in {time.monotonic() - started:.1f} s", file=sys.stderr)
        index = 0
        for call, count in enumerate(per_call):
            async with websockets.connect(url, compression=None) as ws:
                caller = TwilioCaller(ws)
                await caller.start()
                await asyncio.sleep(0.6)  # the STT connects while Twilio sends silence
                for turn_no in range(count + (warmup if call == 0 else 0)):
                    text = QUESTIONS[index % len(QUESTIONS)]
                    index += 1
                    speech_start = time.monotonic()
                    speech_end = await caller.say(questions[text])
                    await caller.wait_bot_done(speech_end, quiet_s=0.5, timeout_s=15)
                    await asyncio.sleep(0.3)  # let the last stage events reach the log
                    turn = timeline(log, caller, speech_start, speech_end)
                    turn.question = text
                    if call == 0 and turn_no < warmup:
                        continue
                    results.append(turn)
                    total = turn.marks.get("heard")
                    shown = f"{total * 1e3:.0f} ms" if total is not None else turn.problem
                    print(f"[{name}] turn {len(results)}: {shown}", file=sys.stderr)
                await caller.stop()
    return results


# ----------------------------------------------------------------------------- reporting


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def increments(turn: Turn) -> dict[str, float]:
    out: dict[str, float] = {}
    previous = 0.0
    for kind, _label in STAGES:
        out[kind] = turn.marks[kind] - previous
        previous = turn.marks[kind]
    out["total"] = turn.marks["heard"]
    return out


def render(results: dict[str, list[Turn]], args: argparse.Namespace, seconds: float) -> str:
    good = {
        name: [increments(t) for t in turns if t.problem is None] for name, turns in results.items()
    }
    names = list(results)
    lines = [
        "## Voice-to-voice latency on loopback (Twilio Media Streams caller)",
        "",
        f"Run {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC on {os.cpu_count()} CPU(s) "
        f"({platform.machine()}, Python {platform.python_version()}), "
        f"{seconds:.0f} s in all. Command: `.venv/bin/python bench/voice_latency.py"
        + (" --quick" if args.quick else f" --turns {args.turns}")
        + "`.",
        f"Caller: {args.voice} voice questions ({len(QUESTIONS)} sentences in turn), 20 ms 8 kHz "
        "μ-law frames at real-time pace, silence between questions; "
        f"{args.calls} calls per configuration, the first turn of each configuration "
        "discarded as warm-up.",
        "`default` = offline profile (ASR server: faster-whisper tiny.en; Piper; offline "
        "responder), ASR and Piper as child processes as `voice-agent serve` runs them. "
        "`instant` = scripted STT, chat (SSE) and speech peers in a child process answering "
        "at once: our server's own overhead, Silero VAD included.",
        "",
        "| stage (ms, each from the previous mark) | "
        + " | ".join(f"{n} p50 | {n} p95" for n in names)
        + " |",
        "|---|" + "---|---|" * len(names),
    ]
    for kind, label in (*STAGES, ("total", "**voice-to-voice** (end of speech → caller hears)")):
        cells = []
        for name in names:
            values = [inc[kind] for inc in good[name]]
            if values:
                cells += [
                    f"{statistics.median(values) * 1e3:.0f}",
                    f"{percentile(values, 0.95) * 1e3:.0f}",
                ]
            else:
                cells += ["-", "-"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("")
    for name in names:
        bad = [t for t in results[name] if t.problem is not None]
        lines.append(
            f"`{name}`: {len(good[name])} turns measured"
            + (
                f", {len(bad)} left out ({'; '.join(sorted({str(t.problem) for t in bad}))})"
                if bad
                else ""
            )
            + "."
        )
    lines += [
        "",
        "Stage marks come from a Pipecat observer in the server (frame push times on the "
        "pipeline clock); the caller's marks from the same `time.monotonic`. p50/p95 of the "
        "per-turn stage times; stage medians need not add up to the total's median.",
    ]
    return "\n".join(lines) + "\n"


async def run(args: argparse.Namespace) -> tuple[str, bool]:
    """Measure both configurations; the report, and whether each measured at least one turn."""
    logger.remove()
    logger.add(sys.stderr, level="ERROR")
    turns = 5 if args.quick else args.turns
    started = time.monotonic()
    results: dict[str, list[Turn]] = {}
    for name in ("default", "instant"):
        results[name] = await measure(name, turns, args.calls, args.voice, warmup=1)
    ok = all(any(t.problem is None for t in turns) for turns in results.values())
    return render(results, args, time.monotonic() - started), ok


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=20, help="measured turns per configuration")
    parser.add_argument("--calls", type=int, default=2, help="calls the turns are spread over")
    parser.add_argument("--quick", action="store_true", help="5 turns per configuration")
    parser.add_argument("--voice", choices=("piper", "espeak"), default="piper")
    parser.add_argument("--output", default=str(RESULTS), help="where to write the table")
    parser.add_argument("--serve-peers", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_peers is not None:
        serve_instant_peers(args.serve_peers)
        return 0
    if args.turns < 1 or args.calls < 1:
        parser.error("--turns and --calls must be at least 1")
    report, ok = asyncio.run(run(args))
    print(report)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(report)
    print(f"written to {output}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
