"""Per-turn latency of one call: when each stage of the bot's answer happened.

A turn runs from the user starting to speak to the first audio of the answer going out. Its
stages, each timed on the pipeline clock from ``speech_end``:

- ``speech_end``: the real end of the user's speech, the VAD stop minus the silence
  (``stop_secs``) the VAD had to hear before deciding;
- ``vad_stop``: ``VADUserStoppedSpeakingFrame``;
- ``stt_final``: the first final ``TranscriptionFrame`` after the VAD stop;
- ``llm_first_token``: the first ``LLMTextFrame`` after an ``LLMFullResponseStartFrame``;
- ``tts_first_audio``: the first ``TTSAudioRawFrame`` a TTS service pushes after that token;
- ``first_audio_out``: ``BotStartedSpeakingFrame`` from the output transport, which pushes it
  as it writes the first audio frame to the caller.

Nothing counts for a turn before its VAD stop; the first token only once a response started
after it, TTS audio only after that token, audio out only after that audio. So an answer
still playing from an interrupted turn never lends its frames to the next one. A
``VADUserStartedSpeakingFrame`` starts a new turn, closing the previous one (answered or
not). Each stage goes to the histograms as it happens (``/metrics`` moves during a call);
each closed turn gives one structured log line and, with tracing on, one span. An answered
turn is also handed to ``on_answer`` (the server sends it to a browser client:
:mod:`agent.observability.client_latency`).

The observer is told only of a frame's first push (``observe_every_push=False``) and does one
``isinstance`` check against a tuple for the frames it does not time. Most of its cost is
Pipecat handing each first push to the observer's own task: about 3-5 µs per frame in a
micro-benchmark on this machine kind.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loguru import logger
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    ErrorFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed, ProcessorSetUp
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.stt_service import STTService
from pipecat.services.tts_service import TTSService
from pipecat.transports.base_output import BaseOutputTransport

from agent.observability.metrics import STAGES, AgentMetrics

if TYPE_CHECKING:
    from agent.observability.tracing import CallTrace

_WATCHED = (
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
    TranscriptionFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
    BotStartedSpeakingFrame,
    ErrorFrame,
)
_DOWNSTREAM = FrameDirection.DOWNSTREAM


@dataclass(slots=True)
class TurnTimings:
    """One turn's moments, in pipeline-clock nanoseconds (``None``: not reached)."""

    call_id: str
    index: int
    speech_end: int | None = None
    vad_stop: int | None = None
    stt_final: int | None = None
    llm_first_token: int | None = None
    tts_first_audio: int | None = None
    first_audio_out: int | None = None

    @property
    def complete(self) -> bool:
        """The answer's first audio went out."""
        return self.first_audio_out is not None

    def seconds(self, stage: str) -> float | None:
        """Seconds from the end of speech to ``stage`` (one of ``STAGES``)."""
        at: int | None = getattr(self, stage)
        if at is None or self.speech_end is None:
            return None
        return (at - self.speech_end) / 1e9

    def stages_ms(self) -> dict[str, int | None]:
        out: dict[str, int | None] = {}
        for stage in STAGES:
            seconds = self.seconds(stage)
            out[stage] = None if seconds is None else round(seconds * 1000)
        return out

    def log_line(self) -> str:
        """``turn_latency call_id=… turn=2 complete=true vad_stop_ms=200 … total_ms=640``."""
        ms = self.stages_ms()
        fields = [f"call_id={self.call_id}", f"turn={self.index}", f"complete={self.complete}"]
        fields += [f"{stage}_ms={_or_dash(ms[stage])}" for stage in STAGES]
        fields.append(f"total_ms={_or_dash(ms['first_audio_out'])}")
        return "turn_latency " + " ".join(fields).replace("=True", "=true").replace(
            "=False", "=false"
        )


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def _epoch_offset_ns(data: FramePushed) -> int | None:
    """What to add to a pipeline-clock time to get Unix time (for trace spans)."""
    try:
        return time.time_ns() - data.source.get_clock().get_time()
    except Exception:  # a processor that was never set up has no clock
        return None


