"""An OpenAI-compatible chat server (``POST /v1/chat/completions``, ``stream: true``) on loopback.

It streams server-sent events exactly as the OpenAI API does: a role chunk, content chunks,
a ``finish_reason`` chunk, a usage chunk, ``data: [DONE]``. Asked with tools, it calls one
(``get_current_time`` for Europe/Paris) in argument fragments, as models do; once the tool's
result is in the conversation it answers quoting it. Otherwise it streams ``answer`` a word
at a time. A ``script`` replaces all that: given the conversation, it returns the text to say
or a :class:`ToolCall` to make, as a model would decide (a test's model that transfers callers
who ask for a person), or a :class:`BrokenOff` answer that stops mid-stream. Each answer
waits ``first_token_delay_s`` first (a model's time to first token). ``GET /v1/models``
answers as readiness probes expect.

    with ChatServer() as chat:              # tests: a thread serves it, requests are recorded
        settings.llm.base_url = chat.base_url
    app.include_router(ChatServer(record=False).router)   # benches: mounted elsewhere
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from fastapi.responses import Response, StreamingResponse
from starlette.requests import ClientDisconnect

from tests.fakes.serving import RouterServer


@dataclass(frozen=True)
class ToolCall:
    """A scripted model's decision to call a tool."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BrokenOff:
    """A scripted model whose answer stops mid-stream: ``text`` streams, then the connection
    drops without the end of the response (a server crash or a cut line, as a client sees it)."""

    text: str


class _Cut(Exception):
    """Raised inside the response body: the server drops the connection mid-response."""


Script = Callable[[list[dict[str, Any]]], "str | ToolCall | BrokenOff"]
"""The conversation so far (``messages``) → what the model does next."""


class ChatServer(RouterServer):
    """``POST /v1/chat/completions`` (streaming) and ``GET /v1/models``.

    Args:
        answer: The text of every answer that is not about a tool.
        record: Keep every request body in ``requests`` and its headers in ``headers``
            (off for benches).
        script: Decides every answer instead (see the module docstring).
        first_token_delay_s: How long each answer waits before its first chunk.
        port: Where to serve (0: a free port).
    """

    def __init__(
        self,
        answer: str = "Hello from the chat server.",
        *,
        record: bool = True,
        script: Script | None = None,
        first_token_delay_s: float = 0.0,
        port: int = 0,
    ) -> None:
        self.answer = answer
        self.script = script
        self.first_token_delay_s = first_token_delay_s
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._record = record
        self._call_ids = itertools.count(1)  # per server, so a test's first tool call is call_1
        super().__init__(port=port)
        self.router.add_api_route("/v1/models", self._models, methods=["GET"])
        self.router.add_api_route("/v1/chat/completions", self._completions, methods=["POST"])

    async def _models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": "chat-server", "object": "model"}]}

    async def _completions(self, request: Request) -> Response:
        try:
            body = await request.json()
        except ClientDisconnect:  # the client (or a fault proxy) hung up mid-request
            return Response(status_code=499)
        if self._record:
            self.requests.append(body)
            self.headers.append(dict(request.headers))
        return StreamingResponse(self._stream(body), media_type="text/event-stream")

    def _next_call_id(self) -> str:
        return f"call_{next(self._call_ids)}"

    def _stream(self, body: dict[str, Any]) -> Iterator[str]:
        model = str(body.get("model", ""))
        if self.first_token_delay_s:
            time.sleep(self.first_token_delay_s)  # a worker thread: Starlette iterates it there
        if self.script is not None:
            decision = self.script(list(body.get("messages", [])))
            if isinstance(decision, ToolCall):
                yield from _tool_call(
                    model, self._next_call_id(), decision.name, json.dumps(decision.arguments)
                )
            elif isinstance(decision, BrokenOff):
                yield from list(_text(model, decision.text))[:-2]  # no finish, no usage
                raise _Cut("the scripted answer breaks off here")
            else:
                yield from _text(model, decision)
            yield "data: [DONE]\n\n"
            return
        tool_results = [m for m in body.get("messages", []) if m.get("role") == "tool"]
        if tool_results:
            result = json.loads(tool_results[-1]["content"])
            yield from _text(model, f"The time tool answered for {result['timezone']}.")
        elif body.get("tools"):
            yield from _tool_call(
                model, self._next_call_id(), "get_current_time", '{"timezone": "Europe/Paris"}'
            )
        else:
            yield from _text(model, self.answer)
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


def _tool_call(model: str, call_id: str, name: str, arguments: str) -> Iterator[str]:
    call = {
        "index": 0,
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": ""},
    }
    yield _chunk(model, {"role": "assistant", "content": None, "tool_calls": [call]})
    half = len(arguments) // 2
    for piece in (arguments[:half], arguments[half:]):
        yield _chunk(model, {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
    yield _chunk(model, {}, "tool_calls")
    yield _usage(model)
