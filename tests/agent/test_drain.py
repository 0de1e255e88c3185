"""Draining: on SIGTERM ``voice-agent serve`` stops taking calls at once, lets the calls in
progress go on to their end or ``server.drain_timeout_s``, closes the rest with 1001, exits 0.

A real ``serve`` process, real phone callers speaking Twilio's Media Streams protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import websockets

from tests.agent.test_serve import Serve
from tests.fakes.twilio_caller import SILENCE, TwilioCaller

pytestmark = pytest.mark.timeout(120)


@contextlib.contextmanager
def vllm_profile_server(
    tmp_path: Path, asr_server_url: str, *, drain_timeout_s: float
) -> Iterator[Serve]:
    """The vllm profile against the offline ASR server, the offline responder, no TTS."""
    env = {
        "VOICE_AGENT_STT__URL": asr_server_url,
        "VOICE_AGENT_LLM__BASE_URL": "",
        "VOICE_AGENT_TTS__BASE_URL": "http://127.0.0.1:9/v1",
        "VOICE_AGENT_SERVER__DRAIN_TIMEOUT_S": f"{drain_timeout_s:g}",
    }
    process = Serve(tmp_path, "--profile", "vllm", env=env)
    try:
        process.wait_healthy()
        yield process
    finally:
        process.kill()


@pytest.fixture
def serve(tmp_path: Path, asr_server_url: str) -> Iterator[Serve]:
    with vllm_profile_server(tmp_path, asr_server_url, drain_timeout_s=4) as process:
        yield process


@dataclass
class Line:
    """A phone call in progress: the shared Twilio caller, streaming silence until closed."""

    caller: TwilioCaller
    talking: asyncio.Task[object]

    @classmethod
    async def dial(cls, port: int, sid: str) -> Line:
        ws = await websockets.connect(f"ws://127.0.0.1:{port}/telephony/twilio/ws")
        caller = TwilioCaller(ws, f"CA{sid}", stream_sid=f"MZ{sid}")
        await caller.start()
        return cls(caller, asyncio.create_task(caller.send(itertools.repeat(SILENCE))))

    @property
    def closed(self) -> bool:
        return self.caller.closed.is_set()

    async def close_frame(self, timeout_s: float) -> tuple[int | None, str]:
        """Wait for the server to close the call; its close code and reason."""
        await asyncio.wait_for(self.caller.closed.wait(), timeout_s)
        await asyncio.gather(self.talking, return_exceptions=True)
        return self.caller.ws.close_code, self.caller.ws.close_reason or ""

    async def hang_up(self) -> None:
        self.talking.cancel()
        await asyncio.gather(self.talking, return_exceptions=True)
        await self.caller.stop()
        await self.caller.ws.close()


async def wait_active(http: httpx.AsyncClient, count: int) -> None:
    for _ in range(200):
        if (await http.get("/calls")).json()["active"] == count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never {count} active calls")


async def test_sigterm_drains_calls_in_progress_and_refuses_new_ones(serve: Serve) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{serve.port}") as http:
        leaving, staying = await Line.dial(serve.port, "1"), await Line.dial(serve.port, "2")
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
        assert not leaving.closed and not staying.closed  # calls go on

        await leaving.hang_up()  # a call that ends by itself during the drain
        code, reason = await staying.close_frame(15)
        assert code == 1001 and "going away" in reason, serve.text()[-6000:]
        assert time.monotonic() - signalled >= 3.5  # it was given the drain timeout (4 s)

    exit_code = await asyncio.to_thread(serve.wait, 30)
    assert exit_code == 0, serve.text()
    assert "drain" in serve.text()


async def test_a_second_sigterm_ends_at_once(serve: Serve, tmp_path: Path) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{serve.port}") as http:
        line = await Line.dial(serve.port, "3")
        await wait_active(http, 1)
        serve.process.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.5)
        signalled = time.monotonic()
        serve.process.send_signal(signal.SIGTERM)
        exit_code = await asyncio.to_thread(serve.wait, 30)
        assert exit_code == 0, serve.text()
        assert time.monotonic() - signalled < 3.5  # not the drain timeout
        await line.close_frame(5)
