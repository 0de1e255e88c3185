"""``SharedSileroVADAnalyzer``: Pipecat's Silero VAD, with one model for the whole process.

A drop-in for ``SileroVADAnalyzer`` (``VADProcessor(vad_analyzer=...)`` or the user
aggregator's ``vad_analyzer``) that makes the same decisions on the same audio, but whose
per-call instances hold only their own state (Silero's context and recurrent state, ~1.3 kB)
and send each 32 ms window to the event loop's :class:`~agent.vad.batcher.SileroBatcher`,
which scores the windows of all calls that are due together in one inference.

Why ``analyze_audio`` is overridden: in Pipecat 1.14 the only entry point the VAD controller
uses is the coroutine ``VADAnalyzer.analyze_audio``, which hands the whole buffer to the
synchronous ``_run_analyzer`` on a one-thread executor *per analyzer*, and that loop calls
the synchronous ``voice_confidence`` once per window. A synchronous confidence cannot wait for
other calls' windows without parking a thread per call, so this class overrides
``analyze_audio`` itself: it cuts the buffer into windows on the event loop, hands them all to
the batcher at once (one await per buffer), and as each window is scored runs the same state
machine as ``_run_analyzer`` (count speaking/non-speaking windows, promote STARTING/STOPPING
once the counts reach ``start_secs``/``stop_secs``) and the same model-reset rule as
``SileroVADAnalyzer`` (every ~2 s of audio, only when quiet after 5 windows under 0.1). The
equivalence test compares the two frame by frame, so a change in Pipecat's logic shows up
there. ``voice_confidence`` still works synchronously (one unbatched run on the shared
session) for code that calls it directly.

Two differences, on purpose. Pipecat promotes STARTING/STOPPING only at the end of a buffer,
so when a buffer holds two windows, a start whose count is reached by the first is lost if the
second is not speech. Phone calls hand the VAD 60 ms of audio at a time (two windows, or one,
by where the windows fall), so whether a short word ("Oui.": 0.27 s) was heard depended on its
phase against the frames: the same call was answered or not. Here each window is promoted the
moment its count is reached, and a buffer reports the state it confirmed (a start followed by
a quiet window is still a start): the decisions of a stock analyzer fed one window at a time,
whatever the buffers. On frames of at most one window (Pipecat's 20 ms) the two are identical.
And new params (``set_params``) keep the caller's speech where it was, where Pipecat's start
over from quiet: they change mid-sentence here (see :meth:`SharedSileroVADAnalyzer.set_params`).

Windows of one call are sequential (each needs the state the previous one left), so one call
never has two windows in a batch, and ``analyze_audio`` calls on one analyzer are serialized
by a lock, as the stock executor serializes them.

Mirrors ``pipecat.audio.vad.vad_analyzer.VADAnalyzer.analyze_audio`` / ``_run_analyzer`` and
``pipecat.audio.vad.silero.SileroVADAnalyzer`` (Pipecat 1.14.0). Equivalence:
``tests/agent/fastpath/test_shared_silero.py``.
"""

from __future__ import annotations

import asyncio

import numpy as np
from loguru import logger
from pipecat.audio.vad.vad_analyzer import VADAnalyzer, VADParams, VADState

from agent.vad.batcher import (
    SAMPLE_RATES,
    WINDOW_SAMPLES,
    SileroBatcher,
    SileroStream,
    check_window,
    infer,
    shared_batcher,
    silero_session,
)
from agent.vad.foreground import ForegroundTalker, window_power
from agent.vad.line_floor import LineFloor

# The same reset rule as pipecat.audio.vad.silero (see its comments for the reasoning): after
# this much audio, reset the model's memory at the first quiet point where this many windows
# in a row scored below this confidence.
_RESET_INTERVAL_SECS = 2.0
_RESET_MAX_CONFIDENCE = 0.1
_RESET_LOW_CONFIDENCE_WINDOWS = 5


