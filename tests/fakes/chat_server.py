"""An OpenAI-compatible chat server (``POST /v1/chat/completions``, ``stream: true``) on loopback.

It streams server-sent events exactly as the OpenAI API does: a role chunk, content chunks,
a ``finish_reason`` chunk, a usage chunk, ``data: [DONE]``. Asked with tools, it calls one
(``get_current_time`` for Europe/Paris) in argument fragments, as models do; once the tool's
result is in the conversation it answers quoting it. Otherwise it streams ``answer`` a word
at a time (``{user}`` in it becomes the last user message), after ``first_token_delay_s`` (a
model's time to first token). ``GET /v1/models`` answers as readiness probes expect.

    with ChatServer() as chat:              # tests: a thread serves it, requests are recorded
        settings.llm.base_url = chat.base_url
    app.include_router(ChatServer(record=False).router)   # benches: mounted elsewhere
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from fastapi import Request
from fastapi.responses import StreamingResponse

from tests.fakes.serving import RouterServer


class ChatServer(RouterServer):
    """``POST /v1/chat/completions`` (streaming) and ``GET /v1/models``.

    Args:
        answer: The text of every answer that is not about a tool; ``{user}`` stands for the
            last user message.
        record: Keep every request body in ``requests`` and its headers in ``headers``
            (off for benches).
        first_token_delay_s: How long each answer waits before its first chunk.
    """

    def __init__(
        self,
        answer: str = "Hello from the chat server.",
        *,
        record: bool = True,
        first_token_delay_s: float = 0.0,
    ) -> None:
        self.answer = answer
        self.first_token_delay_s = first_token_delay_s
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._record = record
        super().__init__()
        self.router.add_api_route("/v1/models", self._models, methods=["GET"])
        self.router.add_api_route("/v1/chat/completions", self._completions, methods=["POST"])

    async def _models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": "chat-server", "object": "model"}]}

    async def _completions(self, request: Request) -> StreamingResponse:
        body = await request.json()
        if self._record:
            self.requests.append(body)
            self.headers.append(dict(request.headers))
        return StreamingResponse(self._stream(body), media_type="text/event-stream")

    def _stream(self, body: dict[str, Any]) -> Iterator[str]:
        model = str(body.get("model", ""))
        if self.first_token_delay_s:
            time.sleep(self.first_token_delay_s)  # a worker thread: Starlette iterates it there
        tool_results = [m for m in body.get("messages", []) if m.get("role") == "tool"]
        if tool_results:
            result = json.loads(tool_results[-1]["content"])
            yield from _text(model, f"The time tool answered for {result['timezone']}.")
        elif body.get("tools"):
            yield from _tool_call(model)
        else:
            users = [m for m in body.get("messages", []) if m.get("role") == "user"]
            last_user = str(users[-1].get("content", "")) if users else ""
            yield from _text(model, self.answer.replace("{user}", last_user))
        yield "data: [DONE]\n\n"


def _event(model: str, choices: list[dict[str, Any]], **extra: Any) -> str:
    payload = {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        **extra,
    }
    return f"data: {json.dumps(payload)}\n\n"


def _chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> str:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    return _event(model, [choice])


def _usage(model: str) -> str:
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    return _event(model, [], usage=usage)


def _text(model: str, text: str) -> Iterator[str]:
    yield _chunk(model, {"role": "assistant", "content": ""})
    for index, word in enumerate(text.split(" ")):
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
