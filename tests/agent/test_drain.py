"""Draining: on SIGTERM ``voice-agent serve`` stops taking calls at once, lets the calls in
progress go on to their end or ``server.drain_timeout_s``, closes the rest with 1001, exits 0.

A real ``serve`` process, real phone callers speaking Twilio's Media Streams protocol.
"""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from tests.agent.test_serve import Serve

pytestmark = pytest.mark.timeout(120)

ULAW_SILENCE_20MS = base64.b64encode(b"\xff" * 160).decode()


@pytest.fixture
def serve(tmp_path: Path, asr_server_url: str) -> Iterator[Serve]:
    """The vllm profile against the offline ASR server, the offline responder, no TTS."""
    env = {
        "VOICE_AGENT_STT__URL": asr_server_url,
        "VOICE_AGENT_LLM__BASE_URL": "",
        "VOICE_AGENT_TTS__BASE_URL": "http://127.0.0.1:9/v1",
        "VOICE_AGENT_SERVER__DRAIN_TIMEOUT_S": "4",
    }
    process = Serve(tmp_path, "--profile", "vllm", env=env)
    try:
        process.wait_healthy()
        yield process
    finally:
        process.kill()


class Caller:
    """A phone call's media stream: ``start``, then 20 ms of silence every 20 ms."""

    def __init__(self, port: int, sid: str) -> None:
        self.url = f"ws://127.0.0.1:{port}/telephony/twilio/ws"
        self.sid = sid
        self.closed: asyncio.Future[tuple[int | None, str]] = asyncio.Future()
        self._task: asyncio.Task[None] | None = None
        self._ws: Any = None

    async def dial(self) -> Caller:
        self._ws = await websockets.connect(self.url)
        await self._ws.send(json.dumps({"event": "connected", "protocol": "Call"}))
        start = {"streamSid": f"MZ{self.sid}", "callSid": f"CA{self.sid}", "customParameters": {}}
        await self._ws.send(
            json.dumps({"event": "start", "streamSid": f"MZ{self.sid}", "start": start})
        )
        self._task = asyncio.create_task(self._talk())
        return self

    async def _talk(self) -> None:
        media = json.dumps(
            {
                "event": "media",
                "streamSid": f"MZ{self.sid}",
                "media": {"payload": ULAW_SILENCE_20MS},
            }
        )
        try:
            while True:
                await self._ws.send(media)
                await asyncio.sleep(0.02)
        except websockets.ConnectionClosed:
            pass
        self.closed.set_result((self._ws.close_code, self._ws.close_reason or ""))

    async def hang_up(self) -> None:
        await self._ws.send(json.dumps({"event": "stop", "streamSid": f"MZ{self.sid}"}))
        await self._ws.close()
        await self.closed


async def wait_active(http: httpx.AsyncClient, count: int) -> None:
    for _ in range(200):
        if (await http.get("/calls")).json()["active"] == count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never {count} active calls")


async def test_sigterm_drains_calls_in_progress_and_refuses_new_ones(serve: Serve) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{serve.port}") as http:
        leaving, staying = (
            await Caller(serve.port, "1").dial(),
            await Caller(serve.port, "2").dial(),
        )
        await wait_active(http, 2)

        signalled = time.monotonic()
        serve.process.send_signal(signal.SIGTERM)
        for _ in range(100):  # (before the signal it is 503 too: this setup has no TTS)
            ready = await http.get("/readyz")
            if ready.json()["status"] == "draining":
                break
            await asyncio.sleep(0.02)
        assert ready.status_code == 503 and ready.json()["status"] == "draining"
        webhook = await http.post("/telephony/twilio", data={"CallSid": "CA9"})
        assert 'Reject reason="busy"' in webhook.text
        async with websockets.connect(f"ws://127.0.0.1:{serve.port}/telephony/twilio/ws") as late:
            with pytest.raises(websockets.ConnectionClosed) as refused:
                await asyncio.wait_for(late.recv(), 5)
        assert refused.value.rcvd is not None and refused.value.rcvd.code == 1013
        assert not leaving.closed.done() and not staying.closed.done()  # calls go on

        await leaving.hang_up()  # a call that ends by itself during the drain
        code, reason = await asyncio.wait_for(staying.closed, 15)
        assert code == 1001 and "going away" in reason, serve.text()[-6000:]
        assert time.monotonic() - signalled >= 3.5  # it was given the drain timeout (4 s)

    exit_code = await asyncio.to_thread(serve.wait, 30)
    assert exit_code == 0, serve.text()
    assert "drain" in serve.text()


async def test_a_second_sigterm_ends_at_once(serve: Serve, tmp_path: Path) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{serve.port}") as http:
        caller = await Caller(serve.port, "3").dial()
        await wait_active(http, 1)
        serve.process.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.5)
        signalled = time.monotonic()
        serve.process.send_signal(signal.SIGTERM)
        exit_code = await asyncio.to_thread(serve.wait, 30)
        assert exit_code == 0, serve.text()
        assert time.monotonic() - signalled < 3.5  # not the drain timeout
        await asyncio.wait_for(caller.closed, 5)
