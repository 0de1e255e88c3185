"""Many calls on one llama.cpp server: what the text end-of-turn model's answers become.

The offline profile asks its one llama.cpp server (SmolLM2 behind llama-cpp-python, which
writes one answer at a time) both for the answers and, with ``turn.text_model`` on, for p(the
user's sentence ends here) before a request is answered. Past ``turn.text_timeout_s`` (0.35 s)
the turn decides without it (:mod:`agent.turns.adaptive_stop`). This bench plays N
conversations at once against one server as the product starts it, each turn as the product
runs it: the model given the conversation to read when the caller begins to speak, asked with
the product's timeout when the caller has spoken, then the answer streamed; between turns the
caller listens and speaks (0.5-1.5 s each, seeded). Per N: how many of the model's questions
were answered in time, their time, and the answers' time to first token, against N = 1 on the
first server in the same run. The servers: llama-cpp-python's own as the profile first ran it
(``stock``: every position's logits kept, and one-token logprobs log-softmaxed over the whole
conversation), and ``agent.local.llm_app``, which reads the last position only, with the
questions on the answers' context behind their lock (``shared``, the default) or on a context
of their own, a sequence per call (``slots``, ``--question_slots 4``). The modes: the model asked
before every answer (``every``), and as the product asks it, resting for three questions after
two late answers in a row (``rests``).

    .venv/bin/python -m bench.text_model_calls [--calls 1,2,4] [--servers shared,slots]
        [--modes rests] [--rounds 2] [--no-write]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from agent.config import LLMSettings, TurnSettings
from agent.turns.text_end_of_turn import REST_FOR, TextEndOfTurn
from bench import peers
from bench.local_llm import percentile, stream_chat
from bench.machine import describe
from bench.report import publish
from bench.text_model_cost import GREETING, TURNS

RESULTS_MD = Path(__file__).parent / "results" / "text_model_calls.md"
SCRIPT = TURNS * 2
"""A conversation: the cost bench's six turns, twice over (a longer call; the prompt grows)."""
LISTENING_S = (0.5, 1.5)
"""The caller hears the answer out: seconds from its end to the caller's next words."""
SPEAKING_S = (0.5, 1.5)
"""The caller speaks the next turn: seconds from the first word (when the product has the
model read the conversation, ``TextEndOfTurn.prime``) to the question."""


@dataclass
class Leg:
    """One N: every model question and answer of its conversations."""

    asked: int = 0
    waits: list[float] = field(default_factory=list)
    """What each turn spent on the model: its answer, the timeout, or nothing (resting)."""
    in_time: list[float] = field(default_factory=list)
    ttfts: list[float] = field(default_factory=list)
    in_time_by_turn: list[int] = field(default_factory=lambda: [0] * len(SCRIPT))
    """Questions answered in time, per turn of the conversation (the prompt grows)."""


MODES: dict[str, tuple[str, int]] = {
    "every": ("asked every turn", 0),
    "rests": ("rests after late answers", REST_FOR),
}
"""Each mode's name in the table and the call's client's ``rest_for``."""

SERVERS: dict[str, tuple[str, bool, tuple[str, ...]]] = {
    "stock": ("llama-cpp-python's own", True, ()),
    "shared": ("`agent.local.llm_app`, questions on the answers' context (default)", False, ()),
    "slots": ("`agent.local.llm_app`, a sequence per call (`--question_slots 4`)", False, ("4",)),
}
"""Each server's name in the table, whether it is the stock one (``peers.STOCK_LLM_SERVER``),
and its ``--question_slots`` (none: the profile's)."""


async def conversation(
    llm: LLMSettings, leg: Leg, rng: random.Random, timeout_s: float, mode: str
) -> None:
    system = LLMSettings().system_prompt
    messages = [{"role": "system", "content": system}, {"role": "assistant", "content": GREETING}]
    rest_for = MODES[mode][1]
    model = TextEndOfTurn(str(llm.base_url), llm.model, timeout_s=timeout_s, rest_for=rest_for)
    async with httpx.AsyncClient(timeout=120) as http:
        try:
            await asyncio.sleep(rng.uniform(*LISTENING_S))  # calls do not start in step
            for turn, words in enumerate(SCRIPT):
                said = [(m["role"], m["content"]) for m in messages]
                priming = asyncio.create_task(model.prime(said))  # the caller begins to speak
                await asyncio.sleep(rng.uniform(*SPEAKING_S))
                started = time.perf_counter()
                p = await model.probability(words, [(m["role"], m["content"]) for m in messages])
                leg.asked += 1
                leg.waits.append(time.perf_counter() - started)
                if p is not None:
                    leg.in_time.append(time.perf_counter() - started)
                    leg.in_time_by_turn[turn] += 1
                messages.append({"role": "user", "content": words})
                answer = await stream_chat(http, llm, messages, temperature=0)
                messages.append({"role": "assistant", "content": answer.text.strip()})
                leg.ttfts.append(answer.ttft_s)
                await priming
                await asyncio.sleep(rng.uniform(*LISTENING_S))
        finally:
            await model.close()


