"""The call registry: how many calls may run at once, and that every call ends cleanly.

A call is reserved *before* any expensive work (peer connection, STT socket, pipeline), so a
busy server refuses cheaply. The reservation is released exactly once, however the call ends:
the pipeline finishes, the client vanishes, the pipeline fails, or the server shuts down
(:meth:`CallRegistry.shutdown` cancels every call and waits for it).

Counters (active, started, ended, refused) are kept for health and metrics.

Each call also carries what its record needs (:meth:`Call.as_record`, the schema the README's
"Call records" section shows): its turns (filled by
:mod:`agent.observability.call_record`), its carrier's ids and why it ended. Whoever ends a
call says why (:meth:`Call.end_because`, first reason wins); the registry fills in the rest
("error", "agent ended the call", "drain", "server shutdown") and tells its listeners
(:meth:`CallRegistry.when_ended`: the JSON Lines writer) once a call has ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

from loguru import logger

RECORD_SCHEMA = 1
"""The version of :meth:`Call.as_record`'s shape; raised when a field changes meaning."""


class CallLimitReached(RuntimeError):
    """The server already runs its maximum number of concurrent calls."""

    def __init__(self, max_calls: int) -> None:
        super().__init__(
            f"the server is at its limit of {max_calls} concurrent calls; try again later "
            "(raise server.max_calls / VOICE_AGENT_SERVER__MAX_CALLS if the machine can take more)"
        )
        self.max_calls = max_calls


@dataclass(frozen=True, slots=True)
class CallStats:
    active: int
    started: int
    ended: int
    refused: int
    max_calls: int


class StageTimings(Protocol):
    """A turn's latency stages as :class:`agent.observability.turn_latency.TurnTimings` keeps
    them, read when the record is shown (so a running call shows its stages as they come)."""

    @property
    def complete(self) -> bool: ...

    def stages_ms(self) -> dict[str, int | None]: ...


@dataclass(eq=False)
class CallTurn:
    """One user turn and the bot's answer to it, as the call record shows it.

    Turn 0 holds what the bot said before the caller first spoke (a greeting)."""

    index: int
    started_at: float = field(default_factory=time.time)
    user: list[str] = field(default_factory=list)
    """The caller's final transcripts in this turn."""
    bot: list[str] = field(default_factory=list)
    """The bot's text as played to the caller (written to the connection in real time),
    sentence by sentence; text generated but cut off by an interruption is not here."""
    interrupted: bool = False
    """The caller spoke over the answer before it had all played."""
    timings: StageTimings | None = field(default=None, repr=False)

    @property
    def heard_or_said(self) -> bool:
        """Words were recognized or played (a VAD false start has neither: not recorded)."""
        return bool(self.user or self.bot or self.interrupted)

    def as_record(self) -> dict[str, Any]:
        latency = self.timings.stages_ms() if self.timings is not None else None
        return {
            "index": self.index,
            "started_at": self.started_at,
            "user": " ".join(self.user),
            "bot": " ".join(self.bot),
            "interrupted": self.interrupted,
            "answered": bool(self.timings and self.timings.complete),
            "latency_ms": latency,
        }


