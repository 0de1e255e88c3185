"""End the user's turn soon after a complete question or request, and after a longer quiet
otherwise.

A fixed silence rule must choose between cutting people off at their clause pauses (a 200 ms
wait ended 7 of 10 paused utterances in ``bench/turn_taking.py``) and answering every
question late (an 800 ms wait). This strategy waits by what it hears:

- The turn ends ``complete_wait_s`` after the end of speech (at once, by default) when the
  words so far end with a complete question or request (:mod:`agent.turns.completeness`)
  and, if a Smart Turn analyzer is given, Smart Turn v3 agrees from the audio (it hears
  "um... what was it?" as a person still thinking, which the words cannot).
- Otherwise it ends ``unfinished_wait_s`` after the end of speech: long enough to outlast a
  clause pause, and the hard upper bound for every turn. A statement waits too, because no
  rule on the recognizer's text tells "I would like to book a table." from a clause that goes
  on (it ends every fragment with a full stop).

"End of speech" is the VAD's stop less its ``stop_secs``, so the waits do not grow when the
recognizer is slow, and a turn never ends before the final transcript of its last stretch of
speech is in (our STT sends one, ``finalized``, per VAD segment that had words), unless
:data:`LATE_FINAL_S` more than the upper bound has passed, so a segment with no words (a
cough) cannot hold the turn open. Speech before the deadline (a VAD start) cancels it, as in
Pipecat's speech-timeout strategy.

The waits are measured on the clock and, when the caller's audio reaches this strategy (it
does when Smart Turn is on), also in that audio: on a busy server that reads audio late, a
timer alone could fire while the words that break the quiet are still queued, and a short
word the VAD let pass (it needs 200 ms of speech to report any) starts the quiet again. Either
can hold a turn at most :data:`MAX_AUDIO_LAG_S` past its deadline.

Smart Turn gets the pipeline's audio (the STT passes it through) at the pipeline's rate; on a
phone call that is 8 kHz, which Pipecat resamples to the 16 kHz the model was trained on
(``LocalSmartTurnAnalyzerV3._resample_to_model_rate``). It runs on its own thread at each VAD
stop, while the recognizer finishes, so it adds no wait unless it is the slower of the two.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np
from loguru import logger
from pipecat.audio.turn.base_turn_analyzer import BaseTurnAnalyzer, EndOfTurnState
from pipecat.frames.frames import (
    Frame,
    InputAudioRawFrame,
    MetricsFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameProcessorSetup
from pipecat.turns.types import ProcessFrameResult
from pipecat.turns.user_stop import BaseUserTurnStopStrategy

from agent.turns.completeness import looks_like_complete_question

LATE_FINAL_S = 5.0
"""How much longer than the upper bound a turn waits for its last final transcript. A busy
recognizer can take seconds (our STT finalizes a turn's segments one after another, so each
waits for the one before), and a turn ended without its last words answers half of them and
starts a second turn on the rest; but a segment the recognizer heard no words in gets no final
at all (our STT sends none for empty text), and must not hold the turn forever. The STT gives
up on a final 5 s after asking for it (``stt.params.final_timeout_s``)."""


MAX_AUDIO_LAG_S = 1.0
"""How far past its deadline the audio may hold a turn open (audio read late, or a sound the
VAD did not call speech) before the clock alone decides: the bound's own margin."""

SOUND_RATIO = 0.25
"""A frame at least this loud, relative to the caller's speech so far (-12 dB), is not quiet.
Silero reports speech only after 200 ms of it (``vad_start_secs``), so one short word between
two pauses ("apples... bread... milk") can pass unreported, and the two pauses would count
as one long quiet."""


