"""Connection floods against a real ``voice-agent serve``: half-open requests are closed at the
header deadline, a connection cap answers 503 instead of exhausting fds, and meanwhile health
checks and a real call are answered."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import httpx
import pytest
import websockets

from agent.connection_guard import CHECKED_AGAINST
from tests.agent.test_serve import Serve
from tests.fakes.serving import open_fds
from tests.fakes.twilio_caller import TwilioCaller

pytestmark = pytest.mark.timeout(120)

HALF_OPEN = 5000
HEADER_TIMEOUT_S = 4
"""The guard's deadline for a request's headers: long enough that a loaded machine answers a
health check and a call while the flood is still held."""


def test_the_guard_mirrors_the_installed_uvicorn() -> None:
    for distribution, checked in CHECKED_AGAINST.items():
        assert version(distribution) == checked, (
            f"agent/connection_guard.py mirrors {distribution} {checked} internals; re-read "
            "uvicorn's HttpToolsProtocol, rerun this file, then update CHECKED_AGAINST"
        )


def serve_with(tmp_path: Path, asr_server_url: str, **server: str) -> Serve:
    env = {
        "VOICE_AGENT_STT__URL": asr_server_url,
        "VOICE_AGENT_LLM__BASE_URL": "",
        "VOICE_AGENT_TTS__BASE_URL": "http://127.0.0.1:9/v1",
        **{f"VOICE_AGENT_SERVER__{key.upper()}": value for key, value in server.items()},
    }
    process = Serve(tmp_path, "--profile", "vllm", env=env)
    process.wait_healthy()
    return process


@pytest.fixture
def guarded(tmp_path: Path, asr_server_url: str) -> Iterator[Serve]:
    process = serve_with(tmp_path, asr_server_url, header_timeout_s=str(HEADER_TIMEOUT_S))
    try:
        yield process
    finally:
        process.kill()


async def half_open(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # never the blank line
    return reader, writer


async def a_call_is_answered(port: int) -> None:
    async with websockets.connect(f"ws://127.0.0.1:{port}/telephony/twilio/ws") as ws:
        await TwilioCaller(ws).start()
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            for _ in range(100):
                if (await http.get("/calls")).json()["active"] == 1:
                    return
                await asyncio.sleep(0.05)
    raise AssertionError("the call was never answered")


async def test_half_open_requests_are_closed_and_the_server_keeps_answering(
    guarded: Serve,
) -> None:
    pid, port = guarded.process.pid, guarded.port
    baseline = open_fds(pid)
    held = await asyncio.gather(*(half_open(port) for _ in range(HALF_OPEN)))
    opened = time.monotonic()
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
        assert (await http.get("/healthz")).status_code == 200
    await a_call_is_answered(port)
    early = sum(reader.at_eof() for reader, _ in held)
    assert early == 0, f"{early} half-open requests were closed before the call was answered"

    ends = await asyncio.gather(
        *(asyncio.wait_for(reader.read(), 15) for reader, _ in held), return_exceptions=True
    )
    # Closed: an orderly end, or a reset when the server's close raced our unread bytes.
    closed = [end == b"" or isinstance(end, ConnectionResetError) for end in ends]
    assert all(closed), f"half-open requests left open: {[e for e in ends if e != b'']}"
    assert time.monotonic() - opened < HEADER_TIMEOUT_S + 8
    for _, writer in held:
        writer.close()
    for _ in range(50):
        if open_fds(pid) <= baseline + 10:
            break
        await asyncio.sleep(0.1)
    assert open_fds(pid) <= baseline + 10


async def test_beyond_the_connection_cap_new_connections_get_503(
    tmp_path: Path, asr_server_url: str
) -> None:
    serve = serve_with(tmp_path, asr_server_url, max_connections="50", header_timeout_s="30")
    try:
        held = await asyncio.gather(*(half_open(serve.port) for _ in range(50)))
        reader, writer = await asyncio.open_connection("127.0.0.1", serve.port)
        answer = await asyncio.wait_for(reader.read(), 5)
        assert answer.startswith(b"HTTP/1.1 503") and b"too many connections" in answer
        writer.close()
        for _, held_writer in held:
            held_writer.close()
    finally:
        serve.kill()
