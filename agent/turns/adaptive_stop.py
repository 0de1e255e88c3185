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
recognizer is slow. Every path has a deadline of its own, so no turn is left to Pipecat's
``user_turn_stop_timeout`` (reaching it is a counted error, ``turn_fallback``):

- The words. A turn never ends while a VAD segment's transcript is still on its way: the STT
  answers every segment, words or not, with a
  :class:`~agent.stt.frames.SpeechSegmentTranscribedFrame`, so the strategy knows exactly how
  many are due, whatever the order in which finals and new speech arrive on a busy machine. A
  final that comes after the deadline ends the turn the moment it arrives; one that never comes
  (the STT lost its server) is given up :data:`LATE_FINAL_S` past the upper bound.
- No words. A turn whose segments all came back empty (a cough) ends at the upper bound, as
  Pipecat ends an empty turn.
- No speech. Words with no VAD segment in the turn (a keypress sequence, a typed message) end
  the turn ``complete_wait_s`` after they arrive when final, ``unfinished_wait_s`` otherwise.
- Speech before the deadline (a VAD start) cancels it, as in Pipecat's speech-timeout strategy.

The waits are measured on the clock and, when the caller's audio reaches this strategy (with
Smart Turn on, :class:`~agent.turns.caller_audio.CallerAudioFeed` hands it over at the input
transport), also in that audio: on a busy server that reads audio late, a
timer alone could fire while the words that break the quiet are still queued, and a short
word the VAD let pass (it needs 200 ms of speech to report any) starts the quiet again. Either
can hold a turn at most :data:`MAX_AUDIO_LAG_S` past its deadline.

