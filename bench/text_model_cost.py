"""What the text end-of-turn model costs the answers of the local LLM it shares a server with.

The offline profile asks its one llama.cpp server (SmolLM2 behind llama-cpp-python) both for
the answers and, with ``turn.text_model`` on, for p(the user's sentence ends here)
(:mod:`agent.turns.text_end_of_turn`). The server keeps the last prompt it read and reads a new
one only past the part they share; an answer's prompt is the whole conversation. When the
model's question held only the bot's last message and the user's words, each next answer read
the whole conversation again; it now holds the answer's own conversation up to the user's
words, and this bench shows what that costs.

For each server setting (as the product starts it, the questions read on the answers' context,
whose kept prompt they then share; and on a context of their own, a sequence per call,
``--question_slots 4``), a six-turn conversation is played
twice: answers only, and with the product's client asking the model about the user's words
before each answer (after giving it the conversation to read, as the product does when the
user begins to speak; that read is not timed). Per turn: time to the answer's first token
(request sent → first streamed content, the whole history in the request, temperature 0), and
the model's own answer time.

    .venv/bin/python -m bench.text_model_cost [--rounds 2] [--no-write]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

from agent.config import LLMSettings
from agent.turns.text_end_of_turn import TextEndOfTurn
from bench import peers
from bench.local_llm import stream_chat
from bench.machine import describe
from bench.report import publish

RESULTS_MD = Path(__file__).parent / "results" / "text_model_cost.md"
GREETING = "Hello! How can I help you today?"
TURNS = (
    "What is the weather like in Paris today?",
    "And tomorrow?",
    "Can you book a table for two at eight?",
    "Make it nine instead.",
    "What time is it now?",
    "Thanks, that is all.",
)
SERVERS = {
    "as the product starts it (questions on the answers' context)": [],
    "questions in a sequence of the call's own (--question_slots 4)": ["--question_slots", "4"],
}


async def conversation(llm: LLMSettings, ask_model: bool) -> tuple[list[float], list[float]]:
    """Answer times to first token per turn, and the model's answer times (``ask_model``)."""
    system = LLMSettings().system_prompt
    messages = [{"role": "system", "content": system}, {"role": "assistant", "content": GREETING}]
    model = TextEndOfTurn(str(llm.base_url), llm.model, timeout_s=10.0)
    ttfts: list[float] = []
    asked: list[float] = []
    async with httpx.AsyncClient(timeout=120) as http:
        try:
            for words in TURNS:
                if ask_model:
                    said = [(m["role"], m["content"]) for m in messages]
                    await model.prime(said)  # as the product does when the user begins to speak
                    started = time.perf_counter()
                    await model.probability(words, said)
                    asked.append(time.perf_counter() - started)
                messages.append({"role": "user", "content": words})
                answer = await stream_chat(http, llm, messages, temperature=0)
                messages.append({"role": "assistant", "content": answer.text.strip()})
                ttfts.append(answer.ttft_s)
        finally:
            await model.close()
    return ttfts, asked


def render(
    rows: dict[tuple[str, bool], tuple[list[float], list[float]]],
    rounds: int,
    took_s: float,
    load: tuple[float, float],
) -> str:
    header = (
        "| server | text model asked before each answer | "
        + " | ".join(f"turn {i + 1}" for i in range(len(TURNS)))
        + " | the model's answer, mean |"
    )
    when = f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC"
    lines = [
        "## The text model's cost to the local LLM's answers (`bench/text_model_cost.py`)",
        "",
        f"{when}, {describe()}; load average {load[0]:.1f} at the start and {load[1]:.1f} at "
        f"the end, {took_s / 60:.1f} min. SmolLM2-135M-Instruct Q4_1 behind llama.cpp's server "
        "(agent.local.llm_app), 1 thread (the default profile's setting); a six-turn "
        f"conversation, {rounds} rounds. Each cell: the answer's time to first token, median "
        "of the rounds (the whole history in each request).",
        "",
        header,
        "|---|---|" + "---|" * (len(TURNS) + 1),
    ]
    for (server, ask_model), (ttfts, asked) in rows.items():
        per_turn = [statistics.median(ttfts[i :: len(TURNS)]) for i in range(len(TURNS))]
        cells = " | ".join(f"{1000 * t:.0f} ms" for t in per_turn)
        model = f"{1000 * statistics.mean(asked):.0f} ms" if asked else "-"
        lines.append(f"| {server} | {'yes' if ask_model else 'no'} | {cells} | {model} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    started, load_before = time.monotonic(), os.getloadavg()[0]
    rows: dict[tuple[str, bool], tuple[list[float], list[float]]] = {}
    for server, extra in SERVERS.items():
        with peers.local_llm_running(*extra) as llm:
            for ask_model in (False, True):
                ttfts: list[float] = []
                asked: list[float] = []
                for _ in range(args.rounds):
                    t, a = asyncio.run(conversation(llm, ask_model))
                    ttfts += t
                    asked += a
                rows[(server, ask_model)] = (ttfts, asked)
    report = render(
        rows, args.rounds, time.monotonic() - started, (load_before, os.getloadavg()[0])
    )
    publish(report, None if args.no_write else RESULTS_MD)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