class TurnLatencyObserver(BaseObserver):
    """Times every turn of one call and reports it to metrics, the log and a trace.

    Args:
        call_id: The call's id, in every log line and span.
        metrics: Where stages, turns, errors and STT reconnects are counted.
        log_turns: Log one ``turn_latency …`` line per closed turn.
        trace: The call's trace (:func:`agent.observability.tracing.Tracing.call`), if any.
        on_answer: Awaited with each answered turn as its first audio goes out (after it is
            logged), e.g. to show the turn's latency to the user.
    """

    def __init__(
        self,
        *,
        call_id: str,
        metrics: AgentMetrics | None = None,
        log_turns: bool = True,
        trace: CallTrace | None = None,
        on_answer: Callable[[TurnTimings], Awaitable[None]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(observe_every_push=False, **kwargs)
        self._call_id = call_id
        self._metrics = metrics
        self._log_turns = log_turns
        self._trace = trace
        self._on_answer = on_answer
        self._turn: TurnTimings | None = None
        self._answering = False  # an LLM response started after this turn's VAD stop
        self._turns = 0
        self._epoch_offset_ns: int | None = None
        self.closed_turns: list[TurnTimings] = []
        """The last few closed turns, newest last (kept short: for inspection and tests)."""

    @property
    def current_turn(self) -> TurnTimings | None:
        """The turn being timed now (the call record reads its stages)."""
        return self._turn

    # ------------------------------------------------------------------ observer events

    async def on_push_frame(self, data: FramePushed) -> None:
        frame = data.frame
        if not isinstance(frame, _WATCHED):
            return
        turn = self._turn
        if isinstance(frame, VADUserStartedSpeakingFrame):
            if data.direction is _DOWNSTREAM:
                self._begin_turn()
        elif isinstance(frame, ErrorFrame):
            self._count_error(frame, data)
        elif turn is None or turn.first_audio_out is not None:
            return
        elif isinstance(frame, VADUserStoppedSpeakingFrame):
            if data.direction is _DOWNSTREAM and turn.vad_stop is None:
                turn.vad_stop = data.timestamp
                turn.speech_end = data.timestamp - int(frame.stop_secs * 1e9)
                if self._trace is not None and self._epoch_offset_ns is None:
                    self._epoch_offset_ns = _epoch_offset_ns(data)
                self._stage(turn, "vad_stop")
        elif turn.vad_stop is None:
            return  # nothing below belongs to this turn before its VAD stop
        elif isinstance(frame, TranscriptionFrame):
            if turn.stt_final is None:
                turn.stt_final = data.timestamp
                self._stage(turn, "stt_final")
        elif isinstance(frame, LLMFullResponseStartFrame):
            self._answering = True
        elif isinstance(frame, LLMTextFrame):
            if self._answering and turn.llm_first_token is None:
                turn.llm_first_token = data.timestamp
                self._stage(turn, "llm_first_token")
        elif isinstance(frame, TTSAudioRawFrame):
            if (
                turn.llm_first_token is not None
                and turn.tts_first_audio is None
                and isinstance(data.source, TTSService)
            ):
                turn.tts_first_audio = data.timestamp
                self._stage(turn, "tts_first_audio")
        elif isinstance(frame, BotStartedSpeakingFrame):
            if (
                turn.tts_first_audio is not None
                and data.direction is _DOWNSTREAM
                and isinstance(data.source, BaseOutputTransport)
            ):
                turn.first_audio_out = data.timestamp
                self._stage(turn, "first_audio_out")
                self._close_turn(turn)
                if self._on_answer is not None:
                    await self._on_answer(turn)

    async def on_processor_setup(self, data: ProcessorSetUp) -> None:
        if isinstance(data.processor, STTService):
            self._watch_stt(data.processor)

    async def cleanup(self) -> None:
        await super().cleanup()
        if self._turn is not None and not self._turn.complete:
            self._close_turn(self._turn)
        self._turn = None
        if self._trace is not None:
            self._trace.end()

    # ------------------------------------------------------------------ turns

    def _begin_turn(self) -> None:
        previous = self._turn
        if previous is not None and not previous.complete:
            if previous.vad_stop is None:
                return  # the same turn's start seen again: keep timing it
            self._close_turn(previous)
        self._turns += 1
        self._turn = TurnTimings(call_id=self._call_id, index=self._turns)
        self._answering = False

    def _stage(self, turn: TurnTimings, stage: str) -> None:
        if self._metrics is not None:
            seconds = turn.seconds(stage)
            if seconds is not None:
                self._metrics.observe_stage(stage, max(seconds, 0.0))

    def _close_turn(self, turn: TurnTimings) -> None:
        if turn.vad_stop is None:
            return  # speech that never ended (the call did): no turn to report
        total = turn.seconds("first_audio_out")
        if self._metrics is not None:
            self._metrics.observe_turn(None if total is None else max(total, 0.0))
        if self._log_turns:
            stages = {f"{k}_ms": v for k, v in turn.stages_ms().items()}
            logger.bind(
                event="turn_latency",
                call_id=turn.call_id,
                turn=turn.index,
                complete=turn.complete,
                **stages,
            ).info(turn.log_line())
        if self._trace is not None and self._epoch_offset_ns is not None:
            self._trace.turn(turn, epoch_offset_ns=self._epoch_offset_ns)
        self.closed_turns.append(turn)
        del self.closed_turns[:-20]

    # ------------------------------------------------------------------ errors, STT

    def _count_error(self, frame: ErrorFrame, data: FramePushed) -> None:
        if self._metrics is None:
            return
        processor = frame.processor or data.source
        category = frame.category.value if frame.category is not None else "unknown"
        self._metrics.count_error(type(processor).__name__, category)

    def _watch_stt(self, stt: STTService) -> None:
        """Count the STT's reconnects: every connection that follows a lost (or rotated) one."""
        metrics = self._metrics
        if metrics is None:
            return
        dropped = False

        async def on_disconnected(_stt: STTService, *_args: Any) -> None:
            nonlocal dropped
            dropped = True

        async def on_connected(_stt: STTService, *_args: Any) -> None:
            nonlocal dropped
            if dropped:
                dropped = False
                metrics.stt_reconnects.inc()

        stt.add_event_handler("on_disconnected", on_disconnected)
        stt.add_event_handler("on_connected", on_connected)
