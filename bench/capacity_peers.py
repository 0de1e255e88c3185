"""Instant STT, LLM and TTS peers for ``bench/capacity.py`` and ``bench/voice_latency.py``, all
on one port, in their own process, so a bench measures only our server's cost.

- ``WS /v1/realtime``: a realtime STT peer speaking :mod:`agent.stt.protocol`: a delta per
  80 ms of audio while a generation is open, ``transcription.done`` the moment the final
  commit arrives.
- ``POST /v1/chat/completions``: an OpenAI-compatible streaming chat answer (SSE).
- ``POST /v1/audio/speech``: a fixed tone of ``REPLY_SECONDS`` (the stock baseline's canned
  reply is as long, so both servers send the caller the same audio).

    .venv/bin/python bench/capacity_peers.py PORT
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import uvicorn  # noqa: E402
from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect  # noqa: E402
from fastapi.responses import Response, StreamingResponse  # noqa: E402

from agent.stt.protocol import (  # noqa: E402
    AudioAppend,
    Commit,
    ProtocolError,
    SessionCreated,
    TranscriptionDelta,
    TranscriptionDone,
    parse_client_event,
)

REPLY_SECONDS = 1.0
TONE_RATE = 24_000
TRANSCRIPT = "turn on the lights in the kitchen"
ANSWER = ("Sure", ",", " done", ".")


def tone(rate: int, seconds: float = REPLY_SECONDS) -> bytes:
    """A 440 Hz tone, PCM16 mono: loud enough for the caller to tell it from silence."""
    t = np.arange(int(rate * seconds)) / rate
    return (np.sin(2 * np.pi * 440 * t) * 8000).astype("<i2").tobytes()


def peers_app(reply_seconds: float = REPLY_SECONDS) -> FastAPI:
    app = FastAPI()
    speech = tone(TONE_RATE, reply_seconds)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.websocket("/v1/realtime")
    async def realtime(ws: WebSocket) -> None:
        await ws.accept()
        await ws.send_text(SessionCreated(id="sess-capacity", created=int(time.time())).to_json())
        appends = 0
        generating = False
        try:
            while True:
                try:
                    event = parse_client_event(await ws.receive_text())
                except ProtocolError:
                    continue
                if isinstance(event, AudioAppend) and generating:
                    appends += 1
                    if appends % 4 == 0:
                        await ws.send_text(TranscriptionDelta("word ").to_json())
                elif isinstance(event, Commit) and not event.final:
                    generating, appends = True, 0
                elif isinstance(event, Commit) and generating:
                    generating = False
                    await ws.send_text(TranscriptionDone(TRANSCRIPT).to_json())
        except WebSocketDisconnect:
            return

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> StreamingResponse:
        body = await request.json()
        return StreamingResponse(_sse(str(body.get("model", ""))), media_type="text/event-stream")

    @app.post("/v1/audio/speech")
    async def audio_speech() -> Response:
        return Response(speech, media_type="audio/pcm")

    return app


def _sse(model: str) -> Iterator[str]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        payload = {
            "id": "chatcmpl-capacity",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [choice],
        }
        return f"data: {json.dumps(payload)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    for piece in ANSWER:
        yield chunk({"content": piece})
    yield chunk({}, "stop")
    yield "data: [DONE]\n\n"


def main(argv: list[str]) -> int:
    uvicorn.run(peers_app(), host="127.0.0.1", port=int(argv[0]), log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
