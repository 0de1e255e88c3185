"""An OpenAI-compatible speech server (``POST /v1/audio/speech``) on loopback.

It answers as a TTS server configured with ``response_format: "pcm"`` does: raw PCM16 mono,
no header, at the voice's own rate (the client is told the rate in its settings). Two
voices: ``tone`` (a fixed tone, instant and the same every time: timing and barge-in tests,
benches) and ``espeak`` (espeak-ng speaks the text: the recognizer on the other end of a
call can hear the bot). ``GET /v1/models`` answers as readiness probes expect.

    with SpeechServer() as speech:          # tests: a thread serves it, requests are recorded
        settings.tts.base_url = speech.base_url
    app.include_router(SpeechServer(seconds=1.0).router)   # benches: mounted elsewhere
"""

from __future__ import annotations

import asyncio
import subprocess
from typing import Any, Literal

import numpy as np
from fastapi import Request
from fastapi.responses import JSONResponse, Response

from tests.fakes.serving import RouterServer

ESPEAK_RATE = 22_050
"""espeak-ng's native rate: what the ``espeak`` voice answers in."""

Voice = Literal["tone", "espeak"]


def tone(sample_rate: int, seconds: float, freq: float = 440.0) -> bytes:
    """A sine tone, PCM16 mono, loud enough for a caller to tell it from silence."""
    t = np.arange(int(sample_rate * seconds)) / sample_rate
    return (np.sin(2 * np.pi * freq * t) * 8000).astype("<i2").tobytes()


class SpeechServer(RouterServer):
    """``POST /v1/audio/speech`` and ``GET /v1/models``.

    Args:
        voice: ``tone`` answers ``seconds`` of a ``freq`` Hz tone at ``sample_rate`` whatever
            the text; ``espeak`` speaks the text at :data:`ESPEAK_RATE` (400 if it is empty).
        record: Keep every request in ``requests`` as ``(headers, body)`` (off for benches).
    """

    def __init__(
        self,
        *,
        voice: Voice = "tone",
        seconds: float = 0.5,
        sample_rate: int = 24_000,
        freq: float = 220.0,
        record: bool = True,
    ) -> None:
        self.voice = voice
        self.sample_rate = ESPEAK_RATE if voice == "espeak" else sample_rate
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []
        self._record = record
        self._tone = tone(sample_rate, seconds, freq)
        super().__init__()
        self.router.add_api_route("/v1/models", self._models, methods=["GET"])
        self.router.add_api_route("/v1/audio/speech", self._speech, methods=["POST"])

    async def _models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.voice, "object": "model"}]}

    async def _speech(self, request: Request) -> Response:
        body = await request.json()
        if self._record:
            self.requests.append((dict(request.headers), body))
        if self.voice == "tone":
            return Response(self._tone, media_type="audio/pcm")
        text = str(body.get("input", "")).strip()
        if not text:
            return JSONResponse({"error": "input is empty"}, status_code=400)
        wav = await asyncio.to_thread(
            subprocess.run,
            ["espeak-ng", "-s", "170", "--stdout", text],
            check=True,
            capture_output=True,
        )
        return Response(_wav_payload(wav.stdout), media_type="audio/pcm")


def _wav_payload(wav: bytes) -> bytes:
    """The PCM after the ``data`` chunk header (espeak's streamed WAV has bogus sizes)."""
    index = wav.find(b"data")
    return wav[index + 8 :] if index >= 0 else wav
