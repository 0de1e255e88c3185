"""Turn-taking on a real phone call: does the bot talk over people who pause?

Plays the paused-speech set (``tests/fakes/paused_speech.py``: clause pauses, hesitations,
lists, digits read one by one, a long sentence with many commas, and short complete
questions; pauses of 300-900 ms) through a Twilio call to our server, one call per utterance,
for each end-of-turn configuration, and prints per configuration:

- false end-of-turns per minute of speech: the bot's answer was heard before the person had
  finished (a loud frame from the bot before the utterance's true end);
- missed ends: a complete question with no answer heard within 2 s of its end;
- end of speech → first bot audio, p50/p95, on the complete questions.

The STT is the offline ASR server (faster-whisper tiny.en, a child process), the LLM the
offline responder, the TTS an instant tone; so the figures are about end-of-turn, not models.

    .venv/bin/python -m bench.turn_taking [--configs default,vad_stop_0.5,...] [--no-write]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import websockets

from bench import peers
from tests.fakes.paused_speech import Utterance, utterances
from tests.fakes.serving import background, free_port
from tests.fakes.speech_server import SpeechServer
from tests.fakes.twilio_caller import FRAME_S, SILENCE, TwilioCaller, payloads, to_ulaw

ROOT = Path(__file__).resolve().parent.parent
RESULTS_MD = ROOT / "bench" / "results" / "turn_taking.md"
ANSWER_WINDOW_S = 2.0
CONFIGS: dict[str, dict[str, Any]] = {
    "default (vad_stop 0.2 s)": {},
    "vad_stop 0.5 s": {"vad_stop_secs": 0.5},
    "vad_stop 0.8 s": {"vad_stop_secs": 0.8},
    "smart_turn (Smart Turn v3)": {"smart_turn": True},
    "transcript-aware (+0.7 s)": {"end_of_turn": "transcript", "unfinished_wait_s": 0.7},
    "transcript-aware (+0.7 s) + vad_stop 0.5 s": {
        "end_of_turn": "transcript",
        "unfinished_wait_s": 0.7,
        "vad_stop_secs": 0.5,
    },
}


@dataclass
class Outcome:
    utterance: Utterance
    speech_s: float
    false_ends: int
    """Answers that began (after a quiet gap) before the utterance's true end."""
    answered_after_s: float | None

    @property
    def false_end(self) -> bool:
        return self.false_ends > 0


@dataclass
class Row:
    name: str
    outcomes: list[Outcome] = field(default_factory=list)


async def play(url: str, utterance: Utterance, index: int) -> Outcome:
    pcm, end_s = utterance.audio(8000)
    async with websockets.connect(url, compression=None) as ws:
        caller = TwilioCaller(ws, f"CA{index:06d}", stream_sid=f"MZ{index:06d}")
        await caller.start()
        await caller.send([SILENCE] * int(0.6 / FRAME_S))
        began = time.monotonic()
        await caller.send(payloads(to_ulaw(pcm)))
        true_end = began + end_s
        await caller.send([SILENCE] * int(4.0 / FRAME_S))
        await caller.stop()
        await caller.close()
    answer = caller.first_loud(true_end)
    return Outcome(
        utterance,
        end_s,
        false_ends=answer_starts(caller.loud_at, began, true_end),
        answered_after_s=None if answer is None else answer - true_end,
    )


def answer_starts(loud_at: list[float], after: float, before: float, gap_s: float = 0.3) -> int:
    """How many separate answers began in ``[after, before)``: loud frames after a quiet gap."""
    starts, previous = 0, -float("inf")
    for t in loud_at:
        if after <= t < before and t - previous > gap_s:
            starts += 1
        previous = t
    return starts


def settings_for(asr_url: str, tts_url: str, turn: dict[str, Any]) -> Any:
    from agent.config import load_settings

    return load_settings(
        "default",
        overrides={
            "server": {"start_local_services": False},
            "stt": {"url": asr_url},
            "tts": {"kind": "openai", "base_url": f"{tts_url}/v1", "sample_rate": 24_000},
            "turn": turn,
        },
    )


async def measure(name: str, settings: Any) -> Row:
    from agent.server import create_app

    row = Row(name)
    with background(create_app(settings)) as url:
        ws_url = url.replace("http://", "ws://") + "/telephony/twilio/ws"
        for index, utterance in enumerate(utterances()):
            row.outcomes.append(await play(ws_url, utterance, index))
    return row


def render(rows: list[Row], took_s: float) -> str:
    lines = [
        "# Turn-taking on the paused-speech set (phone call, offline ASR)",
        "",
        f"`python -m bench.turn_taking`, {time.strftime('%Y-%m-%d')}, 2 shared cores, "
        f"{took_s / 60:.1f} min. One call per utterance; a false end is bot audio heard before "
        f"the utterance's true end; a missed end is a complete question with no answer heard "
        f"within {ANSWER_WINDOW_S:g} s.",
        "",
        "| configuration | false ends (utterances cut) | per minute of speech | missed ends | "
        "answer after a complete question p50 / p95 |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        minutes = sum(o.speech_s for o in row.outcomes) / 60
        false_ends = sum(o.false_ends for o in row.outcomes)
        cut = sum(o.false_end for o in row.outcomes)
        questions = [o for o in row.outcomes if o.utterance.complete_question]
        missed = sum(
            o.answered_after_s is None or o.answered_after_s > ANSWER_WINDOW_S for o in questions
        )
        delays = sorted(o.answered_after_s for o in questions if o.answered_after_s is not None)
        latency = (
            f"{1000 * statistics.median(delays):.0f} / {1000 * delays[-1]:.0f} ms"
            if delays
            else "-"
        )
        lines.append(
            f"| {row.name} | {false_ends} ({cut} of {len(row.outcomes)}) | "
            f"{false_ends / minutes:.1f} | {missed} of {len(questions)} | {latency} |"
        )
    lines += ["", "Per utterance (false ends · answer heard after its end):", ""]
    for row in rows:
        marks = ", ".join(
            f"{o.utterance.kind}: {o.false_ends or 'ok'} · "
            f"{'-' if o.answered_after_s is None else f'{o.answered_after_s:.2f} s'}"
            for o in row.outcomes
        )
        lines.append(f"- {row.name}: {marks}")
    return "\n".join(lines) + "\n"


async def run(args: argparse.Namespace, asr_url: str) -> list[Row]:
    with SpeechServer(voice="tone", sample_rate=24_000) as tts:
        return [
            await measure(name, settings_for(asr_url, tts.url, CONFIGS[name]))
            for name in args.configs
        ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", help=f"comma list of: {'; '.join(CONFIGS)}")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    args.configs = [c.strip() for c in args.configs.split(",")] if args.configs else list(CONFIGS)
    unknown = [c for c in args.configs if c not in CONFIGS]
    if unknown:
        parser.error(f"unknown configurations {unknown}; known: {list(CONFIGS)}")
    utterances()  # synthesize the set before anything is timed
    for utterance in utterances():
        utterance.audio(8000)
    port = free_port()
    argv_asr = [sys.executable, "-m", "agent.cli", "asr-server", "--port", str(port)]
    asr = subprocess.Popen(argv_asr, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started = time.monotonic()
    try:
        peers.wait_http(f"http://127.0.0.1:{port}/health", asr, timeout_s=120)
        rows = asyncio.run(run(args, f"ws://127.0.0.1:{port}/v1/realtime"))
    finally:
        peers.stop_process(asr)
    report = render(rows, time.monotonic() - started)
    print(report)
    if not args.no_write:
        RESULTS_MD.write_text(report)
        print(f"written to {RESULTS_MD}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
