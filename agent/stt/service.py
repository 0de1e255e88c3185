"""Voxtral realtime speech-to-text as a Pipecat service.

Streams a caller's audio to Voxtral-Mini-4B-Realtime-2602 over vLLM's Realtime API and turns
the replies into Pipecat transcription frames. The wire protocol lives in
:mod:`agent.stt.protocol`; how the text travels (a WebSocket to vLLM, or a SageMaker HTTP/2
bidirectional stream) is a :class:`~agent.stt.channels.RealtimeChannel` made by a factory,
so the service never knows which.

One generation per user turn::

    VAD start  → commit (non-final), pre-roll, then appends as audio arrives
    VAD stop   → commit {"final": true}
    deltas     → InterimTranscriptionFrame (accumulated text; empty deltas ignored)
    done       → TranscriptionFrame(finalized=True) if it had words, then, words or not,
                 SpeechSegmentTranscribedFrame, so a turn strategy knows nothing more is coming
                 for that VAD segment and the turn ends without a fallback wait

A short segment the recognizer heard no words in alone ("Hello there." said in 0.2 s) is not
dropped: its audio goes in front of the next segment's, if the user speaks again within
:data:`_JOIN_UNHEARD_WITHIN_S`, and the words come back in that segment's transcript.

Every byte of a turn is kept until its ``done`` arrives: if the connection drops, the service
reconnects with bounded backoff, redoes the session and replays the turn, so no word is lost.
If the user starts talking again before the previous turn's ``done``, the new turn waits
(buffered) and starts the moment the old one finishes, because vLLM runs one generation per
connection and silently ignores a second non-final commit.

Eager end of turn (``enable_eager_end_of_turn=True``, Pipecat's
:class:`~pipecat.turns.eager_end_of_turn_mixin.EagerEndOfTurnSTTServiceMixin`): once the VAD
has stopped and the interim transcript has had no new words for ``params.eager_stable_s``,
that transcript goes out as an ``EagerTranscriptionFrame``, so an answer can start before the
final one arrives; the user speaking again withdraws it (``EagerEndOfTurnCancelFrame``), the
final transcript resolves it. Off by default: what to do with it is the turn strategies' and
the user aggregator's business.

Whatever ends a call (an end, a cancel) a generation still open gets its final commit, so the
server frees its memory at once. A session the server closes for idleness (``error`` code
``idle_timeout``) is reopened quietly; ``buffer_full`` pauses appends briefly (backpressure)
instead of failing the turn.

Event handlers: :class:`STTService`'s ``on_connected``, ``on_disconnected`` and
``on_connection_error`` (with the reason).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from typing import Any

from loguru import logger
from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    Frame,
    InputAudioRawFrame,
    InterimTranscriptionFrame,
    StartFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.settings import STTSettings
from pipecat.services.stt_service import STTService
from pipecat.turns.eager_end_of_turn_mixin import EagerEndOfTurnSTTServiceMixin
from pipecat.utils.network import QuickFailureTracker, exponential_backoff_time
from pipecat.utils.time import time_now_iso8601

from agent.stt.audio import StreamConverter, silence
from agent.stt.channels import ChannelError, ChannelFactory, RealtimeChannel
from agent.stt.frames import SpeechSegmentTranscribedFrame
from agent.stt.params import RealtimeSTTParams
from agent.stt.protocol import (
    VOXTRAL_MODEL,
    Commit,
    ErrorEvent,
    ProtocolError,
    TranscriptionDelta,
    TranscriptionDone,
    UnknownEvent,
    encode_pcm_append,
    parse_server_event,
)
from agent.stt.session import start_session
from agent.stt.turn import BYTES_PER_SECOND, PreRoll, Turn, seconds_to_bytes

_WATCHDOG_PERIOD_S = 0.25
_KEEP_FLOWING_AFTER_S = 0.5
_MAX_RECOVERIES_PER_TURN = 2
_FINAL_COMMIT_ON_EXIT_S = 1.0
_CLOSE_WAIT_S = 5.0
_BACKPRESSURE_PAUSE_S = 0.25
_JOIN_UNHEARD_MAX_S = 3.0
"""A segment with no words and at most this much audio (pre-roll included) is tried again in
front of the next one: a greeting said in a breath, not a minute of background noise."""
_JOIN_UNHEARD_WITHIN_S = 3.0
"""How soon after its transcript the next segment must start for an unheard one to join it."""

_ERROR_HINTS = {
    "model_not_found": "set stt.model to the server's --served-model-name",
    "model_not_validated": "the session was not configured before audio was committed",
    "invalid_audio": "audio must be base64 PCM16 at 16 kHz",
}


class VoxtralRealtimeSTTService(EagerEndOfTurnSTTServiceMixin, STTService):
    """Pipecat STT service for Voxtral realtime on vLLM (directly or through SageMaker).

    Example::

        stt = VoxtralRealtimeSTTService(
            channel_factory=websocket_channel_factory("ws://gpu-host:8000/v1/realtime"),
            settings=VoxtralRealtimeSTTService.Settings(model=VOXTRAL_MODEL),
        )
    """

    Settings = STTSettings
    _settings: STTSettings

    def __init__(
        self,
        *,
        channel_factory: ChannelFactory,
        settings: STTSettings | None = None,
        params: RealtimeSTTParams | None = None,
        **kwargs: Any,
    ) -> None:
        """Create the service.

        Args:
            channel_factory: Opens a fresh channel to the realtime endpoint (called on start,
                on every reconnect and on every connection rotation).
            settings: ``model`` must be the server's served model name.
            params: Turn, watchdog and reconnect tuning (see :class:`RealtimeSTTParams`).
            **kwargs: Passed to :class:`STTService`; ``enable_eager_end_of_turn=True`` sends
                the stable interim transcript at the VAD stop as an eager end of turn.
        """
        params = params or RealtimeSTTParams()
        default_settings = STTSettings(model=VOXTRAL_MODEL, language=None)
        if settings is not None:
            default_settings.apply_update(settings)
        kwargs.setdefault("ttfs_p99_latency", params.ttfs_p99_latency)
        super().__init__(settings=default_settings, **kwargs)
        self._channel_factory = channel_factory
        self._params = params
        self._chunk_bytes = max(2, seconds_to_bytes(params.chunk_ms / 1000))
        self._max_turn_bytes = seconds_to_bytes(params.max_generation_s + 60)

        self._converter = StreamConverter()
        self._preroll = PreRoll(params.preroll_s)
        self._turns: deque[Turn] = deque()  # head: the turn on the wire; tail: newer turns
        self._unheard = b""  # the last segment's audio, if it had no words (joins the next)
        self._unheard_until = 0.0
        self._speaking = False
        self._input_rate = 0
        self._input_channels = 1

        self._channel: RealtimeChannel | None = None
        self._connected_at = 0.0
        self._generation_open = False  # a non-final commit went out, no done yet
        self._final_sent_at: float | None = None
        self._generation_started_at = 0.0
        self._last_event_at = 0.0
        self._last_send_at = 0.0
        self._rotating = False
        self._idle_closed = False  # the server closed the session for idleness
        self._finished = False  # stopped or cancelled: never connect again
        self._closing: set[asyncio.Task[None]] = set()  # channels closing in the background
        self._hold_audio_until = 0.0  # backpressure: appends wait until then
        self._disconnecting = False
        self._send_lock = asyncio.Lock()  # keeps commit + its audio in order on the wire
        self._connection_task: asyncio.Task[None] | None = None
        self._watchdog_task: asyncio.Task[None] | None = None
        self._quick_failures = QuickFailureTracker()
        self._last_words_at = 0.0  # when the head turn's interim text last grew
        self._eager_task: asyncio.Task[None] | None = None

    def can_generate_metrics(self) -> bool:
        return True

    @property
    def has_pending_turns(self) -> bool:
        """Whether a turn is being spoken or still waits for its final transcript."""
        return bool(self._turns)

    @property
    def connected(self) -> bool:
        """Whether a channel is open and its session configured."""
        return self._channel is not None

    # ------------------------------------------------------------------ lifecycle

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        if self._finished:
            # A call that ends right as it starts: Pipecat's CancelFrame (a system frame)
            # can overtake the queued StartFrame. Connecting now would leak the socket.
            return
        self._disconnecting = False
        if self._connection_task is None:
            self._connection_task = self.create_task(self._run_connection(), "stt_connection")
        if self._watchdog_task is None:
            self._watchdog_task = self.create_task(self._run_watchdog(), "stt_watchdog")

    async def stop(self, frame: EndFrame) -> None:
        await super().stop(frame)
        await self._shutdown()

    async def cancel(self, frame: CancelFrame) -> None:
        await super().cancel(frame)
        await self._shutdown()

    async def cleanup(self) -> None:
        """Always runs when the pipeline ends, also for a call cancelled before this service
        saw its ``StartFrame`` (then neither ``stop`` nor ``cancel`` is called)."""
        await super().cleanup()
        await self._shutdown()

    async def _shutdown(self) -> None:
        self._disconnecting = self._finished = True
        await self._stop_eager_wait()
        if self._generation_open and self._channel is not None:
            # A generation left open pins the server's memory until its idle timeout (vLLM
            # #46815): end it, whatever ended the call.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_FINAL_COMMIT_ON_EXIT_S):
                    await self._send(Commit(final=True).to_json())
        for task in (self._watchdog_task, self._connection_task):
            if task:
                await self.cancel_task(task, timeout=2.0)
        self._watchdog_task = self._connection_task = None
        await self._close_channel()
        if self._closing:  # bounded by each channel's own teardown deadlines
            await asyncio.wait(self._closing, timeout=_CLOSE_WAIT_S)

    # ------------------------------------------------------------------ frames

    async def process_audio_frame(
        self, frame: InputAudioRawFrame, direction: FrameDirection
    ) -> None:
        self._input_rate = frame.sample_rate
        self._input_channels = frame.num_channels
        await super().process_audio_frame(frame, direction)

    async def run_stt(self, audio: bytes):  # type: ignore[override]
        """Send (or buffer) one pipeline frame; transcripts arrive from the receive task.

        Between turns the frame only joins the pre-roll, as it came: it is resampled only if
        a turn starts while it is still there.
        """
        rate, channels = self._input_rate or self.sample_rate, self._input_channels
        if not self._speaking:
            self._preroll.hear(audio, rate, channels)
        else:
            pcm = self._converter.convert(audio, rate, channels)
            if pcm:
                await self._hear(pcm)
        yield None

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, VADUserStartedSpeakingFrame):
            await self._start_turn()
        elif isinstance(frame, VADUserStoppedSpeakingFrame):
            await self._end_turn()

    # ------------------------------------------------------------------ turns

    async def _hear(self, pcm: bytes) -> None:
        """16 kHz audio of the current turn."""
        turn = self._turns[-1]
        chunk = turn.hear(pcm)
        if turn is self._turns[0] and self._channel is not None:
            if not self._generation_open:
                await self._begin_generation(turn)
            elif chunk:
                if time.monotonic() < self._hold_audio_until:
                    turn.hold(chunk)  # backpressure: it goes out with the next append
                    return
                async with self._send_lock:
                    # A reconnect while this waited for the lock closed the generation; its
                    # replay carries this chunk, so sending it too would repeat it.
                    if self._generation_open:
                        await self._send(encode_pcm_append(chunk))

    async def _start_turn(self) -> None:
        if self._speaking:
            return
        self._speaking = True
        # The user goes on: an eager end of turn predicted at the last VAD stop was wrong.
        await self._stop_eager_wait()
        await self._cancel_eager_end_of_turn()
        turn = Turn(chunk_bytes=self._chunk_bytes, max_bytes=self._max_turn_bytes)
        unheard, self._unheard = self._unheard, b""
        if unheard and time.monotonic() < self._unheard_until:
            turn.prepend(unheard)
        preroll = self._preroll
        seed = preroll.take()
        if seed:  # the turn's resampler starts here, warmed up by the pre-roll
            turn.hear(self._converter.convert(seed, preroll.sample_rate, preroll.channels))
        self._turns.append(turn)
        if len(self._turns) == 1 and self._channel is not None:
            await self._begin_generation(turn)

    async def _end_turn(self) -> None:
        if not self._speaking:
            return
        turn = self._turns[-1]
        held_back = self._converter.flush()  # the resampler's last few ms belong to this turn
        if held_back:
            await self._hear(held_back)
        self._speaking = False
        turn.ended = True
        if turn.audio_bytes == 0:
            # Nothing was heard: nothing to transcribe and no empty commit. (A turn with no
            # audio never opened a generation, so dropping it can't orphan one.)
            self._turns.pop()
            await self.push_frame(SpeechSegmentTranscribedFrame(""))
        elif turn is self._turns[0] and self._generation_open and self._channel is not None:
            await self._finish_generation(turn)
        if self.eager_end_of_turn_enabled and self._turns and turn is self._turns[0]:
            await self._stop_eager_wait()
            self._eager_task = self.create_task(self._eager_when_stable(turn), "stt_eager")

    async def _begin_generation(self, turn: Turn) -> None:
        """Start the head turn's generation: commit, then all its audio so far.

        Never sends a commit without audio behind it (empty commits crashed old vLLM).
        """
        async with self._send_lock:
            if self._generation_open:
                return  # begun while this waited for the lock (a reconnect's replay)
            audio = turn.replay()
            if not audio:
                return
            self._generation_open = True
            self._generation_started_at = self._last_event_at = time.monotonic()
            self._last_words_at = self._generation_started_at
            turn.text = ""
            await self._send(Commit(final=False).to_json())
            await self._send(encode_pcm_append(audio))
        if turn.ended:
            await self._finish_generation(turn)

    async def _finish_generation(self, turn: Turn) -> None:
        async with self._send_lock:
            if not self._generation_open:
                # The channel was replaced while this waited for the lock (a send stuck on a
                # frozen stream holds it): the new channel's replay commits the turn.
                return
            tail = turn.take_outbox()
            if tail:
                await self._send(encode_pcm_append(tail))
            self._final_sent_at = self._last_event_at = time.monotonic()
            await self._send(Commit(final=True).to_json())

    async def _after_done(self) -> None:
        """The head turn has its transcript: start the next waiting turn, if any."""
        self._generation_open = False
        self._final_sent_at = None
        if self._turns and self._channel is not None:
            await self._begin_generation(self._turns[0])

    # ------------------------------------------------------------------ server events

    async def _handle_event(self, message: str) -> None:
        try:
            event = parse_server_event(message)
        except ProtocolError as exc:
            await self.push_error(f"{self}: unreadable message from the STT server: {exc}")
            return
        self._last_event_at = time.monotonic()
        match event:
            case TranscriptionDelta(delta=delta):
                await self._on_delta(delta)
            case TranscriptionDone():
                await self._on_done(event)
            case ErrorEvent():
                await self._on_error(event)
            case UnknownEvent(type=event_type):
                logger.trace(f"{self}: ignoring unknown event {event_type!r}")
            case _:
                pass  # session.created / session.updated after the handshake

    async def _on_delta(self, delta: str) -> None:
        if not delta or not self._turns or not self._generation_open:
            return
        turn = self._turns[0]
        turn.text += delta
        self._last_words_at = time.monotonic()
        await self.push_frame(
            InterimTranscriptionFrame(turn.text.strip(), self._user_id, time_now_iso8601())
        )

    async def _on_done(self, event: TranscriptionDone) -> None:
        if not self._turns:
            logger.warning(f"{self}: transcription.done with no turn waiting; ignored")
            return
        turn = self._turns[0]
        text = event.text.strip() or turn.text.strip()
        await self._stop_eager_wait()
        self._clear_eager_end_of_turn()  # the final transcript settles the prediction
        if self._final_sent_at is not None:
            logger.debug(
                f"{self}: final after {time.monotonic() - self._final_sent_at:.3f} s "
                f"({turn.audio_bytes / BYTES_PER_SECOND:.1f} s of audio)"
            )
        if text:
            await self.emit_stt_usage_metrics()
            frame = TranscriptionFrame(text, self._user_id, time_now_iso8601(), result=event)
            frame.finalized = True
            await self.push_frame(frame)
        # Only now is the turn done (``has_pending_turns`` turns False after its transcript
        # is on its way); then the next waiting turn starts its generation.
        self._turns.popleft()
        if not text:
            self._join_unheard(turn)
        await self.push_frame(SpeechSegmentTranscribedFrame(text))
        await self._after_done()

    def _join_unheard(self, turn: Turn) -> None:
        """Keep a short segment with no words for the next one: alone it was too little for
        the recognizer, in front of the words that follow it usually is not."""
        if turn.audio_bytes > seconds_to_bytes(_JOIN_UNHEARD_MAX_S):
            return
        audio = turn.replay()
        if len(self._turns) > 0:
            self._turns[0].prepend(audio)  # the user already goes on: its generation waits
        else:
            self._unheard = audio
            self._unheard_until = time.monotonic() + _JOIN_UNHEARD_WITHIN_S

    async def _on_error(self, event: ErrorEvent) -> None:
        code = event.code or "unknown"
        if code == "idle_timeout":
            # The server closes sessions idle too long (vLLM PR #46926); reopen quietly.
            logger.info(f"{self}: the STT server closed an idle session; reopening")
            self._idle_closed = True
            return
        if code == "buffer_full":
            # Backpressure (vLLM PR #48130): hold appends a moment; the turn goes on.
            logger.warning(f"{self}: the STT server's audio queue is full; slowing down")
            self._hold_audio_until = time.monotonic() + _BACKPRESSURE_PAUSE_S
            return
        hint = _ERROR_HINTS.get(code)
        message = f"Voxtral realtime STT error [{code}]: {event.error}"
        await self.push_error(message + (f" ({hint})" if hint else ""))
        if code == "processing_error" and self._generation_open:
            # The server dropped the generation: restart it with the turn's audio.
            await self._restart_generation("the server reported a processing error")

    # ------------------------------------------------------------------ eager end of turn

    async def _eager_when_stable(self, turn: Turn) -> None:
        """Send ``turn``'s interim transcript as an eager end of turn once it stops growing.

        Runs from the VAD stop until the final transcript (which cancels it); sends nothing
        for a turn with no words yet.
        """
        stable_s = self._params.eager_stable_s
        while True:
            wait = self._last_words_at + stable_s - time.monotonic()
            if wait <= 0:
                break
            await asyncio.sleep(wait)
        self._eager_task = None
        text = turn.text.strip()
        if text and not self._speaking and self._turns and self._turns[0] is turn:
            await self._push_eager_end_of_turn(text, user_id=self._user_id)

    async def _stop_eager_wait(self) -> None:
        task, self._eager_task = self._eager_task, None
        if task is not None and task is not asyncio.current_task():
            await self.cancel_task(task)

    # ------------------------------------------------------------------ connection

    async def _open_channel(self) -> RealtimeChannel:
        """Open a channel and configure its session (``session.created`` → ``session.update``)."""
        timeout_s = self._params.connect_timeout_s
        channel = await asyncio.wait_for(self._channel_factory(), timeout_s)
        try:
            await start_session(channel, model=str(self._settings.model), timeout_s=timeout_s)
        except BaseException:
            await channel.close()
            raise
        return channel

    async def _run_connection(self) -> None:
        """Connect, receive until the channel ends, reconnect; give up after repeated failures."""
        failures = 0
        while not self._disconnecting:
            try:
                channel = await self._open_channel()
            except (ChannelError, TimeoutError, OSError) as exc:
                failures += 1
                retryable = getattr(exc, "retryable", True)
                if not retryable or failures >= self._params.reconnect_attempts:
                    await self._give_up(f"cannot connect to the STT server: {exc}")
                    return
                await self.push_error(f"{self}: cannot connect (attempt {failures}): {exc}")
                await asyncio.sleep(self._backoff(failures))
                continue
            failures = 0
            await self._serve_channel(channel)
            if self._disconnecting:
                return
            if self._rotating or self._idle_closed:
                self._rotating = self._idle_closed = False
                continue  # an expected close: no failure, no wait
            lived = time.monotonic() - self._connected_at
            if self._quick_failures.record(lived).should_give_up:
                await self._give_up("the STT connection keeps failing right after connecting")
                return
            await asyncio.sleep(self._params.reconnect_min_wait_s)

    async def _serve_channel(self, channel: RealtimeChannel) -> None:
        self._channel = channel
        self._connected_at = time.monotonic()
        self._generation_open = False
        self._final_sent_at = None
        await self._call_event_handler("on_connected")
        if self._turns:
            await self._begin_generation(self._turns[0])  # replay the interrupted turn
        try:
            while True:
                await self._handle_event(await channel.receive())
        except ChannelError as exc:
            if not self._disconnecting and not self._rotating and not self._idle_closed:
                logger.warning(f"{self}: STT connection lost ({exc}); reconnecting")
                await self._call_event_handler("on_connection_error", str(exc))
        finally:
            self._channel = None
            self._generation_open = False
            await channel.close()
            await self._call_event_handler("on_disconnected")

    async def _send(self, text: str) -> None:
        channel = self._channel
        if channel is None:
            return  # reconnecting: the turn's audio is kept and replayed
        try:
            await channel.send(text)
            self._last_send_at = time.monotonic()
        except ChannelError as exc:
            logger.warning(f"{self}: send failed ({exc}); the turn will be replayed")
            # Closed in the background: the receive loop sees the close and reconnects at
            # once, while a slow teardown (a frozen SageMaker stream) holds no lock of ours.
            self._close_in_background(channel)

    def _close_in_background(self, channel: RealtimeChannel) -> None:
        task = asyncio.get_running_loop().create_task(channel.close(), name=f"{self}::close")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _close_channel(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close()

    async def _drop_channel(self) -> None:
        """Close the open channel: the connection task notices, reconnects and replays the
        open turn. One path for a failed send, a stalled generation and a rotation."""
        if self._channel is not None:
            await self._channel.close()

    async def _restart_generation(self, why: str) -> None:
        turn = self._turns[0] if self._turns else None
        if turn is not None:
            turn.recoveries += 1
            if turn.recoveries > _MAX_RECOVERIES_PER_TURN:
                self._turns.popleft()
                await self.push_error(f"{self}: giving up on a turn after repeated stalls ({why})")
                await self.push_frame(SpeechSegmentTranscribedFrame(""))
        logger.warning(f"{self}: restarting the generation: {why}")
        await self._drop_channel()

    async def _give_up(self, message: str) -> None:
        logger.error(f"{self}: {message}")
        await self._call_event_handler("on_connection_error", message)
        await self.push_error(f"{self}: {message}", force_treat_as_permanent=True)

    def _backoff(self, attempt: int) -> float:
        return exponential_backoff_time(
            attempt,
            min_wait=self._params.reconnect_min_wait_s,
            max_wait=self._params.reconnect_max_wait_s,
            multiplier=self._params.reconnect_min_wait_s or 0.1,
        )

    # ------------------------------------------------------------------ watchdog

    async def _run_watchdog(self) -> None:
        while True:
            await asyncio.sleep(_WATCHDOG_PERIOD_S)
            try:
                await self._check_generation()
            except Exception as exc:  # never let the watchdog die silently
                logger.exception(f"{self}: watchdog error: {exc}")

    async def _check_generation(self) -> None:
        now = time.monotonic()
        if self._channel is None:
            return
        if not self._generation_open:
            if (
                not self._turns
                and self._params.max_connection_age_s is not None
                and now - self._connected_at > self._params.max_connection_age_s
            ):
                logger.info(f"{self}: rotating the STT connection before its maximum age")
                self._rotating = True
                await self._drop_channel()
            return
        head = self._turns[0] if self._turns else None
        silent_for = now - self._last_event_at
        if self._final_sent_at is not None:
            if silent_for > self._params.final_timeout_s:
                await self.push_error(
                    f"{self}: no final transcript {self._params.final_timeout_s:.1f}s after "
                    "the final commit; restarting the generation"
                )
                await self._restart_generation("final transcript overdue")
            return
        if silent_for > self._params.stall_timeout_s and now - self._last_send_at < 1.0:
            await self.push_error(
                f"{self}: the STT server sent nothing for {silent_for:.1f}s while audio "
                "flowed; restarting the generation"
            )
            await self._restart_generation("stalled generation")
            return
        if now - self._last_send_at > _KEEP_FLOWING_AFTER_S:
            # The transport went quiet mid-turn: keep audio flowing so the engine never idles.
            async with self._send_lock:
                await self._send(encode_pcm_append(silence(0.1)))
        if head is not None and now - self._generation_started_at > self._params.max_generation_s:
            await self._split_turn()

    async def _split_turn(self) -> None:
        """End a very long turn here and carry on in a fresh generation."""
        if not self._speaking:
            return
        logger.info(f"{self}: splitting a turn longer than {self._params.max_generation_s:.0f}s")
        await self._end_turn()
        await self._start_turn()
