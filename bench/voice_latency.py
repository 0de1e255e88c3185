"""Voice-to-voice latency of a phone call on loopback, stage by stage.

A Twilio Media Streams caller (``tests/fakes/twilio_caller.py``: 20 ms 8 kHz μ-law frames at
real-time pace, silence between questions, as Twilio sends) talks to our server
(``agent.server.create_app``, the product's pipeline) over ``WS /telephony/twilio/ws``. For
each turn the caller notes when the question's last speech frame left it and when the first
loud ``media`` frame was heard: that gap is the voice-to-voice latency the caller hears. Heard,
not arrived: Twilio plays media in order at real time, and Pipecat's output sends the first
80 ms of an answer at once, so quiet at the head of an answer is heard before its first loud
frame however soon that frame arrived (``TwilioCaller.heard_at``; until 2026-12-06 18:45 this
bench timed the arrival, which hid Piper's 25-60 ms lead-in).

The stages in between are the product's own: the turn-latency observer the server attaches
to every call (:mod:`agent.observability.turn_latency`) logs one ``turn_latency`` line per
turn with each stage's time from the end of speech, and this bench reads those lines::

    end of speech → VAD stop         Silero's vad_stop_secs of quiet, plus its own lag
                  → STT final        final commit → transcription.done → TranscriptionFrame
                  → LLM first token  turn end, context aggregation, the LLM's first LLMTextFrame
                  → TTS first audio  sentence aggregation, synthesis, first TTSAudioRawFrame
                  → transport out    BotStartedSpeakingFrame (the output transport writes audio)
                  → caller hears     serializer, WebSocket, the quiet played before it

Client and server share one process and ``time.monotonic``. The observer's stages are timed
from its own estimate of the end of speech (the VAD stop minus ``stop_secs``); the observer
runs inline, so its line is logged the moment the first answer audio goes out, and that
moment ties its times to the caller's. Three configurations, one run:

- ``default``: the offline profile as ``voice-agent serve`` starts it -- the CPU ASR server
  (faster-whisper tiny.en behind vLLM's realtime protocol) and Piper's HTTP server as child
  processes under :class:`agent.local.supervisor.Supervisor`, and the built-in echo
  responder in place of an LLM (the stock bot's responder: a like-for-like baseline).
- ``local-llm`` (not in the default set: ``--configurations default,local-llm``): the same,
  with the default profile's own LLM -- llama.cpp's server with the packaged
  SmolLM2-135M-Instruct, a third child -- answering through the OpenAI-compatible service.
- ``instant``: the instant peers (``bench/peers.py``: the shared test fakes answering at once)
  in one child process: a realtime STT peer, an OpenAI-compatible chat server streaming a
  short SSE answer (so the LLM service path is exercised) and an OpenAI-compatible
  ``/v1/audio/speech`` returning a fixed tone. What is left is our server's own overhead
  (plus Silero VAD, which is part of it).
- ``stock``: the baseline, a stock offline Pipecat bot (:mod:`bench.stock_bot`: Silero VAD,
  Pipecat's ``WhisperSTTService`` with the same tiny.en, the same responder, Pipecat's
  ``PiperTTSService`` with the same voice) in a child process. It has no stage marks, only
  what the caller hears; the report ends with ours as ratios of it.

All configurations are started first, then their calls take turns (call 1 to each, call 2 to
each …), so a machine shared with other work loads them alike.

``--greeting`` asks one utterance instead of the four questions: "Hello there." then, after a
0.5 s pause, "Can you tell me what time the store opens tomorrow?" (the offline voice with
the pause inserted, :mod:`tests.fakes.paused_speech`). A greeting said in a breath is what a
slow recognizer returns late and empty; this is the case that used to wait for Pipecat's
fallback. Every report counts the turns that reached that fallback (it should be none) and
names the CPU and the CTranslate2 backend it ran on.

Everything it starts, it stops. Results go to ``bench/results/voice_latency.md`` (``--greeting``:
``voice_latency_greeting.md``).

    .venv/bin/python -m bench.voice_latency [--turns 20] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
import websockets
from loguru import logger

from agent.fastpath.tentative_answer import TURN_FALLBACK_WARNING
from agent.local.supervisor import ChildSpec, Supervisor
from agent.observability.metrics import STAGES
from bench import machine, peers, stock_bot
from tests.fakes.paused_speech import Utterance
from tests.fakes.serving import free_port
from tests.fakes.twilio_caller import TwilioCaller, to_ulaw, ulaw_speech

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "voice_latency.md"
GREETING_RESULTS = ROOT / "bench" / "results" / "voice_latency_greeting.md"
QUESTIONS = (
    "turn on the lights in the kitchen",
    "please call me back tomorrow morning",
    "what is the weather like in paris today",
    "i would like to book a table for two people",
)
GREETING = Utterance(
    "greeting", ("hello there", "can you tell me what time the store opens tomorrow"), (0.5,)
)
DEFAULT_CONFIGURATIONS = ["default", "stock", "instant"]
CONFIGURATIONS = [*DEFAULT_CONFIGURATIONS, "local-llm"]
DEFAULT_CALLS = 4
TONE_SECONDS = 0.4
"""Length of the instant TTS peer's answer."""

