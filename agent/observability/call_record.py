"""Each call's record, turn by turn, as the caller lived it (kept on its ``Call``).

A turn is the turn-latency observer's turn (:mod:`agent.observability.turn_latency`: from
the caller starting to speak to the next time they do), so a record's turn ``index`` is the
``turn=`` of that turn's ``turn_latency`` log line and its stages are read from the same
timings. Into each turn go:

- ``user``: the STT's final transcripts. A final that arrives after the caller already
  started speaking again (their next turn has no VAD stop yet) belongs to the turn before,
  if that turn has no words yet: the STT finishes one turn's transcript before the next.
- ``bot``: the text **as played**. A TTS service without word timestamps (ours) pushes each
  sentence's ``TTSTextFrame`` after that sentence's audio; the output transport queues it
  behind the audio and pushes it on only once the audio before it was written to the
  caller at real-time pace. An interruption empties that queue, so the sentences cut off
  never come out of the output transport: what does is what was played. (With a TTS that
  gives word timestamps the same holds word by word.) The text is attributed to the turn
  whose answer produced it (by the TTS context the LLM response opened), not to whatever
  turn is current when it finishes playing.
- ``interrupted``: an ``InterruptionFrame`` came while the turn's answer was still being
  generated or played.

Text said before the caller's first turn (a greeting) goes to turn 0. Pipeline errors are
kept on the call (the first :data:`MAX_ERRORS`); a fatal one ends the call with the reason
``error``. Nothing here logs what was said.

Cost: it must see a ``TTSTextFrame`` again when the output transport pushes it on, so it
asks for every push (``observe_every_push=True``), and returns after one ``isinstance`` for
the frames it does not follow.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    ErrorFrame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    TranscriptionFrame,
    TTSStartedFrame,
    TTSTextFrame,
    VADUserStartedSpeakingFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.tts_service import TTSService
from pipecat.transports.base_output import BaseOutputTransport

from agent.calls import Call, CallTurn
from agent.observability.turn_latency import TurnLatencyObserver, TurnTimings

MAX_ERRORS = 20
"""Errors kept on one call's record (a failing service could report one per turn)."""

_CONTEXTS_KEPT = 16
"""TTS contexts remembered for attributing played text (one per answer; a few in flight)."""

_WATCHED = (
    VADUserStartedSpeakingFrame,
    TranscriptionFrame,
    LLMFullResponseStartFrame,
    LLMFullResponseEndFrame,
    TTSStartedFrame,
    InterruptionFrame,
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    ErrorFrame,
)
_DOWN = FrameDirection.DOWNSTREAM


class CallRecordObserver(BaseObserver):
    """Fills ``call.turns`` (and ``call.errors``) from one call's frames.

    Args:
        call: The call whose record this is.
        latency: The call's turn-latency observer; it must be called before this one for
            each frame (list it first among the inline observers), so a turn it begins is
            seen here on the same frame.
        redact: Applied to what the caller and the bot said before it is kept
            (``records.redact``: :func:`agent.analytics.redaction.redact`).
    """

    def __init__(
        self,
        call: Call,
        *,
        latency: TurnLatencyObserver,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        super().__init__(observe_every_push=True)
        self._call = call
        self._redact = redact or _unchanged
        self._latency = latency
        self._turn: CallTurn | None = None  # the newest turn
        self._timings: TurnTimings | None = None  # its latency timings
        self._previous: CallTurn | None = None
        self._greeting: CallTurn | None = None  # turn 0
        self._answering: CallTurn | None = None  # whose answer is being generated or played
        self._response_ended = False
        self._answer_heard = False
        self._turn_of_context: dict[str, CallTurn] = {}

    async def on_push_frame(self, data: FramePushed) -> None:
        frame = data.frame
        if isinstance(frame, TTSTextFrame):
            if isinstance(data.source, BaseOutputTransport) and data.direction is _DOWN:
                self._played(frame)
            return
        if not data.first_push or not isinstance(frame, _WATCHED):
            return
        if isinstance(frame, VADUserStartedSpeakingFrame):
            if data.direction is _DOWN:
                self._follow_latency()
        elif isinstance(frame, TranscriptionFrame):
            self._heard(frame.text)
        elif isinstance(frame, LLMFullResponseStartFrame):
            self._answering = self._turn or self._turn_zero()
            self._response_ended = self._answer_heard = False
        elif isinstance(frame, LLMFullResponseEndFrame):
            self._response_ended = True
        elif isinstance(frame, TTSStartedFrame):
            if isinstance(data.source, TTSService) and frame.context_id:
                self._open_context(frame.context_id)
        elif isinstance(frame, InterruptionFrame):
            if data.direction is _DOWN and self._answering is not None:
                self._answering.interrupted = True
                self._answering = None
        elif isinstance(frame, (BotStartedSpeakingFrame, BotStoppedSpeakingFrame)):
            if data.direction is _DOWN and isinstance(data.source, BaseOutputTransport):
                self._bot_turn(started=isinstance(frame, BotStartedSpeakingFrame))
        elif isinstance(frame, ErrorFrame):
            self._error(frame, data)

    # ------------------------------------------------------------------ turns

    def _follow_latency(self) -> None:
        """Start a record turn when the latency observer started a new one."""
        timings = self._latency.current_turn
        if timings is None or timings is self._timings:
            return
        turn = CallTurn(index=timings.index, timings=timings)
        self._call.turns.append(turn)
        self._previous, self._turn, self._timings = self._turn, turn, timings

    def _turn_zero(self) -> CallTurn:
        if self._greeting is None:
            self._greeting = CallTurn(index=0)
            self._call.turns.insert(0, self._greeting)
        return self._greeting

    def _heard(self, text: str) -> None:
        text = text.strip()
        if not text:
            return
        turn = self._turn
        if (
            turn is not None
            and self._timings is not None
            and self._timings.vad_stop is None
            and self._previous is not None
            and not self._previous.user
        ):
            turn = self._previous  # the caller spoke again before this final came
        (turn or self._turn_zero()).user.append(self._redact(text))

    def _open_context(self, context_id: str) -> None:
        self._turn_of_context[context_id] = self._answering or self._turn or self._turn_zero()
        while len(self._turn_of_context) > _CONTEXTS_KEPT:
            del self._turn_of_context[next(iter(self._turn_of_context))]

    def _played(self, frame: TTSTextFrame) -> None:
        text = frame.text.strip()
        if not text:
            return
        turn = (
            self._turn_of_context.get(frame.context_id or "")
            or self._answering
            or self._turn
            or self._turn_zero()
        )
        turn.bot.append(self._redact(text))

    def _bot_turn(self, *, started: bool) -> None:
        if started:
            self._answer_heard = self._answering is not None
        elif self._response_ended and self._answer_heard:
            self._answering = None  # the whole answer played: nothing left to interrupt

    # ------------------------------------------------------------------ errors

    def _error(self, frame: ErrorFrame, data: FramePushed) -> None:
        if frame.fatal:
            self._call.end_because("error")
        if len(self._call.errors) >= MAX_ERRORS:
            return
        processor = frame.processor or data.source
        self._call.errors.append(
            {
                "at": time.time(),
                "processor": type(processor).__name__,
                "category": frame.category.value if frame.category is not None else None,
                "fatal": bool(frame.fatal),
                "message": str(frame.error)[:200],
            }
        )


def _unchanged(text: str) -> str:
    return text
