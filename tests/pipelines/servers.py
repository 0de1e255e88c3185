"""Protocol-faithful loopback peers for the pipeline: an OpenAI-compatible chat server that
streams SSE exactly like the OpenAI API (with a tool call), and an OpenAI-compatible speech
server."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from tests.conftest import BackgroundServer


class ChatServer:
    """``POST /v1/chat/completions`` (stream=True).

    First request that advertises tools: the model calls ``get_current_time`` for
    Europe/Paris. Once a ``tool`` message is in the conversation: a text answer quoting the
    tool's result. Without tools: ``answer``, streamed a word at a time.
    """

    def __init__(self, answer: str = "Hello from the chat server.") -> None:
        self.answer = answer
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def completions(request: Request) -> StreamingResponse:
            body = await request.json()
            self.requests.append(body)
            self.headers.append(dict(request.headers))
            return StreamingResponse(self._stream(body), media_type="text/event-stream")

        self._server = BackgroundServer(app)
        self.port = self._server.start()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        self._server.stop()

    def _stream(self, body: dict[str, Any]) -> Iterator[str]:
        model = body["model"]
        messages = body["messages"]
        tool_results = [m for m in messages if m.get("role") == "tool"]
        if tool_results:
            result = json.loads(tool_results[-1]["content"])
            words = f"The time tool answered for {result['timezone']}.".split(" ")
            yield from _text(model, words)
        elif body.get("tools"):
            yield from _tool_call(model)
        else:
            yield from _text(model, self.answer.split(" "))
        yield "data: [DONE]\n\n"


def _chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> str:
    payload = {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    return f"data: {json.dumps(payload)}\n\n"


def _usage(model: str) -> str:
    payload = {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }
    return f"data: {json.dumps(payload)}\n\n"


def _text(model: str, words: list[str]) -> Iterator[str]:
    yield _chunk(model, {"role": "assistant", "content": ""})
    for index, word in enumerate(words):
        yield _chunk(model, {"content": word if index == 0 else " " + word})
    yield _chunk(model, {}, "stop")
    yield _usage(model)


def _tool_call(model: str) -> Iterator[str]:
    call = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_current_time", "arguments": ""},
    }
    yield _chunk(model, {"role": "assistant", "content": None, "tool_calls": [call]})
    for piece in ('{"timezone": ', '"Europe/Paris"}'):
        yield _chunk(model, {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
    yield _chunk(model, {}, "tool_calls")
    yield _usage(model)


class SpeechServer:
    """``POST /v1/audio/speech`` answering half a second of a 220 Hz tone, raw 24 kHz PCM16."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []
        app = FastAPI()

        @app.post("/v1/audio/speech")
        async def speech(request: Request) -> Response:
            body = await request.json()
            self.requests.append((dict(request.headers), body))
            t = np.arange(24000 // 2) / 24000
            tone = (np.sin(2 * np.pi * 220 * t) * 8000).astype("<i2").tobytes()
            return Response(tone, media_type="audio/pcm")

        self._server = BackgroundServer(app)
        self.port = self._server.start()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        self._server.stop()
