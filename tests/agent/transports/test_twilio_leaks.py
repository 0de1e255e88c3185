"""However a phone call ends — a reset right after ``start``, a reset mid-sentence, a clean
hang-up — within seconds its STT socket, its tasks and its slot are gone, on every carrier."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import websockets
from fastapi import FastAPI

from tests.agent.transports.carriers import Carrier
from tests.agent.transports.stack import (
    async_wait_for,
    phone_server,
    server_tasks,
)
from tests.conftest import requires_espeak
from tests.fakes.serving import CLOSE_WAIT, ESTABLISHED, open_fds, tcp_connections_to

pytestmark = [requires_espeak, pytest.mark.timeout(180)]

CALLS = 201
"""As many calls as the leak was reported with (200, a third reset right after ``start``)."""
AT_ONCE = 40
"""Callers dialling at the same moment."""


@pytest.fixture(scope="module")
def server(asr_server_url: str, asr_model_name: str) -> Iterator[tuple[str, FastAPI]]:
    with phone_server(
        asr_server_url,
        asr_model_name,
        max_calls=CALLS,
        # every Telnyx call rings its webhook first, all from 127.0.0.1
        requests_per_source_per_s=10 * CALLS,
        request_burst_per_source=2 * CALLS,
    ) as running:
        yield running


async def call_and_vanish(carrier: Carrier, url: str, how: str, n: int, rng: random.Random) -> None:
    """Call ``n`` (each call has its own call SID, as on a carrier) ends ``how``."""
    ws = await websockets.connect(await carrier.stream_url(url, n))
    caller = carrier.caller(ws, n)
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
    server: tuple[str, FastAPI], asr_server_url: str, carrier: Carrier
) -> None:
    url, app = server
    registry = app.state.registry
    asr_port = urlsplit(asr_server_url).port
    assert asr_port is not None

    def stt_links() -> int:  # open or half-closed
        return tcp_connections_to(asr_port, states=(ESTABLISHED, CLOSE_WAIT))

    baseline, fds = stt_links(), open_fds()
    rng = random.Random(7)
    started = registry.stats.started
    hows = ["reset_after_start", "reset_mid_sentence", "hang_up"] * (CALLS // 3)
    lines = asyncio.Semaphore(AT_ONCE)

    async def one(how: str, n: int) -> None:
        async with lines:
            await call_and_vanish(carrier, url, how, n, rng)

    await asyncio.gather(*(one(how, n) for n, how in enumerate(hows, 1)))

    await async_wait_for(lambda: registry.stats.active == 0, timeout_s=10, what="all calls ended")
    for _ in range(50):
        if stt_links() <= baseline:
            break
        await asyncio.sleep(0.1)
    leaked = stt_links() - baseline
    assert leaked <= 0, f"{leaked} STT sockets still open 5 s later; tasks: {server_tasks(app)}"
    assert server_tasks(app) == []
    assert registry.stats.started - started >= CALLS  # every call really started, then vanished
    for _ in range(50):  # this process holds the server and the callers: all their fds
        if open_fds() <= fds + 5:
            break
        await asyncio.sleep(0.1)
    assert open_fds() <= fds + 5, f"{open_fds() - fds} more fds than before the calls"