@dataclass(eq=False)
class Call:
    """One reserved slot: a call that is being set up or is running."""

    id: str
    kind: str
    registry: CallRegistry = field(repr=False)
    created_at: float = field(default_factory=time.monotonic)
    task: asyncio.Task[Any] | None = field(default=None, repr=False)
    released: bool = False
    turns: list[CallTurn] = field(default_factory=list)
    """The conversation, turn by turn (:mod:`agent.observability.call_record`)."""
    errors: list[dict[str, Any]] = field(default_factory=list)
    """Errors the pipeline reported (processor, category, fatal, message), the first few."""
    recording: str | None = None
    """The path of the call's WAV recording, when recording is on."""
    started_at: float = field(default_factory=time.time)
    ended_at: float | None = None
    say_going_away: Callable[[], Awaitable[None]] | None = field(default=None, repr=False)
    """How to tell the client the server is going away (a phone call: close 1001), before
    :meth:`CallRegistry.shutdown` cancels the call; a transport sets it."""
    end_reason: str | None = None
    """Why the call ended ("caller hung up", "transferred to +1555…", "drain", "idle", "error" …);
    the first reason given wins (:meth:`end_because`)."""
    attributes: dict[str, str] = field(default_factory=dict)
    """Facts from the carrier or the transport: call and stream SIDs, answering-machine result."""
    utterances: list[dict[str, Any]] | None = None
    """A listen-only analytics call's diarized transcript (speaker, start_s, end_s, text; see
    :mod:`agent.analytics.conversation`); ``None`` for the agent's own calls."""
    analysis: dict[str, Any] | None = None
    """The post-call summary of an analytics call (:mod:`agent.analytics.post_call`)."""

    @property
    def user_transcript(self) -> list[str]:
        """Everything the caller said (final transcripts), in order."""
        return [text for turn in self.turns for text in turn.user]

    @property
    def bot_transcript(self) -> list[str]:
        """Everything the bot said that the caller heard, sentence by sentence."""
        return [text for turn in self.turns for text in turn.bot]

    def as_record(self) -> dict[str, Any]:
        """The call record: ``GET /calls/{id}`` and one line of the JSON Lines file."""
        return {
            "schema": RECORD_SCHEMA,
            "id": self.id,
            "kind": self.kind,
            "active": not self.released,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "duration_s": None
            if self.ended_at is None
            else round(self.ended_at - self.started_at, 3),
            "end_reason": self.end_reason,
            "attributes": dict(self.attributes),
            "turns": [turn.as_record() for turn in self.turns if turn.heard_or_said],
            "errors": list(self.errors),
            "recording": self.recording,
            "user_transcript": self.user_transcript,
            "bot_transcript": self.bot_transcript,
            **(
                {"utterances": list(self.utterances), "analysis": self.analysis}
                if self.utterances is not None
                else {}
            ),
        }

    def end_because(self, reason: str) -> None:
        """Say why the call is ending; a later reason does not overwrite an earlier one."""
        if self.end_reason is None:
            self.end_reason = reason

    def release(self) -> None:
        """Give the slot back. Idempotent: only the first call counts."""
        self.registry._release(self)


