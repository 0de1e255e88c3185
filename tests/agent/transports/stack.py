"""The server under test with real parts on loopback, and real clients for it.

- :func:`stack_settings`: settings for it against loopback peers (the TTS is usually
  ``SpeechServer(voice="espeak")`` from :mod:`tests.fakes.speech_server`: a real synthesizer).
- :func:`running_server`: our app (``create_app``) on 127.0.0.1:0 in a background thread;
  :func:`phone_server`: the same set up for phone calls.
- :class:`WebRTCClient`: an aiortc peer that speaks PCM from a buffer at real-time pace and
  records the audio and RTVI messages it gets back.
- helpers to count sockets and pipeline tasks, for "nothing left behind" checks.
"""

from __future__ import annotations

import asyncio
import fractions
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import av
import httpx
import numpy as np
from aiortc import MediaStreamTrack, RTCPeerConnection, RTCSessionDescription
from fastapi import FastAPI

from agent.config import Settings, load_settings
from agent.server import PipelineFactory, create_app
from tests.fakes.serving import background
from tests.fakes.speech_server import ESPEAK_RATE, SpeechServer
from tests.fakes.telnyx_caller import PUBLIC_KEY as TELNYX_PUBLIC_KEY
from tests.fakes.twilio_caller import TOKEN


def stack_settings(
    *, asr_url: str, asr_model: str, tts_url: str, max_calls: int = 4, **server: Any
) -> Settings:
    return load_settings(
        "default",
        overrides={
            "server": {"max_calls": max_calls, "start_local_services": False, **server},
            "stt": {"url": asr_url, "model": asr_model},
            "tts": {"kind": "openai", "base_url": f"{tts_url}/v1", "sample_rate": ESPEAK_RATE},
        },
    )


@contextmanager
def running_server(
    settings: Settings, *, pipeline: PipelineFactory | None = None
) -> Iterator[tuple[str, FastAPI]]:
    app = create_app(settings, pipeline=pipeline)
    with background(app) as url:
        yield url, app


@contextmanager
def phone_server(
    asr_url: str,
    asr_model: str,
    *,
    max_calls: int,
    telnyx: dict[str, Any] | None = None,
    **server: Any,
) -> Iterator[tuple[str, FastAPI]]:
    """The server taking phone calls (Twilio auth on, with the callers' ``TOKEN``; Telnyx on,
    with the test account's public key and ``telnyx`` settings) against the offline ASR server
    and an espeak speech server; ``server``: more ``server.*`` settings."""
    with SpeechServer(voice="espeak") as tts:
        settings = stack_settings(
            asr_url=asr_url, asr_model=asr_model, tts_url=tts.url, max_calls=max_calls, **server
        )
        settings.twilio.auth_token = TOKEN
        settings.telnyx = settings.telnyx.model_copy(
            update={"public_key": TELNYX_PUBLIC_KEY, **(telnyx or {})}
        )
        with running_server(settings) as running:
            yield running


# ----------------------------------------------------------------------------- leftovers


def open_sockets() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                count += 1
        except OSError:
            pass
    return count


def server_tasks(app: FastAPI) -> list[str]:
    """Names of the tasks alive on the server's loop that belong to calls or Pipecat."""
    loop = _server_loop(app)
    if loop is None:
        return []

    async def names() -> list[str]:
        return [t.get_name() for t in asyncio.all_tasks() if not t.done()]

    all_names = asyncio.run_coroutine_threadsafe(names(), loop).result(timeout=5)
    return [n for n in all_names if not n.startswith("Task-")]


def _server_loop(app: FastAPI) -> asyncio.AbstractEventLoop | None:
    for call in app.state.registry.recent() + app.state.registry.calls():
        if call.task is not None:
            loop: asyncio.AbstractEventLoop = call.task.get_loop()
            return loop
    return None


def wait_for(predicate: Callable[[], bool], *, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)


async def async_wait_for(predicate: Callable[[], bool], *, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.05)


# ----------------------------------------------------------------------------- WebRTC client