class SharedSileroVADAnalyzer(VADAnalyzer):
    """Silero VAD for one call, scored in batches with every other call in the process.

    Args:
        sample_rate: 8000 or 16000 Hz; None to take the pipeline's input rate.
        params: VAD thresholds and timing, as for ``SileroVADAnalyzer``.
        batcher: the batcher to use; default: the running event loop's shared one.
        foreground_margin_db: count a speech window only within this many dB of the caller's
            own speech level (:mod:`agent.vad.foreground`: talkers behind the caller are not
            the caller); ``None`` (the default) decides exactly as Pipecat's analyzer.
        floor_margin_db: once the caller speaks, a window within this many dB of the line's
            noise floor that Silero is unsure of is quiet (:mod:`agent.vad.line_floor`: the
            stop comes where the speech ends, not where Silero's confidence has decayed);
            ``None`` (the default) decides exactly as Pipecat's analyzer.
    """

    def __init__(
        self,
        *,
        sample_rate: int | None = None,
        params: VADParams | None = None,
        batcher: SileroBatcher | None = None,
        foreground_margin_db: float | None = None,
        floor_margin_db: float | None = None,
    ) -> None:
        super().__init__(sample_rate=sample_rate, params=params)
        window_s = WINDOW_SAMPLES[16000] / 16000  # 32 ms at either rate
        self._foreground = (
            None
            if foreground_margin_db is None
            else ForegroundTalker(foreground_margin_db, window_s)
        )
        self._floor = None if floor_margin_db is None else LineFloor(floor_margin_db, window_s)
        self._batcher = batcher
        self._stream = SileroStream()
        self._lock = asyncio.Lock()
        self._windows_since_reset = 0
        self._low_confidence_windows = 0

    @property
    def state_nbytes(self) -> int:
        """Bytes of model memory this call holds (the model itself is shared)."""
        return self._stream.nbytes

    def set_sample_rate(self, sample_rate: int) -> None:
        for rate in (sample_rate, self._init_sample_rate or sample_rate):
            if rate not in SAMPLE_RATES:
                raise ValueError(
                    f"Silero VAD runs at 8000 or 16000 Hz, not {rate}; "
                    "set the pipeline's audio_in_sample_rate to one of them"
                )
        super().set_sample_rate(sample_rate)

    def set_params(self, params: VADParams) -> None:
        """New thresholds and timing, as Pipecat's; but the caller's speech is where it was.

        Pipecat's analyzer starts over from QUIET on new params, which is harmless between
        turns. Ours change while the caller speaks (:mod:`agent.turns.barge_in` sets the start
        time by the bot's state, so a barge-in that stops the bot changes it mid-sentence), and
        from QUIET the next quiet window between two words was reported as a stop at once: the
        sentence was cut in two. So the state and its counts carry over, and the new counts
        apply from the next window."""
        carried = (
            getattr(self, "_vad_state", VADState.QUIET),
            getattr(self, "_vad_starting_count", 0),
            getattr(self, "_vad_stopping_count", 0),
        )
        super().set_params(params)
        self._vad_state, self._vad_starting_count, self._vad_stopping_count = carried
        # Pipecat counts whole windows (a 0.2 s stop is six 32 ms windows, 0.192 s) but
        # stamps the asked-for time on its start and stop frames, and the end of speech is
        # found by taking the stamp from the stop's time: the stamps must be what was counted.
        window_s = self._vad_frames / self.sample_rate
        self._params = params.model_copy(
            update={
                "start_secs": self._vad_start_frames * window_s,
                "stop_secs": self._vad_stop_frames * window_s,
            }
        )

    def num_frames_required(self) -> int:
        return WINDOW_SAMPLES[16000] if self.sample_rate == 16000 else WINDOW_SAMPLES[8000]

    def voice_confidence(self, buffer: bytes) -> float:
        """Score one window synchronously (unbatched) - for callers outside ``analyze_audio``."""
        try:
            check_window(buffer, self.sample_rate)
            session = self._batcher.session if self._batcher else silero_session()
            confidence = infer(session, self.sample_rate, [self._stream], [buffer])[0]
        except Exception as exc:
            logger.error(f"Error analyzing audio with shared Silero VAD: {exc}")
            return 0.0
        self._maybe_reset_model(float(confidence))
        return float(confidence)

    async def analyze_audio(self, buffer: bytes) -> VADState:
        """Feed audio of any length; returns the VAD state after it, as Pipecat's does."""
        async with self._lock:
            data = self._vad_buffer + buffer
            size = self._vad_frames_num_bytes
            count = len(data) // size
            self._vad_buffer = data[count * size :]
            if count == 0:
                return self._vad_state
            windows = [data[i * size : (i + 1) * size] for i in range(count)]
            if self._batcher is None:
                self._batcher = shared_batcher()
            scored = 0

            def advance(window: bytes, confidence: np.float32) -> None:
                nonlocal scored
                scored += 1
                self._advance(window, confidence)

            confirmed = self._confirmed()
            try:
                await self._batcher.score_windows(
                    self._stream, windows, self.sample_rate, on_window=advance
                )
            except Exception as exc:
                logger.error(f"Error analyzing audio with shared Silero VAD: {exc}")
                for window in windows[scored:]:  # as Pipecat does when its model fails
                    self._advance(window, np.float32(0.0), reset_check=False)
            if self._confirmed() != confirmed:  # a start or a stop the controller must see
                return self._confirmed()
            return self._vad_state

    def _confirmed(self) -> VADState:
        """The last state the counts confirmed: speech (SPEAKING, STOPPING) or not."""
        speaking = self._vad_state in (VADState.SPEAKING, VADState.STOPPING)
        return VADState.SPEAKING if speaking else VADState.QUIET

    def _advance(self, window: bytes, confidence: np.float32, *, reset_check: bool = True) -> None:
        """One window through the state machine, the moment its confidence is known.

        Runs inside the batcher's flush, before this call's next window is scored, so a model
        reset applies to exactly the windows it would with Pipecat's analyzer. The confidence
        stays a float32 scalar: Pipecat compares its float32 output with the threshold in
        float32, and so must we to decide identically at the boundary.
        """
        if reset_check:
            self._maybe_reset_model(float(confidence))
        self._prev_volume = self._get_smoothed_volume(window)
        voiced = bool(confidence >= self._params.confidence)
        speech = voiced and self._prev_volume >= self._params.min_volume
        needs_power = self._foreground is not None or self._floor is not None
        power = window_power(window) if needs_power else 0.0
        if self._foreground is not None:
            speech = self._foreground.is_caller(
                power,
                confidence=float(confidence),
                voiced=voiced,
                speech=speech,
                between_turns=self._vad_state in (VADState.QUIET, VADState.STARTING),
            )
        if self._floor is not None:
            # Only inside the caller's speech: a start is never helped or hindered.
            in_speech = self._vad_state in (VADState.SPEAKING, VADState.STOPPING)
            if self._floor.is_quiet(power, float(confidence), in_speech=in_speech) and in_speech:
                speech = False
        self._step(speech)
        self._settle()

    def _maybe_reset_model(self, confidence: float) -> None:
        """Reset this call's model memory when due and clearly quiet (as Silero's analyzer)."""
        self._windows_since_reset += 1
        if confidence < _RESET_MAX_CONFIDENCE:
            self._low_confidence_windows += 1
        else:
            self._low_confidence_windows = 0
        due = (
            self._windows_since_reset * self.num_frames_required()
            >= _RESET_INTERVAL_SECS * self.sample_rate
        )
        if (
            due
            and self._vad_state == VADState.QUIET
            and self._low_confidence_windows >= _RESET_LOW_CONFIDENCE_WINDOWS
        ):
            self._stream.reset()
            self._windows_since_reset = 0

    def _step(self, speaking: bool) -> None:
        """Advance the state by one window: count towards starting or stopping."""
        state = self._vad_state
        if speaking:
            if state == VADState.QUIET:
                self._vad_state, self._vad_starting_count = VADState.STARTING, 1
            elif state == VADState.STARTING:
                self._vad_starting_count += 1
            elif state == VADState.STOPPING:
                self._vad_state, self._vad_stopping_count = VADState.SPEAKING, 0
        elif state == VADState.STARTING:
            self._vad_state, self._vad_starting_count = VADState.QUIET, 0
        elif state == VADState.SPEAKING:
            self._vad_state, self._vad_stopping_count = VADState.STOPPING, 1
        elif state == VADState.STOPPING:
            self._vad_stopping_count += 1

    def _settle(self) -> None:
        """After a window: confirm a start or a stop once enough windows agreed."""
        if self._vad_state == VADState.STARTING:
            if self._vad_starting_count >= self._vad_start_frames:
                self._vad_state, self._vad_starting_count = VADState.SPEAKING, 0
        if self._vad_state == VADState.STOPPING:
            if self._vad_stopping_count >= self._vad_stop_frames:
                self._vad_state, self._vad_stopping_count = VADState.QUIET, 0