class CallRegistry:
    """Counts, limits and owns the calls of one server process."""

    def __init__(self, *, max_calls: int, history: int = 50) -> None:
        if max_calls < 1:
            raise ValueError("max_calls must be at least 1")
        self._max_calls = max_calls
        self._calls: dict[str, Call] = {}
        self._history: deque[Call] = deque(maxlen=history)
        self._started = 0
        self._ended = 0
        self._refused = 0
        self._closing = False
        self._seq = itertools.count(1)
        self._all_ended = asyncio.Event()  # set when the last running call ends
        self._listeners: list[Callable[[Call], None]] = []

    @property
    def max_calls(self) -> int:
        return self._max_calls

    @property
    def stats(self) -> CallStats:
        return CallStats(
            active=len(self._calls),
            started=self._started,
            ended=self._ended,
            refused=self._refused,
            max_calls=self._max_calls,
        )

    @property
    def has_capacity(self) -> bool:
        return not self._closing and len(self._calls) < self._max_calls

    @property
    def draining(self) -> bool:
        """New calls are refused: the server is draining or shutting down."""
        return self._closing

    def calls(self) -> list[Call]:
        return list(self._calls.values())

    def find(self, call_id: str) -> Call | None:
        """A running call, or one of the last ``history`` calls that ended."""
        return self._calls.get(call_id) or next(
            (call for call in self._history if call.id == call_id), None
        )

    def recent(self) -> list[Call]:
        """The last calls that ended, oldest first."""
        return list(self._history)

    def when_ended(self, listener: Callable[[Call], None]) -> None:
        """Call ``listener(call)`` once each call has ended (its record is final). A listener
        must return quickly and hand slow work (disk) elsewhere; one that raises is logged."""
        self._listeners.append(listener)

    def reserve(self, kind: str) -> Call:
        """Take a slot for a new call of ``kind`` (``webrtc``, ``twilio`` …).

        Raises:
            CallLimitReached: all slots are taken or the server is shutting down.
        """
        if not self.has_capacity:
            self._refused += 1
            logger.warning(f"refusing a {kind} call: {len(self._calls)}/{self._max_calls} active")
            raise CallLimitReached(self._max_calls)
        call_id = f"{kind}-{next(self._seq)}-{uuid.uuid4().hex[:8]}"
        call = Call(id=call_id, kind=kind, registry=self)
        self._calls[call_id] = call
        self._started += 1
        logger.info(f"call {call_id} reserved ({len(self._calls)}/{self._max_calls} active)")
        return call

    def spawn(self, call: Call, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``work`` for ``call`` in the background; the slot is released when it ends."""
        task = asyncio.get_running_loop().create_task(self.run(call, work), name=f"call:{call.id}")
        call.task = task
        return task

    async def run(self, call: Call, work: Coroutine[Any, Any, Any]) -> None:
        """Run ``work`` for ``call`` in the current task (e.g. a WebSocket handler).

        Errors are logged, never raised: one failing call must not harm the server.
        Cancellation propagates, after the slot is released.
        """
        if call.task is None:
            call.task = asyncio.current_task()
        try:
            await work
        except asyncio.CancelledError:
            logger.info(f"call {call.id} cancelled")
            call.end_because("cancelled")
            raise
        except Exception:
            logger.exception(f"call {call.id} failed")
            call.end_because("error")
        else:
            call.end_because("agent ended the call")
        finally:
            call.release()

    def _release(self, call: Call) -> None:
        if call.released:
            return
        call.released = True
        call.ended_at = time.time()
        call.end_because("ended")  # nobody said why: the record still says it ended
        if self._calls.pop(call.id, None) is not None:
            self._ended += 1
            self._history.append(call)
            if not self._calls:
                self._all_ended.set()
        logger.info(
            f"call {call.id} ended ({len(self._calls)}/{self._max_calls} active): {call.end_reason}"
        )
        for listener in self._listeners:
            try:
                listener(call)
            except Exception:
                logger.exception(f"call {call.id}: a listener failed on its end")

    async def drain(self, *, timeout_s: float) -> None:
        """Refuse new calls, let running ones end on their own for up to ``timeout_s``, then
        cancel the rest (:meth:`shutdown`)."""
        self._closing = True
        if self._calls:
            logger.info(f"draining: {len(self._calls)} calls may run for up to {timeout_s:g} s")
            self._all_ended.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._all_ended.wait(), timeout_s)
        if self._calls:
            logger.warning(f"drain timeout: ending {len(self._calls)} calls still running")
        await self.shutdown(reason="drain")

    async def shutdown(self, *, grace_s: float = 10.0, reason: str = "server shutdown") -> None:
        """Refuse new calls, cancel every running call (its end reason: ``reason``) and wait
        for each to finish."""
        self._closing = True
        for call in self._calls.values():
            call.end_because(reason)
        farewells = [c.say_going_away() for c in self._calls.values() if c.say_going_away]
        if farewells:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    asyncio.gather(*farewells, return_exceptions=True), timeout=grace_s
                )
        current = asyncio.current_task()
        tasks = [c.task for c in self._calls.values() if c.task and c.task is not current]
        for task in tasks:
            task.cancel()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace_s)
            for task in pending:
                logger.error(f"{task.get_name()} did not stop within {grace_s} s of cancellation")
        for call in list(self._calls.values()):  # reservations that never got a task
            call.release()