async def play(
    llm: LLMSettings, calls: int, rounds: int, seed: int, timeout_s: float, mode: str
) -> Leg:
    leg = Leg()
    for round_ in range(rounds):
        rngs = [random.Random(seed + 1000 * round_ + n) for n in range(calls)]
        await asyncio.gather(*(conversation(llm, leg, rng, timeout_s, mode) for rng in rngs))
    return leg


def ms(values: list[float], q: float) -> str:
    return f"{1000 * percentile(values, q):.0f}" if values else "-"


def render(
    legs: dict[tuple[str, int, str], Leg], rounds: int, took_s: float, load: tuple[float, float]
) -> str:
    when = f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC"
    timeout_s = TurnSettings().text_timeout_s
    base = next(iter(legs.values()))  # the first server, the fewest calls, the first mode
    lines = [
        "## Many calls on one llama.cpp server: the text model's answers "
        "(`bench/text_model_calls.py`)",
        "",
        f"{when}, {describe()}; load average {load[0]:.1f} at the start and {load[1]:.1f} at "
        f"the end, {took_s / 60:.1f} min. SmolLM2-135M-Instruct Q4_1 behind llama.cpp's server "
        "as the default profile starts it (1 thread, one answer at a time). Each call "
        f"plays a twelve-turn conversation, {rounds} rounds: before each answer the model is asked "
        f"with the product's timeout ({timeout_s} s), then the answer is streamed (at most 60 "
        f"tokens); {LISTENING_S[0]:g}-{LISTENING_S[1]:g} s from an answer's end to the "
        f"caller's first word, when the model is given the conversation to read "
        f"(`TextEndOfTurn.prime`, as the product does), and {SPEAKING_S[0]:g}-"
        f"{SPEAKING_S[1]:g} s more to the question.",
        "",
        "| server | calls at once | the model | answered in time | in time, per turn 1-12 | "
        "in-time answer p50 / p95 | turn's wait for it, mean | answer's first token p50 / p95 | "
        "answer p95 / one call's |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    base_p95 = percentile(base.ttfts, 0.95)
    for (server, calls, mode), leg in legs.items():
        ratio = f"{percentile(leg.ttfts, 0.95) / base_p95:.2f}x"
        lines.append(
            f"| {SERVERS[server][0]} | {calls} | {MODES[mode][0]} | "
            f"{len(leg.in_time)} of {leg.asked} | "
            f"{' '.join(map(str, leg.in_time_by_turn))} (of {leg.asked // len(SCRIPT)}) | "
            f"{ms(leg.in_time, 0.5)} / "
            f"{ms(leg.in_time, 0.95)} ms | {1000 * sum(leg.waits) / len(leg.waits):.0f} ms | "
            f"{ms(leg.ttfts, 0.5)} / {ms(leg.ttfts, 0.95)} ms | "
            f"{ratio} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", default="1,2,4", help="comma list of calls at once")
    parser.add_argument("--servers", default="shared,slots", help=f"of {', '.join(SERVERS)}")
    parser.add_argument("--modes", default="rests", help=f"of {', '.join(MODES)}")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    counts = sorted({int(n) for n in args.calls.split(",")})
    servers, modes = args.servers.split(","), args.modes.split(",")
    if unknown := (set(servers) - set(SERVERS)) | (set(modes) - set(MODES)):
        parser.error(f"unknown server or mode: {', '.join(sorted(unknown))}")
    timeout_s = TurnSettings().text_timeout_s
    started, load_before = time.monotonic(), os.getloadavg()[0]
    legs: dict[tuple[str, int, str], Leg] = {}
    for server in servers:
        _, stock, slots = SERVERS[server]
        extra = ("--question_slots", *slots) if slots else ()
        with peers.local_llm_running(*extra, stock=stock) as llm:
            asyncio.run(play(llm, 1, 1, args.seed, timeout_s, modes[0]))  # warm-up: not counted
            for calls in counts:
                for mode in modes:
                    legs[(server, calls, mode)] = asyncio.run(
                        play(llm, calls, args.rounds, args.seed, timeout_s, mode)
                    )
    report = render(
        legs, args.rounds, time.monotonic() - started, (load_before, os.getloadavg()[0])
    )
    publish(report, None if args.no_write else RESULTS_MD)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