LABELS = {
    "vad_stop": "VAD stop wait (end of speech → VADUserStoppedSpeaking)",
    "stt_final": "STT final (VAD stop → final TranscriptionFrame)",
    "llm_first_token": "LLM first token (final → first LLMTextFrame)",
    "tts_first_audio": "TTS first audio (first token → first TTSAudioRawFrame)",
    "first_audio_out": "transport out (TTS audio → BotStartedSpeaking)",
    "heard": "to the caller (transport out → first loud frame heard)",
}
MARKS = (*STAGES, "heard")
"""The product's stages in order, then the caller hearing the answer."""
assert set(MARKS) == set(LABELS), "the product's stages changed: label the new ones"


# ----------------------------------------------------------------------------- server side


@dataclass
class TurnLines:
    """The ``turn_latency`` lines the product's observer logged, with when each was logged."""

    lines: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    fallbacks: int = 0
    """Turns the server left to Pipecat's user-turn fallback (there should be none)."""

    def write(self, message: Any) -> None:  # a loguru sink
        if TURN_FALLBACK_WARNING in message.record["message"]:
            self.fallbacks += 1
        else:
            self.lines.append((time.monotonic(), dict(message.record["extra"])))

    def answered(
        self, after: float, before: float = math.inf
    ) -> list[tuple[float, dict[str, Any]]]:
        """Answered turns logged in ``[after, before)``: logged as their first audio went out."""
        return [(t, line) for t, line in self.lines if after <= t < before and line["complete"]]


@contextlib.contextmanager
def turn_lines() -> Iterator[TurnLines]:
    """Collect every ``turn_latency`` line while the block runs."""
    lines = TurnLines()
    sink = logger.add(
        lines.write,
        level="INFO",
        filter=lambda r: (
            r["extra"].get("event") == "turn_latency" or TURN_FALLBACK_WARNING in r["message"]
        ),
    )
    try:
        yield lines
    finally:
        logger.remove(sink)


@contextlib.asynccontextmanager
async def running_server(settings: Any) -> AsyncIterator[str]:
    """Our app on 127.0.0.1 (a free port) in this process and loop; yields the ws URL."""
    from agent.server import create_app

    app = create_app(settings)
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


def configuration(name: str) -> tuple[Any, list[ChildSpec]]:
    """Settings and the child processes to supervise for ``default`` or ``instant``; for
    ``stock`` (not our server, so no settings) the URL to dial and the stock bot's child."""
    from agent.config import load_settings
    from agent.serve import local_children

    if name == "stock":
        port = free_port()
        child = ChildSpec(
            name="stock-bot",
            argv=[sys.executable, "-m", "bench.stock_bot", "--port", str(port)],
            ready_url=f"http://127.0.0.1:{port}{stock_bot.HEALTH_PATH}",
            env={"PYTHONPATH": str(ROOT)},
        )
        return f"ws://127.0.0.1:{port}{stock_bot.WS_PATH}", [child]
    log_turns = {"log_turns": True}  # the stages come from these lines
    if name in ("default", "local-llm"):
        asr_port, tts_port, llm_port = free_port(), free_port(), free_port()
        llm = {"kind": "echo"} if name == "default" else {"local": {"port": llm_port}}
        settings = load_settings(
            "default",
            overrides={
                "asr_server": {"port": asr_port},
                "stt": {"url": f"ws://127.0.0.1:{asr_port}/v1/realtime"},
                "llm": llm,
                "tts": {"base_url": f"http://127.0.0.1:{tts_port}"},
                "observability": log_turns,
            },
        )
        return settings, local_children(settings)  # exactly what `voice-agent serve` starts
    at = peers.Peers(free_port(), free_port())
    settings = load_settings(
        "default",
        overrides={
            "server": {"start_local_services": False},
            "stt": {"url": at.realtime_url},
            "llm": {"kind": "openai", "base_url": at.base_url, "model": "bench-instant"},
            "tts": {"kind": "openai", "base_url": at.base_url, "sample_rate": peers.TONE_RATE},
            "observability": log_turns,
        },
    )
    child = ChildSpec(
        name="instant-peers",
        argv=peers.command(at, reply_seconds=TONE_SECONDS),
        ready_url=at.health_url,
        env={"PYTHONPATH": str(ROOT)},  # `-m bench.peers` from wherever this runs
    )
    return settings, [child]