Smart Turn gets the caller's audio at the pipeline's rate (a phone call's 8 kHz is resampled
to the model's 16 kHz). It is asked only at a pause where its verdict decides something: when
the words so far read like a complete question. At the VAD stop that is known from the
interim transcript, and the model then runs (on the process's shared model thread) while the
recognizer finishes; when only the final transcript makes the turn a question, it is asked
then, and that turn waits for it. Statements, fragments and empty segments never ask it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import numpy as np
from loguru import logger
from pipecat.audio.turn.base_turn_analyzer import BaseTurnAnalyzer, EndOfTurnState
from pipecat.frames.frames import (
    Frame,
    InputAudioRawFrame,
    InterimTranscriptionFrame,
    MetricsFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameProcessorSetup
from pipecat.turns.types import ProcessFrameResult
from pipecat.turns.user_stop import BaseUserTurnStopStrategy

from agent.stt.frames import SpeechSegmentTranscribedFrame
from agent.turns.completeness import looks_like_complete_question

LATE_FINAL_S = 2.5
"""How much longer than the upper bound a turn waits for a segment's transcript that is still
due. A busy recognizer can take seconds (our STT transcribes a caller's segments one after
another), and a turn ended without its last words answers half of them and starts a second
turn on the rest; but a transcript that never comes must not hold the turn open. Together with
:data:`MAX_AUDIO_LAG_S` this keeps every deadline inside Pipecat's 5 s fallback."""


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
        self._interim = ""  # the latest segment's words so far, before its final transcript
        self._final = False  # the last words came in a final transcript
        self._words_at: float | None = None  # wall clock: when words last came
        self._speaking = False
        self._speech_ended_at: float | None = None  # wall clock, as VAD frames stamp it
        self._quiet_heard_s: float | None = None  # quiet audio seen since then (audio fed)
        self._speech_rms = 0.0  # the caller's level while the VAD hears speech
        # VAD segments whose transcript is due, and those given up on whose transcript may
        # still come. Kept across turns: the STT answers every segment, in order.
        self._segments_due = 0
        self._segments_given_up = 0
        self._audio_flows = False  # caller audio reaches us (Smart Turn on: CallerAudioFeed)
        self._segments_heard = 0  # VAD starts so far: a verdict is for the latest one only
        self._verdict: EndOfTurnState | None = None
        self._verdict_due = False  # Smart Turn is judging the latest pause
        self._verdict_task: asyncio.Task[None] | None = None
        # One task sleeps until the turn's deadline and looks again whenever something that
        # decides it changes (``_changed``): frames arrive on two paths (system frames such
        # as the VAD's overtake transcripts), so the deadline is always computed afresh from
        # the state, never carried by a timer armed before an await.
        self._changed = asyncio.Event()
        self._watcher: asyncio.Task[None] | None = None

    @property
    def longest_wait_s(self) -> float:
        """The latest any turn ends after the end of its speech: the safety net (Pipecat's
        ``user_turn_stop_timeout``) belongs past this."""
        return self._unfinished_wait_s + LATE_FINAL_S + MAX_AUDIO_LAG_S

    async def setup(self, setup: FrameProcessorSetup) -> None:  # type: ignore[override]
        await super().setup(setup)
        if self._analyzer is not None:
            self._analyzer.set_sample_rate(setup.audio_in_sample_rate)

    async def cleanup(self) -> None:
        await super().cleanup()
        for task in (self._watcher, self._verdict_task):
            if task is not None:
                await self.task_manager.cancel_task(task)
        self._watcher = self._verdict_task = None
        if self._analyzer is not None:
            await self._analyzer.cleanup()

    async def handle_user_turn_started(self) -> None:
        self._text = ""
        self._final = False
        self._words_at = None

    async def handle_user_turn_stopped(self) -> None:
        self._text = ""
        self._final = False
        self._words_at = self._speech_ended_at = self._quiet_heard_s = None
        self._verdict, self._verdict_due = None, False
        self._changed.set()
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
            self._segments_heard += 1
            self._segments_due += 1
            self._speech_ended_at = self._quiet_heard_s = None
            self._verdict, self._verdict_due = None, False
            self._schedule()
        elif isinstance(frame, VADUserStoppedSpeakingFrame):
            self._speaking = False
            self._speech_ended_at = frame.timestamp - frame.stop_secs
            self._quiet_heard_s = frame.stop_secs if self._audio_flows else None
            if self._verdict_would_decide():
                await self._ask_analyzer()
            self._schedule()
        elif isinstance(frame, TranscriptionFrame):
            self._interim = ""
            if frame.text.strip():
                self._text = f"{self._text} {frame.text}".strip()
                self._final = frame.finalized
                self._words_at = time.time()
                if self._verdict_still_needed():
                    await self._ask_analyzer()  # the words made this pause a question
                self._schedule()
        elif isinstance(frame, InterimTranscriptionFrame):
            self._interim = frame.text
        elif isinstance(frame, SpeechSegmentTranscribedFrame):
            if self._segments_given_up > 0:
                self._segments_given_up -= 1  # a segment the last turn ended without
            else:
                self._segments_due = max(0, self._segments_due - 1)
                self._schedule()
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

    def _verdict_would_decide(self) -> bool:
        """Whether Smart Turn's verdict on this pause changes when the turn ends: only when the
        words so far (finals, and the interim of the segment just spoken) read like a complete
        question. Anything else waits ``unfinished_wait_s`` whatever the model says, so it is
        not asked (a verdict costs ~50 ms of a core)."""
        if self._analyzer is None or self._complete_wait_s >= self._unfinished_wait_s:
            return False
        return looks_like_complete_question(f"{self._text} {self._interim}")

    def _verdict_still_needed(self) -> bool:
        """A final transcript made the pause a question, and Smart Turn has not been asked."""
        return (
            not self._speaking
            and self._speech_ended_at is not None
            and self._verdict is None
            and not self._verdict_due
            and self._verdict_would_decide()
        )

    async def _ask_analyzer(self) -> None:
        """Have Smart Turn judge this pause off the event loop, while the recognizer finishes."""
        if self._verdict_task is not None:
            await self.task_manager.cancel_task(self._verdict_task)  # an older pause's
        self._verdict_due = True
        self._verdict_task = self.task_manager.create_task(
            self._judge(self._segments_heard), f"{self}::_judge"
        )

    async def _judge(self, segment: int) -> None:
        assert self._analyzer is not None
        state, metrics = await self._analyzer.analyze_end_of_turn()
        if metrics is not None:
            await self.push_frame(MetricsFrame(data=[metrics]))
        if segment == self._segments_heard and not self._speaking:  # still this pause's
            self._verdict, self._verdict_due = state, False
            self._schedule()
        self._verdict_task = None

    def _complete(self) -> bool:
        if not looks_like_complete_question(self._text):
            return False
        return self._analyzer is None or self._verdict == EndOfTurnState.COMPLETE

    def _deadline(self) -> float | None:
        """When the turn ends, from what is known now; ``None`` while nothing is to end."""
        if self._speaking:
            return None
        if self._speech_ended_at is None:
            # Words without speech in this turn: keypresses, a typed message.
            if self._words_at is None:
                return None
            wait = self._complete_wait_s if self._final else self._unfinished_wait_s
            return self._words_at + wait
        bound = self._speech_ended_at + self._unfinished_wait_s
        if self._segments_due > 0:
            return bound + LATE_FINAL_S  # the last words belong to this turn: wait for them
        if not self._text:
            return bound  # every segment came back without words: an empty turn
        if self._verdict_due:
            return bound  # Smart Turn's verdict arrives (or is not needed) before this
        return self._speech_ended_at + (
            self._complete_wait_s if self._complete() else self._unfinished_wait_s
        )

    def _schedule(self) -> None:
        """Something that decides the turn's end changed: the watcher looks again."""
        self._changed.set()
        if self._watcher is None:
            self._watcher = self.task_manager.create_task(self._watch(), f"{self}::_watch")

    async def _watch(self) -> None:
        """Sleep until the turn's deadline, looking again whenever what decides it changes;
        then end the turn."""
        while True:
            self._changed.clear()
            at = self._deadline()
            if at is None:
                await self._changed.wait()
                continue
            wait = at - time.time()
            if wait <= 0:
                wait = self._audio_behind(at)
                if wait <= 0:
                    break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), wait)
        self._watcher = None
        if self._segments_due > 0:
            logger.warning(
                f"{self}: {self._segments_due} transcript(s) overdue; the turn ends without them"
            )
            self._segments_given_up += self._segments_due
            self._segments_due = 0
        how = ("complete" if self._complete() else "waited") if self._text else "no words"
        logger.debug(f"{self}: turn ends ({how})")
        await self.trigger_user_turn_stopped()

    def _audio_behind(self, at: float) -> float:
        """How long to wait for the audio of the quiet the clock says has lasted until ``at``
        (0: it has been heard, or there is no audio to wait for).

        A busy server reads the caller's audio late: the clock says the quiet has lasted, but
        the words that broke it may still be on their way, and a sound the VAD did not call
        speech starts the quiet again. Looked at again soon (a late burst comes all at once),
        for at most :data:`MAX_AUDIO_LAG_S` past the deadline, then the clock decides (a client
        may send no audio in silence).
        """
        if self._quiet_heard_s is None or self._speech_ended_at is None:
            return 0.0
        missing = (at - self._speech_ended_at) - self._quiet_heard_s
        if missing <= 0.005 or time.time() >= at + MAX_AUDIO_LAG_S:
            return 0.0
        return min(0.02, missing)
