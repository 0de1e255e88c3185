"""A WebRTC caller: an aiortc peer for the server's ``/api/offer`` route that speaks PCM from a
buffer at real-time pace and records the audio (when it was loud) and the RTVI messages it gets
back. Shared by the transport tests and ``bench/turn_taking.py``."""

from __future__ import annotations

import asyncio
import fractions
import json
import time
from typing import Any

import av
import httpx
import numpy as np
from aiortc import MediaStreamTrack, RTCPeerConnection, RTCSessionDescription

from agent.fastpath.audio_jitter import release_audio_promptly

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
        self.drained_at: float | None = None
        """When the last queued sample went out (``time.monotonic()``): the end of speech."""

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
        if chunk and not self._pending:
            self.drained_at = time.monotonic()
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
        self.loud_at: list[float] = []
        """When each loud frame of the bot's audio arrived (``time.monotonic()``)."""
        self.frames = 0
        self.messages: list[dict[str, Any]] = []
        self.received_at: list[float] = []
        """When each of ``messages`` arrived (``time.monotonic()``)."""
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
                    return
                self.received_at.append(time.monotonic())

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
                self.loud_at.append(time.monotonic())

    async def connect(
        self,
        base_url: str,
        path: str = "/api/offer",
        *,
        request_data: dict[str, Any] | None = None,
        pc_id: str | None = None,
        restart_pc: bool = False,
    ) -> httpx.Response:
        """Offer the call (``request_data``: the offer's custom data, as Pipecat's clients
        send it), or renegotiate the call ``pc_id`` names; with ``restart_pc`` this peer
        connection replaces that call's, as Pipecat's clients do after an ICE failure."""
        await self.pc.setLocalDescription(await self.pc.createOffer())
        offer = self.pc.localDescription
        body: dict[str, Any] = {"sdp": offer.sdp, "type": offer.type}
        if pc_id is not None:
            body |= {"pc_id": pc_id, "restart_pc": restart_pc}
        if request_data is not None:
            body["request_data"] = request_data
        async with httpx.AsyncClient() as http:
            response = await http.post(base_url + path, json=body, timeout=20)
        if response.status_code == 200:
            answer = response.json()
            self.pc_id = answer["pc_id"]
            await self.pc.setRemoteDescription(
                RTCSessionDescription(sdp=answer["sdp"], type=answer["type"])
            )
            # The bot's audio counts when it arrives, as a phone caller's media frame does:
            # aiortc's receiver would hold each frame until four more came (80 ms), a playout
            # cushion the phone leg's measure has none of.
            release_audio_promptly(self.pc)
        return response

    def rtvi(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m.get("type") == kind]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.pc.close()
