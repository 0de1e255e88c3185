"""Realtime translation latency on the offline profile: end of speech → the first translated
caption, and → the first translated audio.

The server runs as ``voice-agent serve`` runs it on the default (offline) profile -- the CPU
ASR server (faster-whisper tiny.en behind vLLM's realtime protocol) and Piper's HTTP server as
child processes -- with ``translation.enabled`` (interpreter mode: captions and speech). The
LLM is the shared OpenAI-compatible chat fake (:mod:`tests.fakes.chat_server`), streaming a
fixed word-by-word "translation" after ``--first-token-ms`` (default 250 ms: a small model's
first token on a GPU); its own first-token time is stated in the report and subtracted.

A WebRTC caller (:mod:`tests.fakes.webrtc_caller`, aiortc: what the playground is) speaks
English sentences, trimmed so the last sample sent is the end of speech, one at a time with
the translation heard out in between. For each it notes, on one ``time.monotonic`` clock in
one process:

- **end of speech**: the last speech sample left the caller's microphone track;
- **source caption**: the final ``user-transcription`` RTVI message arrived (the captions'
  own delay, the baseline the translation adds to);
- **first translated caption**: the first ``translation`` server message for the utterance;
- **first translated audio**: the first loud audio frame after the end of speech.

The server's own ``turn_latency`` line for each turn (:mod:`agent.observability.turn_latency`)
splits the time into VAD stop, STT final, LLM first token, TTS first audio, and out.

    .venv/bin/python -m bench.translation [--turns 20] [--first-token-ms 250] [--quick]
        [--configurations final,interim,interpreted]

Three configurations, one after the other in the same run: ``final`` (the default: each
final transcript is translated), ``interim`` (``translation.interim``: the translation starts
on the stable interim text at the VAD stop; a final with other words is translated again) and
``interpreted`` (the two-way leg: an interpreted session of a phone caller, a Twilio media
stream from :mod:`tests.fakes.twilio_caller`, and an agent on WebRTC; the caller speaks, and
the agent's caption and audio are timed from the caller's end of speech).

Everything it starts, it stops. Results go to ``bench/results/translation.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import uvicorn
import websockets

from agent.local.supervisor import Supervisor
from agent.observability.metrics import STAGES
from bench import machine
from bench.report import publish
from bench.voice_latency import TurnLines, turn_lines
from tests.fakes.chat_server import ChatServer
from tests.fakes.serving import free_port
from tests.fakes.speech import speech_at
from tests.fakes.twilio_caller import TOKEN, TwilioCaller, ulaw_speech
from tests.fakes.webrtc_caller import CLIENT_RATE, WebRTCClient

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "translation.md"
SENTENCES = (
    "turn on the lights in the kitchen",
    "please call me back tomorrow morning",
    "what is the weather like in paris today",
    "i would like to book a table for two people",
)
FRENCH = {
    "turn": "allumez", "on": "", "the": "les", "lights": "lumières", "in": "dans",
    "kitchen": "cuisine", "please": "s'il vous plaît", "call": "rappelez", "me": "moi",
    "back": "", "tomorrow": "demain", "morning": "matin", "what": "quel", "is": "est",
    "weather": "temps", "like": "", "paris": "Paris", "today": "aujourd'hui", "i": "je",
    "would": "voudrais", "to": "", "book": "réserver", "a": "une", "table": "table",
    "for": "pour", "two": "deux", "people": "personnes",
}  # fmt: skip
SPEECH_PEAK = 500
"""Trimmed speech ends at its last sample louder than this (of 32767)."""
OPERATOR_TOKEN = "bench-operator"
TWILIO_WS = "/telephony/twilio/ws"


def french(messages: list[dict[str, Any]]) -> str:
    """The fake model's "translation": word by word, the same every time."""
    said = str(messages[-1]["content"]).lower().strip(".?!").replace(",", "").split()
    return " ".join(w for w in (FRENCH.get(word, word) for word in said) if w) + "."