# ----------------------------------------------------------------------------- the caller


async def wait_bot_done(
    caller: TwilioCaller, after: float, *, quiet_s: float, timeout_s: float
) -> None:
    """Wait for bot audio after ``after``, then until none has come for ``quiet_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        heard = caller.first_loud(after)
        if heard is not None and time.monotonic() - caller.loud_at[-1] >= quiet_s:
            return
        await asyncio.sleep(0.05)


# ----------------------------------------------------------------------------- measuring


@dataclass
class Turn:
    question: str
    marks: dict[str, float]  # stage → seconds since the end of speech (cumulative)
    problem: str | None = None


def timeline(
    lines: TurnLines | None, caller: TwilioCaller, speech_start: float, speech_end: float
) -> Turn:
    """The turn's milestones from the caller's end of speech: the product's stages, placed
    on the caller's clock by the moment the observer logged the answered turn."""
    marks: dict[str, float] = {}
    if lines is None:  # the stock bot: only what the caller hears
        heard = caller.first_heard(speech_end)
        if heard is None:
            return Turn("", marks, "no loud audio at the caller")
        early = caller.first_heard(speech_start)
        marks["heard"] = heard - speech_end
        problem = "bot audio started before the question ended" if early != heard else None
        return Turn("", marks, problem)
    answered = lines.answered(speech_end)
    if not answered:
        return Turn("", marks, "no answered turn_latency line")
    out_at, line = answered[0]
    out_ms = line["first_audio_out_ms"]
    for stage in STAGES:
        ms = line[f"{stage}_ms"]
        if ms is None:
            return Turn("", marks, f"no {stage}")
        marks[stage] = out_at - (out_ms - ms) / 1e3 - speech_end
    heard = caller.first_heard(out_at)
    if heard is None:
        return Turn("", marks, "no loud audio at the caller")
    marks["heard"] = heard - speech_end
    early = lines.answered(speech_start, speech_end)
    problem = "bot audio started before the question ended" if early else None
    return Turn("", marks, problem)


@contextlib.asynccontextmanager
async def started(name: str) -> AsyncIterator[str]:
    """Start one configuration (its children, and our server unless it is ``stock``); yields
    the media-stream URL the caller dials."""
    settings, children = configuration(name)
    began = time.monotonic()
    async with Supervisor(children) as _supervisor:
        if isinstance(settings, str):  # the stock bot: its own server, in its child
            url = settings
            print(f"[{name}] ready in {time.monotonic() - began:.1f} s", file=sys.stderr)
            yield url
            return
        async with running_server(settings) as url:
            print(f"[{name}] ready in {time.monotonic() - began:.1f} s", file=sys.stderr)
            yield url


async def one_call(
    name: str,
    url: str,
    call_sid: str,
    questions: list[tuple[str, bytes]],
    lines: TurnLines | None,
    warmup: int,
) -> list[Turn]:
    """One phone call asking ``questions`` in turn; the first ``warmup`` turns are not kept."""
    results: list[Turn] = []
    async with websockets.connect(url, compression=None) as ws:
        caller = TwilioCaller(ws, call_sid)
        await caller.start()
        async with caller.quiet():
            await asyncio.sleep(0.6)  # the STT connects while Twilio sends silence
        for turn_no, (text, audio) in enumerate(questions):
            speech_start = time.monotonic()
            speech_end = await caller.speak(audio)
            async with caller.quiet():
                await wait_bot_done(caller, speech_end, quiet_s=0.5, timeout_s=15)
                await asyncio.sleep(0.3)  # let the turn's line reach the log
            turn = timeline(lines, caller, speech_start, speech_end)
            turn.question = text
            if turn_no < warmup:
                continue
            results.append(turn)
            total = turn.marks.get("heard")
            shown = f"{total * 1e3:.0f} ms" if total is not None else turn.problem
            print(f"[{name}] turn {len(results)}: {shown}", file=sys.stderr)
        await caller.stop()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(caller.closed.wait(), 10)  # the server hangs up
        await caller.close()
    return results


