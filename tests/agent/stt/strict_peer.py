"""A realtime peer that enforces vLLM's protocol rules and fails the test on any break.

It answers like vLLM (``session.created``, deltas, ``done``) with a scripted transcript: the
number of audio samples the generation received, so tests can check no audio went missing.
Rule breaks are collected in ``violations``; tests assert it stays empty.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed


@dataclass
class Generation:
    audio: bytearray = field(default_factory=bytearray)
    final: bool = False


@dataclass
class StrictPeer:
    model: str = "voxtral-test"
    violations: list[str] = field(default_factory=list)
    generations: list[Generation] = field(default_factory=list)
    connections: int = 0
    open_connections: int = 0
    on_append: Callable[[ServerConnection, Generation], Awaitable[None]] | None = None
    answer_final: bool = True
    hold_finals: asyncio.Event | None = None
    """When set, each final commit is answered only once this event is set (a slow server)."""
    server: Server | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        port = self.server.sockets[0].getsockname()[1]
        return f"ws://127.0.0.1:{port}/v1/realtime"

    async def __aenter__(self) -> StrictPeer:
        self.server = await serve(self._handle, "127.0.0.1", 0, compression=None)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    def transcripts(self) -> list[int]:
        """Samples received per finished generation."""
        return [len(g.audio) // 2 for g in self.generations if g.final]

    async def _handle(self, ws: ServerConnection) -> None:
        self.connections += 1
        self.open_connections += 1
        validated = False
        current: Generation | None = None
        pending_audio = bytearray()
        await ws.send(json.dumps({"type": "session.created", "id": "sess-1", "created": 1}))
        try:
            async for message in ws:
                if isinstance(message, bytes):
                    self.violations.append("binary frame")
                    continue
                event = json.loads(message)
                kind = event.get("type")
                if kind == "session.update":
                    if event.get("model") != self.model:
                        self.violations.append(f"wrong model {event.get('model')!r}")
                    validated = True
                elif kind == "input_audio_buffer.append":
                    try:
                        pcm = base64.b64decode(event["audio"], validate=True)
                    except (binascii.Error, KeyError):
                        self.violations.append("audio is not base64")
                        continue
                    if len(pcm) % 2:
                        self.violations.append("audio is not PCM16 (odd byte count)")
                    if current is None:
                        pending_audio += pcm
                        self.violations.append("append outside a generation")
                        continue
                    current.audio += pcm
                    if self.on_append:
                        await self.on_append(ws, current)
                elif kind == "input_audio_buffer.commit":
                    if not validated:
                        self.violations.append("commit before session.update")
                    if event.get("final"):
                        if current is None or not current.audio:
                            self.violations.append("empty final commit")
                            continue
                        current.final = True
                        if self.hold_finals is not None:
                            await self.hold_finals.wait()
                        if self.answer_final:
                            await ws.send(json.dumps({"type": "transcription.delta", "delta": ""}))
                            samples = len(current.audio) // 2
                            await ws.send(
                                json.dumps(
                                    {
                                        "type": "transcription.done",
                                        "text": str(samples),
                                        "usage": {"audio_samples": samples},
                                    }
                                )
                            )
                            current = None
                    else:
                        if current is not None:
                            self.violations.append("non-final commit while a generation is open")
                            continue
                        current = Generation()
                        self.generations.append(current)
                else:
                    self.violations.append(f"unknown event {kind!r}")
        except ConnectionClosed:
            pass
        finally:
            self.open_connections -= 1
