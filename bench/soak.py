"""Soak: N phone calls for M minutes with random hang-ups and injected faults; what leaks?

Our server (``agent.server.create_app``, the product pipeline, Twilio path) runs in a child
process pinned to one core, as in ``bench/capacity.py``; its STT, LLM and TTS are the instant
peers of ``bench/peers.py``, reached through TCP fault proxies (``tests/fakes``) that this
process drives: every ``--fault-every`` seconds one fault, drawn at random, hits the links open
at that moment (reset the STT links, freeze them for 2 s, reset the LLM/TTS links). N callers
speak Piper-voiced questions in real time; each call lasts 5-60 s and ends at random by a
``stop``, a clean close or a dropped connection, and the caller dials again.

It prints, per minute and at the end (after every call has ended): the server's RSS and its
growth over the first measured minute's (after a warm-up minute of calls that loads the models
and runs them at full concurrency), open fds, open connections to the STT, calls placed, calls
answered (at least one answer heard), calls lost (refused, or broken by the server), and the
faults injected. Goals: 0 lost, 0 STT connections left, RSS growth under 5 %.

    .venv/bin/python -m bench.soak [--calls 50] [--minutes 10] [--warmup-minutes 1]
        [--fault-every 15] [--seed 1] [--turn KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench import peers
from bench.capacity import (
    CLIENT_CORE,
    SERVER_CORE,
    cpu_seconds,
    describe_turn,
    load_average,
    parse_turn,
    question_frames,
    rss_bytes,
)
from bench.peers import Peers
from tests.fakes.serving import free_port, open_fds, tcp_connections_to
from tests.fakes.tcp_fault_proxy import TcpFaultProxy
from tests.fakes.twilio_caller import FRAME_S, SILENCE, TwilioCaller

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Tally:
    placed: int = 0
    answered: int = 0
    refused: int = 0
    broken: int = 0
    faults: int = 0


async def one_call(url: str, index: int, rng: random.Random, tally: Tally) -> None:
    import websockets

    tally.placed += 1
    length_s = rng.uniform(5, 60)
    ending = rng.choice(["stop", "close", "drop"])
    try:
        async with websockets.connect(url, compression=None, max_queue=None) as ws:
            caller = TwilioCaller(ws, f"CA{index:08d}", keep_events=False)
            await caller.start()
            deadline = time.monotonic() + length_s
            while time.monotonic() < deadline and not caller.closed.is_set():
                await caller.send([SILENCE] * int(rng.uniform(1.0, 2.5) / FRAME_S))
                await caller.send(rng.choice(question_frames()))
            await caller.send([SILENCE] * int(1.5 / FRAME_S))
            if caller.closed.is_set():  # the server ended a call the caller was still in
                tally.broken += 1
                return
            if caller.media_received:
                tally.answered += 1
            if ending == "stop":
                await caller.stop()
                await ws.close()
            elif ending == "close":
                await ws.close()
            else:
                assert ws.transport is not None
                ws.transport.abort()
    except (OSError, websockets.InvalidStatus, websockets.ConnectionClosed):
        tally.refused += 1


async def caller_loop(url: str, index: int, until: float, seed: int, tally: Tally) -> None:
    rng = random.Random(seed * 1000 + index)
    await asyncio.sleep(rng.uniform(0, 5))  # not all at once
    call = 0
    while time.monotonic() < until:
        await one_call(url, index * 10_000 + call, rng, tally)
        call += 1


async def inject_faults(
    stt: TcpFaultProxy, http: TcpFaultProxy, every_s: float, until: float, tally: Tally
) -> None:
    rng = random.Random(7)
    while time.monotonic() + every_s < until:
        await asyncio.sleep(every_s)
        fault = rng.choice(["reset_stt", "freeze_stt", "reset_http"])
        tally.faults += 1
        if fault == "reset_stt":
            stt.reset()
        elif fault == "freeze_stt":
            stt.freeze()
            await asyncio.sleep(2.0)
            stt.thaw()
        else:
            http.reset()


async def soak(args: argparse.Namespace, at: Peers) -> int:
    async with (
        TcpFaultProxy(at.realtime_port) as stt_proxy,
        TcpFaultProxy(at.http_port) as http_proxy,
    ):
        port = free_port()
        argv = ["-m", "bench.capacity", "--serve", "ours", str(port)]
        argv += [str(stt_proxy.port), str(http_proxy.port), str(SERVER_CORE)]
        argv += ["--turn-json", json.dumps(args.turn)]
        server = await asyncio.create_subprocess_exec(
            sys.executable, *argv, cwd=ROOT, stdout=args.log_file, stderr=args.log_file
        )
        try:
            await wait_healthy(f"http://127.0.0.1:{port}/healthz", server)
            url = f"ws://127.0.0.1:{port}/telephony/twilio/ws"

            def stt_links() -> int:
                return tcp_connections_to(stt_proxy.port, pid=server.pid)

            tally = Tally()
            started = time.monotonic()
            until = started + (args.warmup_minutes + args.minutes) * 60
            work = [
                asyncio.create_task(caller_loop(url, i, until, args.seed, tally))
                for i in range(args.calls)
            ]
            work.append(
                asyncio.create_task(
                    inject_faults(stt_proxy, http_proxy, args.fault_every, until, tally)
                )
            )
            print(f"Turn settings: {describe_turn('ours', args.turn)}.\n")
            print(
                "| minute | RSS MB (minute's low) | RSS vs minute 1 | fds | STT links | placed "
                "| answered | refused | broken | faults | server CPU % | load |"
            )
            print("|---|---|---|---|---|---|---|---|---|---|---|---|")
            base_rss, cpu_at, wall_at = 0, cpu_seconds(server.pid), time.monotonic()
            warmup = int(args.warmup_minutes)
            for minute in range(1 - warmup, int(args.minutes) + 1):
                # The minute's lowest RSS: what calls and caches hold (a Smart Turn run in
                # flight needs ~19 MB per row for ~0.1 s; sampled once, it would read as growth).
                rss = rss_bytes(server.pid)
                while (left := started + (minute + warmup) * 60 - time.monotonic()) > 0:
                    await asyncio.sleep(min(left, 0.25))
                    rss = min(rss, rss_bytes(server.pid))
                if minute == 1:  # the warm-up minutes loaded the models and filled the pools
                    base_rss = rss
                cpu, wall = cpu_seconds(server.pid), time.monotonic()
                busy = 100 * (cpu - cpu_at) / (wall - wall_at)
                cpu_at, wall_at = cpu, wall
                growth = f"{100 * (rss - base_rss) / base_rss:+.1f} %" if base_rss else "warm-up"
                print(
                    f"| {minute if minute > 0 else f'warm-up {minute + warmup}'} "
                    f"| {rss / 1e6:.0f} | {growth} "
                    f"| {open_fds(server.pid)} | {stt_links()} "
                    f"| {tally.placed} | {tally.answered} | {tally.refused} | {tally.broken} "
                    f"| {tally.faults} | {busy:.0f} | {load_average()} |",
                    flush=True,
                )
            await asyncio.gather(*work)
            await asyncio.sleep(5)  # every call has ended: what is left?
            rss = rss_bytes(server.pid)
            base_rss = base_rss or rss  # a run shorter than a minute has no minute row
            print(
                f"| end, no calls | {rss / 1e6:.0f} | {100 * (rss - base_rss) / base_rss:+.1f} % "
                f"| {open_fds(server.pid)} | {stt_links()} "
                f"| {tally.placed} | {tally.answered} | {tally.refused} | {tally.broken} "
                f"| {tally.faults} | | {load_average()} |"
            )
            lost = tally.refused + tally.broken
            print(f"\ncalls lost: {lost} of {tally.placed}; faults injected: {tally.faults}")
            return 0 if lost == 0 else 1
        finally:
            if server.returncode is None:
                server.terminate()
                try:
                    await asyncio.wait_for(server.wait(), 15)
                except TimeoutError:
                    server.kill()
                    await server.wait()


async def wait_healthy(url: str, server: asyncio.subprocess.Process) -> None:
    import httpx

    async with httpx.AsyncClient() as http:
        for _ in range(600):
            if server.returncode is not None:
                raise RuntimeError(f"the server exited with {server.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get(url, timeout=1)).status_code == 200:
                    return
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{url} did not answer in 60 s")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=50, help="concurrent callers")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--fault-every", type=float, default=15.0, help="seconds between faults")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--warmup-minutes",
        type=float,
        default=1.0,
        help="minutes of calls before the first measured one: RSS growth is counted from the "
        "first measured minute, after the models have loaded and run at full concurrency",
    )
    parser.add_argument(
        "--turn",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a turn setting instead of the shipped one, as in bench.capacity",
    )
    parser.add_argument("--log", help="keep the server's log here")
    args = parser.parse_args(argv)
    args.turn = parse_turn(parser, args.turn)
    if len(os.sched_getaffinity(0)) < 2:
        parser.error("needs two cores (one for the server, one for the callers)")
    os.sched_setaffinity(0, {CLIENT_CORE})
    question_frames()  # synthesize the questions before the clock starts
    with contextlib.ExitStack() as stack:
        args.log_file = (
            stack.enter_context(open(args.log, "wb")) if args.log else subprocess.DEVNULL
        )
        at = stack.enter_context(peers.running(reply_seconds=1.0, core=CLIENT_CORE))
        return asyncio.run(soak(args, at))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