CLIENT_RATE = 48_000
FRAME_SAMPLES = CLIENT_RATE // 50  # 20 ms


class SpeakingTrack(MediaStreamTrack):
    """A microphone stand-in: plays queued PCM16 (48 kHz mono) in real time, else silence."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._pending = bytearray()
        self._pts = 0
        self._start: float | None = None
        self.silent = False  # when True, frames stop: a frozen / vanished client

    def say(self, pcm_48k: bytes) -> float:
        """Queue speech; returns its duration in seconds."""
        self._pending.extend(pcm_48k)
        return len(pcm_48k) / 2 / CLIENT_RATE

    @property
    def speaking(self) -> bool:
        return bool(self._pending)

    async def recv(self) -> av.AudioFrame:
        if self._start is None:
            self._start = time.monotonic()
        due = self._start + self._pts / CLIENT_RATE
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        while self.silent:  # noqa: ASYNC110 - a frozen client polls nothing either
            await asyncio.sleep(0.05)
        chunk = bytes(self._pending[: FRAME_SAMPLES * 2])
        del self._pending[: FRAME_SAMPLES * 2]
        chunk = chunk.ljust(FRAME_SAMPLES * 2, b"\0")
        frame = av.AudioFrame.from_ndarray(
            np.frombuffer(chunk, "<i2").reshape(1, -1), format="s16", layout="mono"
        )
        frame.sample_rate = CLIENT_RATE
        frame.pts = self._pts
        frame.time_base = fractions.Fraction(1, CLIENT_RATE)
        self._pts += FRAME_SAMPLES
        return frame


class WebRTCClient:
    """A Python WebRTC peer for the server's ``/api/offer`` route."""

    def __init__(self) -> None:
        self.pc = RTCPeerConnection()
        self.mic = SpeakingTrack()
        self.loud_frames = 0
        self.frames = 0
        self.messages: list[dict[str, Any]] = []
        self.pc_id: str | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self.pinging = True
        self.pc.addTrack(self.mic)
        self.channel = self.pc.createDataChannel("chat", ordered=True)

        @self.channel.on("open")
        def _open() -> None:
            self.channel.send(
                json.dumps(
                    {
                        "label": "rtvi-ai",
                        "type": "client-ready",
                        "id": "test-ready",
                        "data": {"version": "2.2.0", "about": {"library": "tests"}},
                    }
                )
            )
            self._tasks.append(asyncio.ensure_future(self._ping()))

        @self.channel.on("message")
        def _message(message: str | bytes) -> None:
            if isinstance(message, str):
                try:
                    self.messages.append(json.loads(message))
                except ValueError:
                    pass

        @self.pc.on("track")
        def _track(track: MediaStreamTrack) -> None:
            if track.kind == "audio":
                self._tasks.append(asyncio.ensure_future(self._listen(track)))

    async def _ping(self) -> None:
        while True:
            if self.pinging and self.channel.readyState == "open":
                self.channel.send("ping")
            await asyncio.sleep(0.5)

    async def _listen(self, track: MediaStreamTrack) -> None:
        while True:
            try:
                frame = await track.recv()
            except Exception:
                return
            samples = frame.to_ndarray().astype(np.float64)  # type: ignore[union-attr]
            self.frames += 1
            if np.sqrt(np.mean(samples**2)) > 300:
                self.loud_frames += 1

    async def connect(self, base_url: str, path: str = "/api/offer") -> httpx.Response:
        await self.pc.setLocalDescription(await self.pc.createOffer())
        offer = self.pc.localDescription
        async with httpx.AsyncClient() as http:
            response = await http.post(
                base_url + path, json={"sdp": offer.sdp, "type": offer.type}, timeout=20
            )
        if response.status_code == 200:
            answer = response.json()
            self.pc_id = answer["pc_id"]
            await self.pc.setRemoteDescription(
                RTCSessionDescription(sdp=answer["sdp"], type=answer["type"])
            )
        return response

    def rtvi(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m.get("type") == kind]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.pc.close()