def trimmed(text: str) -> bytes:
    """``text`` spoken at the caller's rate, from 100 ms before the first word to the last
    loud sample: the moment the last sample is sent is the end of speech."""
    pcm = np.frombuffer(speech_at(text, CLIENT_RATE), "<i2")
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > SPEECH_PEAK)
    start = max(0, int(loud[0]) - CLIENT_RATE // 10)
    return pcm[start : int(loud[-1]) + 1].tobytes()


@dataclass
class Turn:
    sentence: str
    marks: dict[str, float] = field(default_factory=dict)
    """Seconds from the end of speech: ``source``, ``caption``, ``audio``, and the server's
    stages (``vad_stop`` … ``first_audio_out``)."""
    problem: str | None = None
    retranslated: bool = False
    """Its early translation (on the interim text) was dropped for the final's."""


def words(text: str) -> list[str]:
    return "".join(c if c.isalnum() else " " for c in text.lower()).split()


def first_after(times: list[float], moment: float) -> float | None:
    return next((t for t in times if t >= moment), None)


def measure(
    client: WebRTCClient, lines: TurnLines, sentence: str, said_at: float, end: float
) -> Turn:
    """The turn's marks from the caller's messages, audio and the server's log line."""
    turn = Turn(sentence)
    arrivals = list(zip(client.received_at, client.messages, strict=True))
    sources = [
        t
        for t, m in arrivals
        if t >= said_at and m.get("type") == "user-transcription" and m["data"].get("final")
    ]
    captions = [
        (t, m["data"])
        for t, m in arrivals
        if t >= said_at
        and m.get("type") == "server-message"
        and m["data"].get("type") == "translation"
    ]
    audio = first_after(client.loud_at, end)
    if not sources or not captions or audio is None:
        turn.problem = f"missing: source {bool(sources)}, caption {bool(captions)}, audio {audio}"
        return turn
    final_source = next(m["data"]["text"] for t, m in arrivals if t == sources[0])
    kept = [t for t, c in captions if words(c["source"]) == words(final_source)]
    turn.marks.update(source=sources[0] - end, caption=captions[0][0] - end, audio=audio - end)
    if kept:
        turn.marks["kept"] = kept[0] - end
    turn.retranslated = len({c["source"] for _, c in captions}) > 1
    logged = lines.answered(said_at)
    if logged:
        out_at, line = logged[0]
        out_ms = line["first_audio_out_ms"]
        for stage in STAGES:  # placed on the caller's clock by when the line was logged
            if line[f"{stage}_ms"] is not None:
                turn.marks[stage] = out_at - (out_ms - line[f"{stage}_ms"]) / 1e3 - end
    return turn


@contextlib.asynccontextmanager
async def offline_server(
    llm_url: str, *, interim: bool, interpreted: bool = False
) -> AsyncIterator[str]:
    """The default profile with translation on (``interpreted``: instead, an operator token
    and Twilio auth, for interpreted sessions), served as ``voice-agent serve`` does; yields
    the server's base URL."""
    from agent.config import load_settings
    from agent.serve import local_children
    from agent.server import create_app

    asr_port, tts_port = free_port(), free_port()
    settings = load_settings(
        "default",
        overrides={
            "asr_server": {"port": asr_port},
            "stt": {"url": f"ws://127.0.0.1:{asr_port}/v1/realtime"},
            "tts": {"base_url": f"http://127.0.0.1:{tts_port}"},
            "llm": {"kind": "openai", "base_url": llm_url, "model": "bench-translator"},
            "translation": {"enabled": not interpreted, "interim": interim},
            "observability": {"log_turns": True},
            **(
                {"server": {"api_token": OPERATOR_TOKEN}, "twilio": {"auth_token": TOKEN}}
                if interpreted
                else {}
            ),
        },
    )
    async with Supervisor(local_children(settings)):
        server = uvicorn.Server(
            uvicorn.Config(create_app(settings), host="127.0.0.1", port=0, log_level="warning")
        )
        serving = asyncio.create_task(server.serve(), name="bench-server")
        try:
            while not server.started:
                if serving.done():
                    serving.result()
                    raise RuntimeError("the server exited before it started")
                await asyncio.sleep(0.02)
            yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
        finally:
            server.should_exit = True
            await asyncio.wait_for(serving, 20)


async def run(turns: int, first_token_s: float, *, interim: bool) -> list[Turn]:
    speech = {s: trimmed(s) for s in SENTENCES}
    results: list[Turn] = []
    name = "interim" if interim else "final"
    with (
        ChatServer(script=french, first_token_delay_s=first_token_s, record=False) as chat,
        turn_lines() as lines,
    ):
        async with offline_server(chat.base_url, interim=interim) as url:
            client = WebRTCClient()
            try:
                response = await client.connect(url)
                if response.status_code != 200:
                    raise RuntimeError(f"the server refused the call: {response.text}")
                await asyncio.sleep(1.5)  # the STT connects; the first frames flow
                for number in range(turns + 1):  # the first turn warms up, not kept
                    sentence = SENTENCES[number % len(SENTENCES)]
                    said_at = time.monotonic()
                    client.mic.say(speech[sentence])
                    while client.mic.speaking:  # noqa: ASYNC110 - the track drains it
                        await asyncio.sleep(0.01)
                    await asyncio.sleep(0.03)
                    end = client.mic.drained_at or time.monotonic()
                    await heard_out(client, end)
                    await asyncio.sleep(0.3)  # the turn's log line
                    turn = measure(client, lines, sentence, said_at, end)
                    if number == 0:
                        continue
                    results.append(turn)
                    shown = (
                        turn.problem
                        or f"caption {turn.marks['caption'] * 1e3:.0f} ms, "
                        f"audio {turn.marks['audio'] * 1e3:.0f} ms"
                    )
                    print(f"[{name}] turn {len(results)}: {shown}", file=sys.stderr)
            finally:
                await client.close()
    return results


async def run_interpreted(turns: int, first_token_s: float) -> list[Turn]:
    """The two-way leg: a phone caller (Twilio media stream, 8 kHz μ-law) and an agent in
    the browser (WebRTC) in one interpreted session; the caller speaks, the agent gets the
    caption and hears the translation (the way back is the same stages the other way)."""
    speech = {s: ulaw_speech(s, trim=True) for s in SENTENCES}
    results: list[Turn] = []
    with ChatServer(script=french, first_token_delay_s=first_token_s, record=False) as chat:
        async with offline_server(chat.base_url, interim=False, interpreted=True) as url:
            async with httpx.AsyncClient() as http:
                created = await http.post(
                    f"{url}/interpreter/sessions",
                    json={"caller_language": "English", "agent_language": "French"},
                    headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"},
                )
            created.raise_for_status()
            join = created.json()["join"]
            agent = WebRTCClient()
            try:
                response = await agent.connect(
                    url, request_data=join["agent"]["webrtc_request_data"]
                )
                if response.status_code != 200:
                    raise RuntimeError(f"the server refused the agent: {response.text}")
                async with websockets.connect(url.replace("http://", "ws://") + TWILIO_WS) as ws:
                    caller = TwilioCaller(ws)
                    try:
                        await caller.start(
                            parameters={
                                "token": caller.stream_token(),
                                **join["caller"]["webrtc_request_data"],
                            }
                        )
                        async with caller.quiet():  # both are told they are joined
                            await asyncio.sleep(1.0)
                            await heard_out(agent, time.monotonic())
                        for number in range(turns + 1):  # the first warms up, not kept
                            sentence = SENTENCES[number % len(SENTENCES)]
                            said_at = time.monotonic()
                            end = await caller.speak(speech[sentence])
                            async with caller.quiet():
                                await heard_out(agent, end)
                                await asyncio.sleep(0.3)
                            turn = Turn(sentence)
                            captions = [
                                t
                                for t, m in zip(agent.received_at, agent.messages, strict=True)
                                if t >= said_at
                                and m.get("type") == "server-message"
                                and m["data"].get("type") == "translation"
                                and m["data"].get("party") == "caller"
                            ]
                            audio = first_after(agent.loud_at, end)
                            if not captions or audio is None:
                                turn.problem = f"missing: caption {bool(captions)}, audio {audio}"
                            else:
                                turn.marks.update(caption=captions[0] - end, audio=audio - end)
                            if number == 0:
                                continue
                            results.append(turn)
                            shown = turn.problem or (
                                f"caption {turn.marks['caption'] * 1e3:.0f} ms, "
                                f"audio {turn.marks['audio'] * 1e3:.0f} ms"
                            )
                            print(f"[interpreted] turn {len(results)}: {shown}", file=sys.stderr)
                    finally:
                        await caller.close()
            finally:
                await agent.close()
    return results


async def heard_out(client: WebRTCClient, end: float, *, timeout_s: float = 15.0) -> None:
    """Wait for the translation's audio, then until it has been quiet for 0.6 s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if first_after(client.loud_at, end) is not None and (
            time.monotonic() - client.loud_at[-1] > 0.6
        ):
            return
        await asyncio.sleep(0.05)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "(uptime unavailable)"


LABELS = {
    "source": "source caption (final user-transcription at the caller)",
    "caption": "**first translated caption** (translation server-message at the caller)",
    "kept": "first caption of the kept translation (its source = the final's words)",
    "audio": "**first translated audio** (first loud frame at the caller)",
    "vad_stop": "server: VAD stop",
    "stt_final": "server: STT final transcript",
    "llm_first_token": "server: LLM first token (translation's first piece spoken)",
    "tts_first_audio": "server: TTS first audio",
    "first_audio_out": "server: first audio out",
}
CONFIGURATIONS = {
    "final": "translate the final transcript (the default)",
    "interim": "`translation.interim`: start on the stable interim text at the VAD stop",
    "interpreted": "an interpreted session: a phone caller (Twilio media stream) speaks, the "
    "agent in the browser (WebRTC) gets the caption and hears the translation (no source "
    "caption or server stages: the agent's page shows the caller's words with their "
    "translation)",
}


def column(turns: list[Turn], key: str) -> list[float]:
    return [t.marks[key] * 1e3 for t in turns if t.problem is None and key in t.marks]


def cell(values: list[float]) -> str:
    if not values:
        return "- | -"
    return f"{statistics.median(values):.0f} | {percentile(values, 95):.0f}"


def report(runs: dict[str, list[Turn]], first_token_s: float, load: tuple[str, str]) -> str:
    ms = first_token_s * 1e3
    names = list(runs)
    header = " | ".join(f"{n} p50 | {n} p95" for n in names)
    rows = [
        f"| {label} | " + " | ".join(cell(column(runs[n], key)) for n in names) + " |"
        for key, label in LABELS.items()
    ]
    measured = ", ".join(
        f"{n}: {sum(t.problem is None for t in runs[n])} of {len(runs[n])}" for n in names
    )
    final = runs.get("final", [])
    beyond = [c - ms for c in column(final, "caption")]
    added = [c - s for c, s in zip(column(final, "caption"), column(final, "source"), strict=True)]
    audio = [a - ms for a in column(final, "audio")]
    p50_beyond = statistics.median(beyond) if beyond else float("nan")
    lines = [
        "# Realtime translation latency (offline profile)",
        "",
        f"Run {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC with "
        f"`python -m bench.translation`; turns measured ({measured}), each configuration "
        "after one warm-up turn not kept.",
        f"Machine: {machine.describe()}. Load (other sessions share it): `uptime` before: "
        f"`{load[0]}`; after: `{load[1]}`.",
        "",
        "Setup: `voice-agent serve`'s default profile (CPU ASR server with faster-whisper "
        "tiny.en, Piper HTTP server, both child processes) with `translation.enabled` "
        "(interpreter mode: captions and speech, English → French); a WebRTC caller (aiortc) "
        "speaking espeak sentences trimmed to their last loud sample; the LLM is the "
        "OpenAI-compatible chat fake streaming a fixed word-by-word translation, **its "
        f"first-token delay {ms:.0f} ms** (a model's own time, stated and subtracted below). "
        "Times are ms from the end of speech, on the caller's clock. Configurations, one "
        "after the other in the same run: "
        + "; ".join(f"`{n}`: {CONFIGURATIONS[n]}" for n in names)
        + ".",
        "",
        f"| from the end of speech to | {header} |",
        "|---|" + "---:|" * (2 * len(names)),
        *rows,
        "",
        f"- `final`: first translated caption **beyond the LLM's own first-token time** "
        f"({ms:.0f} ms): p50 **{p50_beyond:.0f} ms**, p95 "
        f"{percentile(beyond, 95) if beyond else 0:.0f} ms (goal: p50 ≤ 400 ms).",
        "- `final`: what the translation adds to the source caption (first translated caption "
        f"minus source caption): p50 {statistics.median(added) if added else 0:.0f} ms, p95 "
        f"{percentile(added, 95) if added else 0:.0f} ms, of which {ms:.0f} ms is the model's "
        "first token.",
        f"- `final`: first translated audio beyond the LLM's first token: p50 "
        f"{statistics.median(audio) if audio else 0:.0f} ms, p95 "
        f"{percentile(audio, 95) if audio else 0:.0f} ms.",
    ]
    if "interpreted" in runs:
        leg = runs["interpreted"]
        caption = [c - ms for c in column(leg, "caption")]
        heard = [a - ms for a in column(leg, "audio")]
        if caption and heard:
            lines.append(
                "- `interpreted`: the agent's first translated caption beyond the LLM's first "
                f"token: p50 **{statistics.median(caption):.0f} ms**, p95 "
                f"{percentile(caption, 95):.0f} ms; first translated audio beyond it: p50 "
                f"{statistics.median(heard):.0f} ms, p95 {percentile(heard, 95):.0f} ms."
            )
    if "interim" in runs:
        again = sum(t.retranslated for t in runs["interim"] if t.problem is None)
        lines.append(
            f"- `interim`: {again} of {sum(t.problem is None for t in runs['interim'])} "
            "utterances were translated twice (the interim text at the VAD stop lacked words "
            "the final had; only the final's translation was kept and spoken)."
        )
    for name in names:
        problems = [t for t in runs[name] if t.problem]
        if problems:
            lines += ["", f"`{name}` turns not measured:"]
            lines += [f"- {t.sentence}: {t.problem}" for t in problems]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.translation")
    parser.add_argument("--turns", type=int, default=20, help="measured turns (default 20)")
    parser.add_argument(
        "--first-token-ms", type=float, default=250.0, help="the fake LLM's first-token delay"
    )
    parser.add_argument(
        "--configurations",
        default=",".join(CONFIGURATIONS),
        help=f"comma-separated, of {', '.join(CONFIGURATIONS)} (default: all)",
    )
    parser.add_argument("--quick", action="store_true", help="4 turns, no results file")
    args = parser.parse_args(argv)
    turns = 4 if args.quick else args.turns
    names = [n.strip() for n in args.configurations.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONFIGURATIONS]
    if unknown or not names:
        parser.error(f"unknown configuration(s) {unknown}: pick from {', '.join(CONFIGURATIONS)}")
    before = uptime()
    runs: dict[str, list[Turn]] = {}
    for name in names:
        if name == "interpreted":
            try:
                runs[name] = asyncio.run(run_interpreted(turns, args.first_token_ms / 1e3))
            except Exception as exc:  # the other legs' figures still get written
                print(f"[interpreted] failed: {exc!r}", file=sys.stderr)
                runs[name] = [Turn("(all)", problem=f"the leg failed: {exc!r:.200}")]
        else:
            runs[name] = asyncio.run(
                run(turns, args.first_token_ms / 1e3, interim=name == "interim")
            )
    text = report(runs, args.first_token_ms / 1e3, (before, uptime()))
    publish(text, None if args.quick else RESULTS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