def questions_audio(voice: str, greeting: bool) -> dict[str, bytes]:
    """What the caller says, in turn: the four questions, or the greeting utterance alone."""
    if greeting:
        pcm, _end_s = GREETING.audio(8000)
        return {GREETING.text: to_ulaw(pcm)}
    return {q: ulaw_speech(q, voice=voice, trim=True) for q in QUESTIONS}


async def measure(
    names: list[str], turns: int, calls: int, audio: dict[str, bytes], warmup: int
) -> tuple[dict[str, list[Turn]], int]:
    """Start every configuration, then place ``calls`` calls to each, taking turns (call 1 to
    each, then call 2 to each …) so that a machine shared with others loads them alike.
    Returns the turns, and how many turns reached Pipecat's fallback."""
    texts = list(audio)
    per_call = [turns // calls + (1 if i < turns % calls else 0) for i in range(calls)]
    results: dict[str, list[Turn]] = {name: [] for name in names}
    asked = dict.fromkeys(names, 0)
    with turn_lines() as lines:
        async with contextlib.AsyncExitStack() as stack:
            urls = {name: await stack.enter_async_context(started(name)) for name in names}
            for call, count in enumerate(per_call):
                for name in names:
                    extra = warmup if call == 0 else 0
                    questions = []
                    for _ in range(count + extra):
                        text = texts[asked[name] % len(texts)]
                        asked[name] += 1
                        questions.append((text, audio[text]))
                    results[name] += await one_call(
                        name,
                        urls[name],
                        f"CA{call:04d}",
                        questions,
                        None if name == "stock" else lines,
                        extra,
                    )
    return results, lines.fallbacks


# ----------------------------------------------------------------------------- reporting


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def increments(turn: Turn) -> dict[str, float]:
    out: dict[str, float] = {}
    previous = 0.0
    for mark in MARKS:
        if mark not in turn.marks:
            continue  # the stock bot has no stage marks, only what the caller heard
        out[mark] = turn.marks[mark] - previous
        previous = turn.marks[mark]
    out["total"] = turn.marks["heard"]
    return out


def render(
    results: dict[str, list[Turn]], fallbacks: int, args: argparse.Namespace, seconds: float
) -> str:
    good = {
        name: [increments(t) for t in turns if t.problem is None] for name, turns in results.items()
    }
    names = list(results)
    lines = [
        "## Voice-to-voice latency on loopback (Twilio Media Streams caller)",
        "",
        f"Run {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC on {os.cpu_count()} CPU(s) "
        f"({platform.machine()}, Python {platform.python_version()}), "
        f"{seconds:.0f} s in all; {machine.describe()}. "
        "Command: `.venv/bin/python -m bench.voice_latency"
        + (" --quick" if args.quick else f" --turns {args.turns}")
        + (" --greeting" if args.greeting else "")
        + (
            ""
            if args.configurations == DEFAULT_CONFIGURATIONS
            else f" --configurations {','.join(names)}"
        )
        + (f" --calls {args.calls}" if args.calls != DEFAULT_CALLS else "")
        + "`.",
        (
            f'Caller: "{GREETING.text}" (Piper voice, a {GREETING.pauses_s[0]} s pause after '
            '"hello there"), '
            if args.greeting
            else f"Caller: {args.voice} voice questions ({len(QUESTIONS)} sentences in turn), "
        )
        + "20 ms 8 kHz "
        "μ-law frames at real-time pace, silence between questions; "
        f"{args.calls} calls per configuration, the first turn of each configuration "
        "discarded as warm-up.",
        "`default` = offline profile (ASR server: faster-whisper tiny.en; Piper; echo "
        "responder), ASR and Piper as child processes as `voice-agent serve` runs them. "
        "`local-llm` = the same with the profile's own LLM (SmolLM2-135M-Instruct behind "
        "llama.cpp's server, a third child). "
        "`instant` = scripted STT, chat (SSE) and speech peers in a child process answering "
        "at once: our server's own overhead, Silero VAD included. "
        "`stock` = a stock offline Pipecat bot (`bench/stock_bot.py`: Silero VAD → Pipecat's "
        "`WhisperSTTService` with the same tiny.en → the same responder → Pipecat's "
        "`PiperTTSService` with the same voice) in a child process, the same end-of-turn "
        "settings; it has no stage marks, only what the caller hears. Calls to the "
        "configurations take turns, so a shared machine loads them alike.",
        "",
        "| stage (ms, each from the previous mark) | "
        + " | ".join(f"{n} p50 | {n} p95" for n in names)
        + " |",
        "|---|" + "---|---|" * len(names),
    ]
    total = ("total", "**voice-to-voice** (end of speech → caller hears)")
    for kind, label in (*LABELS.items(), total):
        cells = []
        for name in names:
            staged = name != "stock" or kind == "total"  # stock: only what the caller heard
            values = [inc[kind] for inc in good[name]] if staged else []
            if values:
                cells += [
                    f"{statistics.median(values) * 1e3:.0f}",
                    f"{percentile(values, 0.95) * 1e3:.0f}",
                ]
            else:
                cells += ["-", "-"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("")
    if "stock" in names and good["stock"]:
        stock = [inc["total"] for inc in good["stock"]]
        for name in names:
            ours = [inc["total"] for inc in good[name]]
            if name == "stock" or not ours:
                continue
            p50 = statistics.median(ours) / statistics.median(stock)
            p95 = percentile(ours, 0.95) / percentile(stock, 0.95)
            lines.append(
                f"**`{name}` / `stock`, voice-to-voice: p50 {p50:.2f}x, p95 {p95:.2f}x** "
                "(same run)."
            )
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
        f"Turns that reached Pipecat's user-turn fallback (our servers): **{fallbacks}**.",
        "",
        "Stage marks come from the server's own turn-latency observer (its `turn_latency` "
        "log line per turn, pipeline-clock times from its estimate of the end of speech), "
        "placed on the caller's `time.monotonic` by the moment the line was logged (the "
        "observer runs inline, as the first answer audio goes out). p50/p95 of the per-turn "
        "stage times; stage medians need not add up to the total's median.",
    ]
    return "\n".join(lines) + "\n"


async def run(args: argparse.Namespace) -> tuple[str, bool]:
    """Measure both configurations; the report, and whether each measured at least one turn."""
    logger.remove()
    logger.add(sys.stderr, level="ERROR")
    turns = 5 if args.quick else args.turns
    started = time.monotonic()
    audio = questions_audio(args.voice, args.greeting)
    results, fallbacks = await measure(args.configurations, turns, args.calls, audio, warmup=1)
    ok = all(any(t.problem is None for t in turns) for turns in results.values())
    return render(results, fallbacks, args, time.monotonic() - started), ok


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=20, help="measured turns per configuration")
    parser.add_argument(
        "--calls", type=int, default=DEFAULT_CALLS, help="calls the turns are spread over"
    )
    parser.add_argument("--quick", action="store_true", help="5 turns per configuration")
    parser.add_argument("--voice", choices=("piper", "espeak"), default="piper")
    parser.add_argument(
        "--greeting",
        action="store_true",
        help='ask "Hello there. (pause) Can you tell me …?" instead of the four questions',
    )
    parser.add_argument(
        "--output",
        help=f"where to write the table (default {RESULTS.name}, or "
        f"{GREETING_RESULTS.name} with --greeting)",
    )
    parser.add_argument(
        "--configurations",
        default=",".join(DEFAULT_CONFIGURATIONS),
        help="comma list of default, stock, instant, local-llm (default: the first three)",
    )
    args = parser.parse_args(argv)
    if args.turns < 1 or args.calls < 1:
        parser.error("--turns and --calls must be at least 1")
    args.configurations = [c.strip() for c in args.configurations.split(",") if c.strip()]
    if not args.configurations or set(args.configurations) - set(CONFIGURATIONS):
        parser.error("--configurations takes a comma list of " + ", ".join(CONFIGURATIONS))
    report, ok = asyncio.run(run(args))
    print(report)
    output = Path(args.output or (GREETING_RESULTS if args.greeting else RESULTS))
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(report)
    print(f"written to {output}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
