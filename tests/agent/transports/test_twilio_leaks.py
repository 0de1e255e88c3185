"""However a phone call ends — a reset right after ``start``, a reset mid-sentence, a clean
hang-up — within seconds its STT socket, its tasks and its slot are gone."""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import websockets
from fastapi import FastAPI

from tests.agent.transports.stack import (
    async_wait_for,
    phone_server,
    server_tasks,
)
from tests.conftest import requires_espeak
from tests.fakes.twilio_caller import TwilioCaller

pytestmark = [requires_espeak, pytest.mark.timeout(180)]

CALLS = 201
"""As many calls as the leak was reported with (200, a third reset right after ``start``)."""
AT_ONCE = 40
"""Callers dialling at the same moment."""


@pytest.fixture(scope="module")
def server(asr_server_url: str, asr_model_name: str) -> Iterator[tuple[str, FastAPI]]:
    with phone_server(asr_server_url, asr_model_name, max_calls=CALLS) as running:
        yield running


def connections_to(port: int) -> int:
    """This process's TCP connections to ``port`` that are open or half-closed."""
    count = 0
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            remote_port, state = int(fields[2].rsplit(":", 1)[1], 16), fields[3]
            if remote_port == port and state in ("01", "08"):  # ESTABLISHED, CLOSE_WAIT
                count += 1
    return count


async def call_and_vanish(ws_url: str, how: str, rng: random.Random) -> None:
    ws = await websockets.connect(ws_url)
    caller = TwilioCaller(ws, call_sid=f"CA{rng.randrange(10**9)}")
    await caller.start()
    if how == "reset_after_start":
        pass
    elif how == "reset_mid_sentence":
        await caller.silence(rng.uniform(0.1, 0.6))
    else:
        await caller.silence(rng.uniform(0.1, 0.4))
        await caller.stop()
        await ws.close()
        return
    assert ws.transport is not None
    ws.transport.abort()  # no stop, no close frame: the line just drops


async def test_calls_ending_at_random_stages_leave_no_stt_socket_task_or_slot(
    server: tuple[str, FastAPI], asr_server_url: str
) -> None:
    url, app = server
    registry = app.state.registry
    asr_port = urlsplit(asr_server_url).port
    assert asr_port is not None
    baseline, fds = connections_to(asr_port), open_fds()
    rng = random.Random(7)
    ws_url = url.replace("http://", "ws://") + "/telephony/twilio/ws"
    hows = ["reset_after_start", "reset_mid_sentence", "hang_up"] * (CALLS // 3)
    lines = asyncio.Semaphore(AT_ONCE)

    async def one(how: str) -> None:
        async with lines:
            await call_and_vanish(ws_url, how, rng)

    await asyncio.gather(*(one(how) for how in hows))

    await async_wait_for(lambda: registry.stats.active == 0, timeout_s=10, what="all calls ended")
    for _ in range(50):
        if connections_to(asr_port) <= baseline:
            break
        await asyncio.sleep(0.1)
    leaked = connections_to(asr_port) - baseline
    assert leaked <= 0, f"{leaked} STT sockets still open 5 s later; tasks: {server_tasks(app)}"
    assert server_tasks(app) == []
    assert registry.stats.started >= CALLS  # every call really started before it vanished
    for _ in range(50):  # this process holds the server and the callers: all their fds
        if open_fds() <= fds + 5:
            break
        await asyncio.sleep(0.1)
    assert open_fds() <= fds + 5, f"{open_fds() - fds} more fds than before the calls"


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))
