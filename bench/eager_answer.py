"""Eager answers on a real phone call: how often is the speculation kept, and what does it buy?

With ``turn.eager_answer`` the STT sends its stable interim transcript when the VAD stops and
the LLM starts on it; the answer is kept if the final transcript matches (case and punctuation
aside) and restarted on the final text if not. This bench plays the speech tests through a
Twilio call to our server, one call per utterance, with eager answers off and on:

- the test sentences (``tests/fakes/speech.py``) in both test voices (espeak, Piper), and
- the paused-speech set (``tests/fakes/paused_speech.py``, Piper, pauses of 300-900 ms);

and prints per configuration: eager answers kept / restarted / withdrawn (the keep-rate),
LLM requests per utterance (what a wrong guess costs), false ends merged, and end of speech
→ first bot audio p50/p95 on the sentences. The STT is the offline ASR server (faster-whisper
tiny.en, a child process) as in the default profile; the LLM a scripted chat peer that takes
``--ttft`` seconds to its first token (a model's time to first token, which the eager answer
overlaps with the final transcript); the TTS an instant tone.

    .venv/bin/python -m bench.eager_answer [--ttft 0.3] [--no-write]
    .venv/bin/python -m bench.eager_answer --stt-url ws://gpu:8000/v1/realtime --stt-model M

The keep-rate belongs to the recognizer: with ``--stt-url`` (and ``--stt-model``, its served
name) the same calls go to a running realtime server instead, e.g. Voxtral on vLLM.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import websockets

from bench import peers
from bench.report import publish
from tests.fakes.chat_server import ChatServer
from tests.fakes.paused_speech import utterances
from tests.fakes.serving import background, free_port
from tests.fakes.speech import SENTENCES, speech_at
from tests.fakes.speech_server import SpeechServer
from tests.fakes.twilio_caller import FRAME_S, SILENCE, TwilioCaller, payloads, to_ulaw

ROOT = Path(__file__).resolve().parent.parent
RESULTS_MD = ROOT / "bench" / "results" / "eager_answer.md"
ANSWER_WAIT_S = 6.0
OUTCOMES = ("kept", "restarted", "withdrawn")


@dataclass(frozen=True)
class Speech:
    name: str
    pcm: bytes
    """PCM16 mono at 8 kHz."""
    sentence: bool
    """One sentence said without a pause (its answer delay is measured)."""


@dataclass
class Row:
    name: str
    outcomes: dict[str, int] = field(default_factory=dict)
    merged: int = 0
    requests: int = 0
    utterances: int = 0
    delays: list[float] = field(default_factory=list)
    unanswered: int = 0


def speech_set() -> list[Speech]:
    items = [
        Speech(f"{voice}: {text}", speech_at(text, 8000, voice=voice), True)
        for voice in ("espeak", "piper")
        for text in SENTENCES
    ]
    items += [Speech(f"paused: {u.kind}", u.audio(8000)[0], False) for u in utterances()]
    return items


async def play(url: str, speech: Speech, index: int) -> float | None:
    """One call; end of speech → first bot audio (``None``: no answer heard in time)."""
    async with websockets.connect(url, compression=None) as ws:
        caller = TwilioCaller(ws, f"CA{index:06d}", stream_sid=f"MZ{index:06d}")
        await caller.start()
        await caller.send([SILENCE] * int(0.6 / FRAME_S))
        ended = await caller.send(payloads(to_ulaw(speech.pcm)))
        assert ended is not None
        async with caller.quiet():
            for _ in range(int(ANSWER_WAIT_S / 0.02)):  # until the answer is heard
                if caller.first_loud(ended) is not None:
                    break
                await asyncio.sleep(0.02)
            await asyncio.sleep(1.0)  # let a late restart or a second answer show up
        await caller.stop()
        await caller.close()
    heard = caller.first_loud(ended)
    return None if heard is None else heard - ended


async def counters(url: str) -> tuple[dict[str, int], int]:
    async with httpx.AsyncClient() as http:
        text = (await http.get(url + "/metrics")).text
    outcomes = {
        outcome: int(float(found.group(1)))
        for outcome in OUTCOMES
        if (found := re.search(rf'eager_answers_total{{outcome="{outcome}"}} (\S+)', text))
    }
    merged = re.search(r"^voice_agent_false_ends_merged_total (\S+)$", text, re.MULTILINE)
    return outcomes, int(float(merged.group(1))) if merged else 0


async def measure(
    name: str, asr_url: str, asr_model: str | None, tts_url: str, ttft: float, eager: bool
) -> Row:
    from agent.config import load_settings
    from agent.server import create_app

    row = Row(name)
    with ChatServer("Sure, here it is.", first_token_delay_s=ttft) as chat:
        settings = load_settings(
            "default",
            overrides={
                "server": {"start_local_services": False},
                "stt": {"url": asr_url, **({"model": asr_model} if asr_model else {})},
                "llm": {"kind": "openai", "base_url": chat.base_url, "model": "chat-server"},
                "tts": {"kind": "openai", "base_url": f"{tts_url}/v1", "sample_rate": 24_000},
                "turn": {"eager_answer": eager},
            },
        )
        with background(create_app(settings)) as url:
            ws_url = url.replace("http://", "ws://") + "/telephony/twilio/ws"
            for index, speech in enumerate(speech_set()):
                delay = await play(ws_url, speech, index)
                row.utterances += 1
                if speech.sentence:
                    if delay is None:
                        row.unanswered += 1
                    else:
                        row.delays.append(delay)
            row.outcomes, row.merged = await counters(url)
        row.requests = len(chat.requests)
    return row


def render(rows: list[Row], ttft: float, took_s: float, stt: str) -> str:
    lines = [
        f"# Eager answers on the speech tests (phone call, {stt})",
        "",
        f"`python -m bench.eager_answer --ttft {ttft:g}`, {time.strftime('%Y-%m-%d')}, 2 shared "
        f"cores, {took_s / 60:.1f} min. One call per utterance: {len(SENTENCES)} test sentences "
        f"in two voices (espeak, Piper) and the {len(utterances())} paused utterances; the chat "
        f"peer takes {ttft:g} s to its first token. Answer delay: end of speech → first bot "
        "audio at the caller, on the sentences.",
        "",
        "| configuration | eager kept / restarted / withdrawn | keep-rate | LLM requests per "
        "utterance | false ends merged | answer delay p50 / p95 | unanswered |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        started = sum(row.outcomes.values())
        rate = f"{100 * row.outcomes.get('kept', 0) / started:.0f} %" if started else "-"
        delays = sorted(row.delays)
        delay = (
            f"{1000 * statistics.median(delays):.0f} / "
            f"{1000 * delays[min(len(delays) - 1, int(0.95 * len(delays)))]:.0f} ms"
            if delays
            else "-"
        )
        split = " / ".join(str(row.outcomes.get(o, 0)) for o in OUTCOMES)
        lines.append(
            f"| {row.name} | {split} | {rate} | {row.requests / row.utterances:.2f} | "
            f"{row.merged} | {delay} | {row.unanswered} |"
        )
    return "\n".join(lines) + "\n"


async def run(asr_url: str, asr_model: str | None, ttft: float) -> list[Row]:
    with SpeechServer(voice="tone", sample_rate=24_000) as tts:
        return [
            await measure("eager_answer off", asr_url, asr_model, tts.url, ttft, eager=False),
            await measure("eager_answer on", asr_url, asr_model, tts.url, ttft, eager=True),
        ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ttft", type=float, default=0.3, help="chat peer's first-token delay")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--stt-url", help="a running realtime server instead of the offline one")
    parser.add_argument("--stt-model", help="its served model name")
    args = parser.parse_args(argv)
    speech_set()  # synthesize everything before anything is timed
    started = time.monotonic()
    if args.stt_url:
        rows = asyncio.run(run(args.stt_url, args.stt_model, args.ttft))
        return report(rows, args, started, f"STT at {args.stt_url}")
    port = free_port()
    argv_asr = [sys.executable, "-m", "agent.cli", "asr-server", "--port", str(port)]
    asr = subprocess.Popen(argv_asr, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        peers.wait_http(f"http://127.0.0.1:{port}/health", asr, timeout_s=120)
        rows = asyncio.run(run(f"ws://127.0.0.1:{port}/v1/realtime", None, args.ttft))
    finally:
        peers.stop_process(asr)
    return report(rows, args, started, "offline ASR, tiny.en")


def report(rows: list[Row], args: argparse.Namespace, started: float, stt: str) -> int:
    text = render(rows, args.ttft, time.monotonic() - started, stt)
    publish(text, None if args.no_write else RESULTS_MD)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
