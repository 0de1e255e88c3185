"""A realtime peer that follows vLLM's ``/v1/realtime`` protocol to the letter, with fault knobs.

It answers like vLLM: ``session.created`` on accept; while a generation runs, deltas if asked
(vLLM sends one per 80 ms step, most of them empty); after the final commit an empty delta
and ``transcription.done``. ``GET /health`` answers 200, other paths 404. Every rule a client
can break (``/work/shared/docs/realtime-protocol.md`` §1) is answered as vLLM answers it (an
``error`` event with vLLM's code, the socket left open; a binary frame ends the session) and
written to ``violations``: tests assert it stays empty. Events are parsed and written with
:mod:`agent.stt.protocol`, the vocabulary the client under test uses.

Unless ``transcript`` is set, a generation's transcript is the number of samples it received,
so a test sees lost or duplicated audio as a wrong number.

Faults, counted in appends on one connection; each fires once, on the first connection that
gets there, so the client's reconnect finds a healthy peer:

- ``drop_after=N``: close with 1011 after the Nth append (an engine restart);
- ``stall_after=N``: after the Nth append, read on but answer nothing (a stalled engine);
- ``garbage_after=N``: after the Nth append, send one text frame that is not JSON;
- ``hold_finals``: answer each final commit only once this event is set (a slow engine);
- ``final_delay_s``: answer each final commit this long after it (a slow recognizer, so a
  final can land after the caller went on speaking);
- ``words_from_samples=N``: a generation of fewer samples comes back with no words (a
  recognizer that cannot decode a greeting said in a breath alone);
- ``answer_final=False``: leave final commits unanswered (a lost ``done``);
- ``on_append``: a coroutine called after every append, for scripted replies;
- ``transcribe``: a generation's transcript from a function of it (a bench's reference words,
  :mod:`tests.fakes.reference_words`), asked when the final commit arrives.

Benches use it as an instant recognizer: ``model=None`` (any served name), a fixed
``transcript``, ``deltas="steps"`` or ``"appends"``, ``keep_audio=False``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Literal

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from agent.stt.protocol import (
    SAMPLE_RATE,
    AudioAppend,
    ErrorEvent,
    ProtocolError,
    ServerEvent,
    SessionCreated,
    SessionUpdate,
    TranscriptionDelta,
    TranscriptionDone,
    parse_client_event,
)

STEP_SAMPLES = SAMPLE_RATE * 80 // 1000
"""vLLM re-frames audio into 80 ms steps and sends one delta per step."""

Send = Callable[[ServerEvent], Awaitable[None]]
Deltas = Literal["none", "steps", "appends"]
"""``none``: only the empty delta before ``done``; ``steps``: one per 80 ms of audio, as vLLM;
``appends``: one per append at once (a round-trip bench's echo)."""


@dataclass
class Generation:
    """What one generation received, from its non-final commit to its final one."""

    audio: bytearray = field(default_factory=bytearray)
    samples: int = 0
    appends: int = 0
    final: bool = False
    committed_at: float | None = None
    """When the final commit arrived (``time.monotonic()``)."""


AppendHook = Callable[[Send, Generation], Awaitable[None]]


@dataclass
class RealtimePeer:
    """``async with RealtimePeer() as peer``: serving on ``peer.url`` for the block."""

    model: str | None = "voxtral-test"
    """The served model name ``session.update`` must carry; ``None`` accepts any."""
    transcript: str | None = None
    deltas: Deltas = "none"
    delta_text: str = ""
    keep_audio: bool = True
    answer_final: bool = True
    hold_finals: asyncio.Event | None = None
    final_delay_s: float = 0.0
    words_from_samples: int = 0
    drop_after: int | None = None
    stall_after: int | None = None
    garbage_after: int | None = None
    on_append: AppendHook | None = None
    transcribe: Callable[[Generation], str] | None = None
    port: int = 0
    paths: tuple[str, ...] = ("/v1/realtime",)
    """Where the socket is served; add SageMaker's ``/invocations-bidirectional-stream`` to
    stand behind the runtime stand-in as a container does."""

    violations: list[str] = field(default_factory=list)
    generations: list[Generation] = field(default_factory=list)
    connections: int = 0
    open_connections: int = 0
    fired: set[str] = field(default_factory=set)
    """The faults that have fired: ``drop``, ``stall``, ``garbage``."""
    _server: Server | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        assert self._server is not None, "the peer is not serving"
        return f"ws://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1/realtime"

    async def __aenter__(self) -> RealtimePeer:
        self._server = await serve(
            self._handle,
            "127.0.0.1",
            self.port,
            process_request=self._route,
            compression=None,  # as our client asks; vLLM would accept deflate too
            max_size=2**24,  # uvicorn's default, which vLLM serves under
            ping_interval=None,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    def _route(self, connection: ServerConnection, request: Request) -> Response | None:
        if request.path == "/health":
            return connection.respond(HTTPStatus.OK, "")
        if request.path not in self.paths:
            return connection.respond(HTTPStatus.NOT_FOUND, "no such path\n")
        return None

    def transcripts(self) -> list[int]:
        """Samples received per finished generation."""
        return [g.samples for g in self.generations if g.final]

    def _fire(self, fault: str, after: int | None, appends: int) -> bool:
        if after is None or appends != after or fault in self.fired:
            return False
        self.fired.add(fault)
        return True

    async def _handle(self, ws: ServerConnection) -> None:
        self.connections += 1
        self.open_connections += 1
        try:
            await _Session(self, ws, self.connections).run()
        except ConnectionClosed:
            pass
        finally:
            self.open_connections -= 1


class _Session:
    """One connection's state, as vLLM keeps it."""

    def __init__(self, peer: RealtimePeer, ws: ServerConnection, number: int) -> None:
        self.peer = peer
        self.ws = ws
        self.number = number
        self.validated = False
        self.current: Generation | None = None
        self.appends = 0
        self.stalled = False
        self._delta = TranscriptionDelta(peer.delta_text).to_json()

    async def send(self, event: ServerEvent) -> None:
        await self.ws.send(event.to_json())

    async def reject(self, rule: str, error: ErrorEvent | None = None) -> None:
        """A client broke a rule: note it, and answer as vLLM does (if it answers at all)."""
        self.peer.violations.append(rule)
        if error is not None:
            await self.send(error)

    async def run(self) -> None:
        await self.send(SessionCreated(id=f"sess-{self.number}", created=int(time.time())))
        async for message in self.ws:
            if isinstance(message, bytes):
                await self.reject("binary frame (vLLM reads text only and ends the session)")
                await self.ws.close(1011, "binary frame")
                return
            try:
                event = parse_client_event(message)
            except ProtocolError as exc:
                await self.reject(f"{exc.code}: {exc}", ErrorEvent(str(exc), exc.code))
                continue
            if self.stalled:
                continue
            if isinstance(event, SessionUpdate):
                await self.session_update(event)
            elif isinstance(event, AudioAppend):
                if not await self.append(event):
                    return
            elif event.final:
                await self.finish()
            else:
                await self.start()

    async def session_update(self, event: SessionUpdate) -> None:
        expected = self.peer.model
        if event.model is None:
            await self.reject(
                "session.update without a model", ErrorEvent("missing model", "invalid_event")
            )
        elif expected is not None and event.model != expected:
            not_found = ErrorEvent(f"model {event.model!r} not found", "model_not_found")
            await self.reject(f"wrong model {event.model!r}", not_found)
        else:
            self.validated = True

    async def append(self, event: AudioAppend) -> bool:
        """Take the audio; ``False`` when the connection was dropped on purpose."""
        try:
            pcm = event.pcm()
        except ProtocolError as exc:
            await self.reject("audio is not base64", ErrorEvent(str(exc), exc.code))
            return True
        if len(pcm) % 2:
            await self.reject("audio is not PCM16 (odd byte count)")
        generation = self.current
        if generation is None:
            await self.reject("append outside a generation")
            return True
        steps_before = generation.samples // STEP_SAMPLES
        generation.samples += len(pcm) // 2
        generation.appends += 1
        if self.peer.keep_audio:
            generation.audio += pcm
        self.appends += 1
        if self.peer.deltas == "appends":
            await self.ws.send(self._delta)
        elif self.peer.deltas == "steps":
            for _ in range(generation.samples // STEP_SAMPLES - steps_before):
                await self.ws.send(self._delta)
        if self.peer.on_append is not None:
            await self.peer.on_append(self.send, generation)
        return await self.faults()

    async def faults(self) -> bool:
        peer = self.peer
        if peer._fire("drop", peer.drop_after, self.appends):
            await self.ws.close(1011, "injected failure: engine restarted")
            return False
        if peer._fire("stall", peer.stall_after, self.appends):
            self.stalled = True
        if peer._fire("garbage", peer.garbage_after, self.appends):
            await self.ws.send("}{ this is not JSON")
        return True

    async def start(self) -> None:
        if not self.validated:
            await self.reject("commit before session.update", _NOT_VALIDATED)
        elif self.current is not None:
            await self.reject("non-final commit while a generation is open")  # vLLM: ignored
        else:
            self.current = Generation()
            self.peer.generations.append(self.current)

    async def finish(self) -> None:
        generation = self.current
        if not self.validated:
            await self.reject("final commit before session.update", _NOT_VALIDATED)
            return
        if generation is None or generation.samples == 0:
            await self.reject("empty final commit")  # crashed older vLLM engines
            return
        generation.final = True
        generation.committed_at = time.monotonic()
        if self.peer.hold_finals is not None:
            await self.peer.hold_finals.wait()
        if self.peer.final_delay_s:
            await asyncio.sleep(self.peer.final_delay_s)
        if not self.peer.answer_final or self.stalled:
            return
        if self.peer.transcribe is not None:
            text = self.peer.transcribe(generation)
        elif self.peer.transcript is not None:
            text = self.peer.transcript
        else:
            text = str(generation.samples)
        if generation.samples < self.peer.words_from_samples:
            text = ""
        await self.send(TranscriptionDelta(""))
        await self.send(TranscriptionDone(text, {"audio_samples": generation.samples}))
        self.current = None


_NOT_VALIDATED = ErrorEvent("send session.update with the model first", "model_not_validated")