class AdaptiveUserTurnStopStrategy(BaseUserTurnStopStrategy):
    """A short wait after a complete question, the longer one (the upper bound) otherwise."""

    def __init__(
        self,
        *,
        complete_wait_s: float = 0.0,
        unfinished_wait_s: float = 1.3,
        turn_analyzer: BaseTurnAnalyzer | None = None,
        **kwargs: object,
    ) -> None:
        """Create the strategy.

        Args:
            complete_wait_s: Quiet after the end of speech before a complete question ends.
            unfinished_wait_s: Quiet after the end of speech before any other turn ends; the
                upper bound of every wait (not counting a late final transcript).
            turn_analyzer: Smart Turn (or another analyzer) whose verdict a complete question
                also needs; ``None`` trusts the words alone.
            **kwargs: Passed to :class:`BaseUserTurnStopStrategy`.
        """
        if complete_wait_s > unfinished_wait_s:
            raise ValueError(
                f"complete_wait_s ({complete_wait_s}) must not exceed unfinished_wait_s "
                f"({unfinished_wait_s}): the unfinished wait is the upper bound"
            )
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._complete_wait_s = complete_wait_s
        self._unfinished_wait_s = unfinished_wait_s
        self._analyzer = turn_analyzer
        self._text = ""
        self._speaking = False
        self._speech_ended_at: float | None = None  # wall clock, as VAD frames stamp it
        self._quiet_heard_s: float | None = None  # quiet audio seen since then (passthrough)
        self._speech_rms = 0.0  # the caller's level while the VAD hears speech
        self._finals_pending = 0  # VAD segments whose final transcript is not in yet
        self._audio_flows = False  # caller audio reaches us (Smart Turn on: STT passthrough)
        self._verdict: EndOfTurnState | None = None
        self._verdict_task: asyncio.Task[None] | None = None
        self._deadline_task: asyncio.Task[None] | None = None

    async def setup(self, setup: FrameProcessorSetup) -> None:  # type: ignore[override]
        await super().setup(setup)
        if self._analyzer is not None:
            self._analyzer.set_sample_rate(setup.audio_in_sample_rate)

    async def cleanup(self) -> None:
        await super().cleanup()
        await self._cancel_pending()
        if self._analyzer is not None:
            await self._analyzer.cleanup()

    async def handle_user_turn_started(self) -> None:
        self._text = ""

    async def handle_user_turn_stopped(self) -> None:
        self._text = ""
        self._finals_pending = 0
        self._speech_ended_at = self._quiet_heard_s = None
        await self._cancel_pending()
        if self._analyzer is not None:
            self._analyzer.clear()

    async def process_frame(self, frame: Frame) -> ProcessFrameResult:
        await super().process_frame(frame)
        if isinstance(frame, InputAudioRawFrame):
            self._audio_flows = True
            if self._analyzer is not None:
                self._analyzer.append_audio(frame.audio, self._speaking)
            self._measure(frame)
        elif isinstance(frame, VADUserStartedSpeakingFrame):
            if self._analyzer is not None:  # how much audio before the report is speech
                self._analyzer.update_vad_start_secs(frame.start_secs)
            self._speaking = True
            self._finals_pending += 1
            self._speech_ended_at = self._quiet_heard_s = None
            await self._cancel_pending()
        elif isinstance(frame, VADUserStoppedSpeakingFrame):
            self._speaking = False
            self._speech_ended_at = frame.timestamp - frame.stop_secs
            self._quiet_heard_s = frame.stop_secs if self._audio_flows else None
            if self._analyzer is not None:
                self._verdict_task = self.task_manager.create_task(
                    self._ask_analyzer(), f"{self}::_ask_analyzer"
                )
            await self._schedule()
        elif isinstance(frame, TranscriptionFrame):
            self._text = f"{self._text} {frame.text}".strip()
            if frame.finalized:
                self._finals_pending = max(0, self._finals_pending - 1)
            await self._schedule()
        return ProcessFrameResult.CONTINUE

    def _measure(self, frame: InputAudioRawFrame) -> None:
        """Learn the caller's speech level; count quiet audio after the VAD stop (a sound
        starts the count again)."""
        pcm = np.frombuffer(frame.audio, dtype=np.int16)
        if pcm.size == 0:
            return
        rms = float(np.sqrt(np.mean(pcm.astype(np.float32) ** 2)))
        if self._speaking:
            self._speech_rms = rms if self._speech_rms == 0 else 0.9 * self._speech_rms + 0.1 * rms
        elif self._quiet_heard_s is not None:
            if self._speech_rms > 0 and rms >= SOUND_RATIO * self._speech_rms:
                self._quiet_heard_s = 0.0
            else:
                self._quiet_heard_s += pcm.size / max(frame.num_channels, 1) / frame.sample_rate

    async def _ask_analyzer(self) -> None:
        assert self._analyzer is not None
        state, metrics = await self._analyzer.analyze_end_of_turn()
        if metrics is not None:
            await self.push_frame(MetricsFrame(data=[metrics]))
        self._verdict = state
        self._verdict_task = None
        await self._schedule()

    def _complete(self) -> bool:
        if not looks_like_complete_question(self._text):
            return False
        return self._analyzer is None or self._verdict == EndOfTurnState.COMPLETE

    async def _schedule(self) -> None:
        """(Re)arm the turn's end for what is known now; end it at once if that time passed."""
        if self._speaking or self._speech_ended_at is None or not self._text:
            return
        bound = self._speech_ended_at + self._unfinished_wait_s
        if self._finals_pending > 0:
            at = bound + LATE_FINAL_S  # the last words belong to this turn: wait for them
        elif self._verdict_task is not None:
            at = bound  # Smart Turn's verdict arrives (or is not needed) before this
        else:
            at = self._speech_ended_at + (
                self._complete_wait_s if self._complete() else self._unfinished_wait_s
            )
        if self._deadline_task is not None:
            await self.task_manager.cancel_task(self._deadline_task)
        self._deadline_task = self.task_manager.create_task(self._end_at(at), f"{self}::_end_at")

    async def _end_at(self, at: float) -> None:
        """End the turn at ``at``, or later if the audio of that quiet has not been seen yet."""
        assert self._speech_ended_at is not None
        quiet_needed = at - self._speech_ended_at
        give_up_at = at + MAX_AUDIO_LAG_S
        while True:
            delay = at - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if self._quiet_heard_s is None or self._quiet_heard_s >= quiet_needed - 0.005:
                break
            if time.time() >= give_up_at:
                break  # audio stopped coming (a client that sends none in silence): the clock
            # A busy server reads the caller's audio late: the clock says the quiet has lasted,
            # but the words that broke it may still be on their way. Wait for the audio (a
            # late burst comes all at once, so look again soon).
            at = time.time() + min(0.02, quiet_needed - self._quiet_heard_s)
        self._deadline_task = None
        if self._speaking or not self._text:
            return
        logger.debug(f"{self}: turn ends ({'complete' if self._complete() else 'waited'})")
        await self.trigger_user_turn_stopped()

    async def _cancel_pending(self) -> None:
        self._verdict = None
        for task in (self._deadline_task, self._verdict_task):
            if task is not None:
                await self.task_manager.cancel_task(task)
        self._deadline_task = self._verdict_task = None
