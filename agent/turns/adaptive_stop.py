"""End the user's turn soon after a complete question or request, and after a longer quiet
otherwise.

A fixed silence rule must choose between cutting people off at their clause pauses (a 200 ms
wait ended 7 of 10 paused utterances in ``bench/turn_taking.py``) and answering every
question late (an 800 ms wait). This strategy waits by what it hears:

- The turn ends ``complete_wait_s`` after the end of speech (at once, by default) when Smart
  Turn v3 calls it complete from the audio (a multilingual model: it hears "um... what was
  it?" as a person still thinking, which the words cannot) and the words, the tie-breaker
  (:mod:`agent.turns.completeness`), agree: with ``text_check="asks"`` (the default) they must
  ask for an answer (a question mark in any script, a one- or two-word command such as
  "Stop.", a question or request whose question mark the recognizer dropped, by its form); with
  ``"unfinished"`` they only must not stop on a word no sentence ends on ("I would like to").
  Without Smart Turn the words alone decide, as with ``"asks"``.
- With ``text_model`` (on in the default profile: ``bench/results/turn_taking_multilingual.md``),
  a language model's p(the sentence ends here) on the final words
  (:mod:`agent.turns.text_end_of_turn`) is a third opinion when Smart Turn calls the turn
  complete: below ``text_unfinished_p`` it holds words that ask ("Can you tell me." goes on
  to it, and so do "Can you." and "Ich möchte."), unless they are one word or the recognizer
  closed them with a question mark (the model cannot read those); at least ``text_end_p``
  ends a turn whose words do not ask (a statement, a request in a language the words rule does
  not know) after ``text_end_wait_s``: a middle wait, as LiveKit's turn detector ends a turn
  its model calls finished after its minimum delay, because a clause or a list item before a
  pause reads as finished as a statement does ("I need apples." 0.26, "I would like to book a
  table for two people." 0.34), and only the quiet after it tells them apart (0.8 s in the
  product: ``bench/results/turn_taking_multilingual.md``, "Statements on the text model's
  wait"). The turn waits for the model at most its client's timeout; without an answer the
  words decide, as without the model. When the user begins to speak, the model is given the
  conversation so far to read meanwhile, so the question at the turn's end reads only the
  words.
  With ``text_question_unfinished_p``, a question the recognizer closed with a question mark
  the model reads under it waits for the bound as a vetoed request does, as when tiny.en writes
  "Can you tell me?" and "Can you?" at the pauses in "can you tell me... the opening hours" and
  "can you... check my last order" (0.84 s, past the middle wait). Its threshold is its own,
  far under the veto's: the model reads most real questions low without their mark ("Do you
  deliver" 0.008), and the cut ones at 0 (``bench/results/text_end_probe.md``).
  With ``answer_ahead``, the answer is started (a Pipecat speculation, held by the LLM
  service until the turn ends and withdrawn if the user goes on) as soon as every signal is
  in and the turn only waits out that quiet, so the LLM's time to its first words is spent
  inside the wait rather than after it.
  With ``words_over_audio``, words that ask end on that middle wait also when Smart Turn
  hears the pause unfinished, unless the model holds them: Smart Turn misses some short turns
  on noisy lines and in voices unlike its training ("stop" 0.14 on white noise at 20 dB,
  French "quelle heure est il" 0.04, Spanish "sí" 0.16), which otherwise waited for the bound.
  With ``model_over_audio``, so do words that do not ask when the model reads them finished
  (a statement, a request in a language the words rule does not know): Smart Turn hears some
  of them unfinished by WebRTC (French "Rappelez moi demain matin"), where the bound was the
  wait; a fragment the model reads going on still waits for it.
- With ``paused_turns_wait``, a turn in which the caller has already hesitated (paused after
  a filler or a connective, or after a segment with no words) does not end on the short wait
  either, but on that middle wait: whoever hesitated once in a turn may again, and "um...
  what was it... oh right, the delivery address" reads as a finished question at its second
  pause to every signal here (Smart Turn through line noise 0.55-0.87, the words a question,
  the model 0.54), where a 0.74 s pause ended it. The cost is on turns that hesitate and then
  finish ("So... can you tell me the opening hours?"): answered after the middle wait rather
  than at once, with their answer started during it.
- Otherwise it ends ``unfinished_wait_s`` after the end of speech: long enough to outlast a
  clause pause, and the hard upper bound for every turn. Without the text model a statement
  waits too with ``"asks"``: on the bench's set Smart Turn calls clause pauses complete ("I
  would like to book a table", 0.94), and no rule on the recognizer's text tells them from a
  finished statement.

"End of speech" is the VAD's stop less its ``stop_secs``, so the waits do not grow when the
recognizer is slow. Every path has a deadline of its own, so no turn is left to Pipecat's
``user_turn_stop_timeout`` (reaching it is a counted error, ``turn_fallback``):

- The words. A turn never ends while a VAD segment's transcript is still on its way: the STT
  answers every segment, words or not, with a
  :class:`~agent.stt.frames.SpeechSegmentTranscribedFrame`, so the strategy knows exactly how
  many are due, whatever the order in which finals and new speech arrive on a busy machine. A
  final that comes after the deadline ends the turn the moment it arrives; one that never comes
  (the STT lost its server) is given up ``late_final_s`` past the upper bound: as long as the
  STT itself waits for a final before it calls the server stalled (its ``final_timeout_s``).
- No words. A turn whose segments all came back empty (a cough) ends at the upper bound, as
  Pipecat ends an empty turn.
- No speech. Words with no VAD segment in the turn (a keypress sequence, a typed message) end
  the turn ``complete_wait_s`` after they arrive when final, ``unfinished_wait_s`` otherwise.
- Speech before the deadline (a VAD start) cancels it, as in Pipecat's speech-timeout strategy.

The waits are measured on the clock and, when the caller's audio reaches this strategy (with
Smart Turn on, :class:`~agent.turns.caller_audio.CallerAudioFeed` hands it over at the input
transport), also in that audio (:mod:`agent.turns.line_quiet`), where quiet means quiet for
this line: below a quarter of the caller's speech level and clearly above nothing but the
line's own noise floor, so a steady hiss does not hold the turn open. On a busy server that
reads audio late, a timer alone could fire while the words that break the quiet are still
queued, and a short word the VAD let pass (it needs ``vad_start_secs`` of speech to report any)
starts the quiet again. Either can hold a turn at most :data:`MAX_AUDIO_LAG_S` past its
deadline.

Smart Turn gets the caller's audio at the pipeline's rate (a phone call's 8 kHz is resampled
to the model's 16 kHz). It is asked only at a pause where its verdict may decide something:
at the VAD stop, unless the interim transcript already shows words that cannot end on the short
wait (a statement, a fragment); the model then runs (on the process's shared model thread)
while the recognizer finishes. It always hears :data:`SMART_TURN_QUIET_S` of quiet after the
words: with a shorter VAD wait it is asked once that much of the caller's audio has come.
When the interim ruled it out but the final transcript makes the turn complete, it is asked
then, and that turn waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Literal

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
from pipecat.turns.types import ProcessFrameResult, UserTurnSpeculation
from pipecat.turns.user_stop import BaseUserTurnStopStrategy

from agent.stt.frames import SpeechSegmentTranscribedFrame
from agent.turns.completeness import (
    a_clause_alone,
    asks_for_answer,
    ends_unfinished,
    ends_with_question_mark,
    last_sentence,
    words,
)
from agent.turns.line_quiet import LineQuiet
from agent.turns.text_end_of_turn import Conversation, TextEndOfTurn
from agent.turns.turn_segments import TurnSegments

LATE_FINAL_S = 2.5
"""By default, how much longer than the upper bound a turn waits for a segment's transcript
that is still due. A busy recognizer can take seconds (our STT transcribes a caller's segments
one after another; the CPU recognizer on a slow backend took 4.6 s for 1.2 s of audio), and a
turn ended without its last words answers half of them and starts a second turn on the rest;
but a transcript that never comes must not hold the turn open. The voice agent passes the
STT's own ``final_timeout_s``: the turn waits as long as the STT still expects the words."""


MAX_AUDIO_LAG_S = 1.0
"""How far past its deadline the audio may hold a turn open (audio read late, or a sound the
VAD did not call speech) before the clock alone decides: the bound's own margin."""

SMART_TURN_QUIET_S = 0.192
"""The quiet after the words Smart Turn is asked on, whatever the VAD's wait
(``vad_stop_secs``): Pipecat pairs Smart Turn v3 with a 0.2 s VAD stop (six of Silero's 32 ms
windows, so 0.192 s of quiet), and its verdict moves
with tens of milliseconds of quiet (by WebRTC, a 0.15 s and a 0.12 s VAD wait sent an English
question to the middle wait: ``bench/results/turn_taking_multilingual.md``, "A shorter VAD
wait"). With a shorter VAD wait, the STT commits sooner and Smart Turn is asked once this much
of the caller's audio after the end of speech has come."""

Ending = Literal["complete", "finished", "waited"]
"""How a turn ends (and the strategy logs it): the short wait, the text model's wait, the
bound."""
TURN_ENDINGS = ("complete", "finished", "waited", "no words")
"""What ``on_turn_ended`` reports: an :data:`Ending`, or a turn whose segments held no words
(ended at the bound)."""

TEXT_CHECKS = ("asks", "unfinished")
"""What the words must say for a turn Smart Turn calls complete to end on the short wait: that
it asks for an answer, or only that it does not stop on an unfinished word."""


VETO_MIN_WORDS = 2
"""The fewest words the text model's veto reads by default. One word is too little ("Stop"
reads p(end) 0.000 with no question from the bot before it); two are enough to tell a start
that goes on from a short command, in English, German, French and Spanish alike: 10 of 13 such
starts read exactly 0 at every depth of a conversation ("can you", "i need", "ich möchte", "je
veux", "me gustaría"), and 13 of 15 finished two-word turns read over 0.01 ("cancel it"
0.25-0.28; "nein danke" and "arrête ça" read 0 and wait for the bound). Smart Turn calls most
such starts complete ("can you" 0.98, "ich möchte" 0.97), so before, the words rule answered
them at their pause: on the extended set, a false end on 15 of 20 legs, none now
(``bench/results/text_end_probe.md``, ``bench/results/turn_taking_multilingual.md``)."""


def beyond_the_veto(text: str, min_words: int = VETO_MIN_WORDS) -> bool:
    """Words that ask which the text model's veto leaves to the words rule:
    - fewer than ``min_words`` words ("Yes.", "Stop."): too little for the model to read;
    - a question the recognizer closed with a question mark: it heard the question in the
      voice, while the model reads bare words, and hardly any but English ("Wann fängt der
      Film an" 0.02, "Qué hora es" 0.007: each held for the bound on the bench); the
      strategy's ``text_question_unfinished_p`` reads those against a threshold of their own."""
    if len(words(text)) < min_words:
        return True
    return ends_with_question_mark(last_sentence(text))


class AdaptiveUserTurnStopStrategy(BaseUserTurnStopStrategy):
    """A short wait after a complete question, the longer one (the upper bound) otherwise."""

    def __init__(
        self,
        *,
        complete_wait_s: float = 0.0,
        unfinished_wait_s: float = 1.3,
        turn_analyzer: BaseTurnAnalyzer | None = None,
        late_final_s: float = LATE_FINAL_S,
        text_check: str = "asks",
        text_model: TextEndOfTurn | None = None,
        text_end_p: float = 1.01,
        text_end_wait_s: float = 0.0,
        text_unfinished_p: float = 0.0,
        text_veto_min_words: int = VETO_MIN_WORDS,
        answer_ahead: bool = False,
        words_over_audio: bool = False,
        model_over_audio: bool = False,
        paused_turns_wait: bool = False,
        text_question_unfinished_p: float = 0.0,
        context: Callable[[], Conversation] | None = None,
        **kwargs: object,
    ) -> None:
        """Create the strategy.

        Args:
            complete_wait_s: Quiet after the end of speech before a complete question ends.
            unfinished_wait_s: Quiet after the end of speech before any other turn ends; the
                upper bound of every wait (not counting a late final transcript).
            turn_analyzer: Smart Turn (or another analyzer) whose verdict a complete question
                also needs; ``None`` trusts the words alone.
            late_final_s: How long past the upper bound a transcript still due is waited
                for; past it the turn ends without those words.
            text_check: The words' part when Smart Turn is on: ``"asks"`` (they must ask for
                an answer) or ``"unfinished"`` (they may only veto an unfinished ending).
            text_model: The language model's p(the sentence ends here) on the final words
                (:mod:`agent.turns.text_end_of_turn`), beside Smart Turn; ``None``: not asked.
            text_end_p: With Smart Turn's complete verdict, a p(end) at least this ends a
                turn whose words do not ask (a statement) after ``text_end_wait_s``, unless it
                stops on an unfinished word; above 1: never.
            text_end_wait_s: Quiet after the end of speech before a turn ``text_end_p`` calls
                finished ends; between ``complete_wait_s`` and ``unfinished_wait_s``.
            text_unfinished_p: With Smart Turn's complete verdict and words that ask for an
                answer, a p(end) below this waits (the model hears a sentence going on), unless
                the turn has fewer than ``text_veto_min_words`` words (the words rule decides
                those) or is closed with a question mark (``text_question_unfinished_p``); 0:
                never.
            text_veto_min_words: See ``text_unfinished_p`` (:data:`VETO_MIN_WORDS`).
            answer_ahead: While a turn the models call finished waits out ``text_end_wait_s``,
                have the answer started on its words (a speculation, held until the turn
                ends and withdrawn if the user goes on), so the wait is not followed by the
                LLM's time to its first words.
            words_over_audio: With ``text_model``, a turn whose words ask for an answer
                ends after ``text_end_wait_s`` also when Smart Turn hears it unfinished,
                unless the model holds it (p(end) below ``text_end_p``; a turn the veto does
                not read, one word or a question mark, needs no model).
            model_over_audio: With ``text_model``, a turn whose words do not ask ends after
                ``text_end_wait_s`` also when Smart Turn hears it unfinished, if the model
                reads it finished (p(end) at least ``text_end_p``, not on an unfinished word).
            paused_turns_wait: A turn the caller hesitated in before its last words (a
                pause after words that stop unfinished, or after a segment with no words) that
                would end on the short wait ends after ``text_end_wait_s`` instead.
            text_question_unfinished_p: With Smart Turn's complete verdict, a question the
                recognizer closed with a question mark (``text_veto_min_words`` words or more)
                whose p(end) is below this waits for ``unfinished_wait_s``, not at once; 0:
                never (the question mark decides). A recognizer may close a fragment so
                ("Can you tell me?", as tiny.en does), which the model reads going on (0.000);
                a question it reads so ("Are you open?") is answered that much later.
            context: The conversation so far (the system prompt first), the model's context.
            **kwargs: Passed to :class:`BaseUserTurnStopStrategy`.
        """
        if complete_wait_s > unfinished_wait_s:
            raise ValueError(
                f"complete_wait_s ({complete_wait_s}) must not exceed unfinished_wait_s "
                f"({unfinished_wait_s}): the unfinished wait is the upper bound"
            )
        if text_end_wait_s > unfinished_wait_s:
            raise ValueError(
                f"text_end_wait_s ({text_end_wait_s}) must not exceed unfinished_wait_s "
                f"({unfinished_wait_s}): the unfinished wait is the upper bound"
            )
        if late_final_s < 0:
            raise ValueError(f"late_final_s ({late_final_s}) must not be negative")
        if text_check not in TEXT_CHECKS:
            raise ValueError(f"text_check must be one of {TEXT_CHECKS}, not {text_check!r}")
        if text_veto_min_words < 1:
            raise ValueError(f"text_veto_min_words ({text_veto_min_words}) must be at least 1")
        if not 0 <= text_unfinished_p <= 1 or not 0 <= text_question_unfinished_p <= 1:
            raise ValueError(
                f"text_unfinished_p ({text_unfinished_p}) and text_question_unfinished_p "
                f"({text_question_unfinished_p}) must be within 0-1"
            )
        if text_end_p < 0:
            raise ValueError(f"text_end_p ({text_end_p}) must not be negative")
        super().__init__(**kwargs)  # type: ignore[arg-type]
        # How each turn ended (one of TURN_ENDINGS), as the log says: what a deployment reads
        # to see how often its callers wait for the bound.
        self._register_event_handler("on_turn_ended")
        self._late_final_s = late_final_s
        self._text_check = text_check
        self._complete_wait_s = complete_wait_s
        self._unfinished_wait_s = unfinished_wait_s
        self._analyzer = turn_analyzer
        self._text_model = text_model
        self._text_end_p = text_end_p
        self._text_end_wait_s = max(text_end_wait_s, complete_wait_s)
        self._text_unfinished_p = text_unfinished_p
        self._veto_min_words = text_veto_min_words
        self._answer_ahead = answer_ahead
        self._words_over_audio = words_over_audio
        self._model_over_audio = model_over_audio
        self._paused_turns_wait = paused_turns_wait
        self._question_unfinished_p = text_question_unfinished_p
        self._segments = TurnSegments()  # this turn's segments' transcripts so far
        self._ahead: UserTurnSpeculation | None = None  # the answer started ahead, if any
        self._context = context
        self._p_end: float | None = None  # the text model's answer on the words so far
        self._p_due = False  # asked, no answer yet
        self._p_task: asyncio.Task[None] | None = None
        self._prime_task: asyncio.Task[None] | None = None
        self._turns_ended = 0  # an answer is for the turn (and the words) it was asked on
        self._text = ""
        self._interim = ""  # the latest segment's words so far, before its final transcript
        self._latest = ""  # the words of the turn's latest final transcript: since a pause
        self._final = False  # the last words came in a final transcript
        self._words_at: float | None = None  # wall clock: when words last came
        self._speaking = False
        self._speech_ended_at: float | None = None  # wall clock, as VAD frames stamp it
        self._quiet = LineQuiet()  # the quiet since then, in the caller's audio (if it flows)
        # VAD segments whose transcript is due, and those given up on whose transcript may
        # still come. Kept across turns: the STT answers every segment, in order.
        self._segments_due = 0
        self._segments_given_up = 0
        self._segments_heard = 0  # VAD starts so far: a verdict is for the latest one only
        self._verdict: EndOfTurnState | None = None
        self._verdict_due = False  # Smart Turn is judging the latest pause
        self._verdict_task: asyncio.Task[None] | None = None
        self._quiet_before_verdict_s: float | None = None  # audio still due before asking
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
        return self._unfinished_wait_s + self._late_final_s + MAX_AUDIO_LAG_S

    async def setup(self, setup: FrameProcessorSetup) -> None:  # type: ignore[override]
        await super().setup(setup)
        if self._analyzer is not None:
            self._analyzer.set_sample_rate(setup.audio_in_sample_rate)

    async def cleanup(self) -> None:
        await super().cleanup()
        for task in (self._watcher, self._verdict_task, self._p_task, self._prime_task):
            if task is not None:
                await self.task_manager.cancel_task(task)
        self._watcher = self._verdict_task = self._p_task = self._prime_task = None
        if self._analyzer is not None:
            await self._analyzer.cleanup()
        if self._text_model is not None:
            await self._text_model.close()

    async def handle_user_turn_started(self) -> None:
        self._text = self._latest = ""
        self._final = False
        self._words_at = None
        # Sounds that opened no turn (a cough over the bot's answer) are not this turn's.
        self._segments = TurnSegments()

    async def handle_user_turn_stopped(self) -> None:
        self._text = self._latest = ""
        self._final = False
        self._words_at = self._speech_ended_at = None
        self._quiet.stop_counting()
        self._verdict, self._verdict_due = None, False
        self._p_end, self._p_due = None, False
        self._turns_ended += 1
        self._segments = TurnSegments()
        self._changed.set()
        if self._analyzer is not None:
            self._analyzer.clear()
        if self._ahead is not None:  # ended by something else (the fallback): not answered
            await self._withdraw_ahead()

    async def process_frame(self, frame: Frame) -> ProcessFrameResult:
        await super().process_frame(frame)
        if isinstance(frame, InputAudioRawFrame):
            self._quiet.hear(frame, self._speaking)
            if self._analyzer is not None:
                self._analyzer.append_audio(frame.audio, self._speaking)
            if self._quiet_before_verdict_s is not None:
                self._quiet_before_verdict_s -= self._quiet.frame_s
                if self._quiet_before_verdict_s <= 0:
                    self._quiet_before_verdict_s = None
                    await self._ask_analyzer()
        elif isinstance(frame, VADUserStartedSpeakingFrame):
            if self._analyzer is not None:  # how much audio before the report is speech
                self._analyzer.update_vad_start_secs(frame.start_secs)
            self._speaking = True
            if self._ahead is not None:  # the user goes on: the answer is for words not final
                await self._withdraw_ahead()
            self._segments_heard += 1
            self._segments_due += 1
            self._interim = ""  # a new segment: its words are not known yet
            self._speech_ended_at = None
            self._quiet.stop_counting()
            self._verdict, self._verdict_due = None, False
            self._quiet_before_verdict_s = None
            self._prime_text_model()
            self._schedule()
        elif isinstance(frame, VADUserStoppedSpeakingFrame):
            self._speaking = False
            self._speech_ended_at = frame.timestamp - frame.stop_secs
            self._quiet.count_from_stop(frame.stop_secs)
            if self._verdict_would_decide():
                await self._ask_analyzer_after_quiet(frame.stop_secs)
            self._schedule()
        elif isinstance(frame, TranscriptionFrame):
            self._interim = ""
            if frame.text.strip():
                self._text = f"{self._text} {frame.text}".strip()
                self._latest = frame.text
                self._final = frame.finalized
                self._words_at = time.time()
                if self._verdict_still_needed():
                    await self._ask_analyzer()  # the words made this pause a question
                await self._ask_text_model()
                self._schedule()
        elif isinstance(frame, InterimTranscriptionFrame):
            self._interim = frame.text
        elif isinstance(frame, SpeechSegmentTranscribedFrame):
            if self._segments_given_up > 0:
                self._segments_given_up -= 1  # a segment the last turn ended without
            else:
                self._segments_due = max(0, self._segments_due - 1)
                self._segments.append(frame.text)
                self._schedule()
        return ProcessFrameResult.CONTINUE

    def _verdict_would_decide(self) -> bool:
        """Whether Smart Turn's verdict on this pause may change when the turn ends: when the
        words so far (finals, and the interim of the segment just spoken) could end the turn on
        the short wait (``text_check``), or when the segment's words are not known yet (no
        interim: a short word such as "Stop." is often decoded only after the VAD stop; the
        verdict then runs beside the recognizer, so a slow final does not also wait for it).
        Anything else waits ``unfinished_wait_s`` whatever the model says, so it is not asked
        (a verdict costs 50-110 ms of a core)."""
        if self._analyzer is None or self._complete_wait_s >= self._unfinished_wait_s:
            return False
        if not self._interim.strip():
            return True
        heard = f"{self._text} {self._interim}".strip()
        # An interim is never closed by punctuation: would it read as complete once it is?
        return self._words_could_end_short(heard, self._interim) or self._words_could_end_short(
            f"{heard}.", f"{self._interim}."
        )

    def _verdict_still_needed(self) -> bool:
        """A final transcript made the pause a question, and Smart Turn has not been asked."""
        return (
            self._analyzer is not None
            and self._complete_wait_s < self._unfinished_wait_s
            and not self._speaking
            and self._speech_ended_at is not None
            and self._verdict is None
            and not self._verdict_due
            and self._words_could_end_short(self._text, self._latest)
        )

    def _words_could_end_short(self, text: str, latest: str) -> bool:
        """Whether a turn with these words (``latest``: those since the last pause) may end on
        the short wait if Smart Turn agrees: the words allow it (``text_check``), or the text
        model may (:meth:`_model_may_read_finished`)."""
        if self._words_allow_short_wait(text):
            return True
        return self._text_model is not None and self._model_may_read_finished(text, latest)

    def _model_may_read_finished(self, text: str, latest: str) -> bool:
        """Whether the model's p(end) could make these words a finished turn: statements end
        on its wait at all (``text_end_p`` up to 1), the words do not stop on a word no
        sentence ends on, and those since the last pause (``latest``) are not a subordinate
        clause alone ("When I got there.": its main clause is still to come)."""
        return self._text_end_p <= 1 and not ends_unfinished(text) and not a_clause_alone(latest)

    async def _ask_analyzer_after_quiet(self, heard_s: float) -> None:
        """Ask Smart Turn now if it has heard :data:`SMART_TURN_QUIET_S` after the words
        (``heard_s`` so far), else once the caller's audio brings the rest; the turn waits for
        the verdict meanwhile. Without the caller's audio, now."""
        if not self._quiet.flows or heard_s >= SMART_TURN_QUIET_S:
            await self._ask_analyzer()
            return
        self._verdict_due = True
        self._quiet_before_verdict_s = SMART_TURN_QUIET_S - heard_s

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
        probability = getattr(metrics, "probability", None)
        logger.debug(f"{self}: Smart Turn says {state.name.lower()} (p={probability})")
        if metrics is not None:
            await self.push_frame(MetricsFrame(data=[metrics]))
        if segment == self._segments_heard and not self._speaking:  # still this pause's
            self._verdict, self._verdict_due = state, False
            self._schedule()
        self._verdict_task = None

    def _ending(self) -> Ending:
        """How the turn ends, from what is known now: ``"complete"`` (the short wait: Smart
        Turn's verdict, the words as the tie-breaker, the words alone without Smart Turn),
        ``"finished"`` (``text_end_wait_s``: Smart Turn and the text model call a turn whose
        words do not ask finished; with ``words_over_audio``, also words that ask which Smart
        Turn hears unfinished and the model does not hold; with ``model_over_audio``, words
        that do not ask which Smart Turn hears unfinished and the model reads finished; with
        ``paused_turns_wait``, a complete turn the caller hesitated in) or ``"waited"`` (the
        upper bound)."""
        ending = self._ending_by_signals()
        return "finished" if ending == "complete" and self._paused_in_turn() else ending

    def _paused_in_turn(self) -> bool:
        """``paused_turns_wait``: the caller hesitated in this turn before its last words: a
        pause after words that stop unfinished ("Um.", "So.", "I would like to") or after a
        segment with no words (a recognizer may drop the "um"). A pause after a finished
        sentence is not one ("Hello there... can you tell me when you open?" is answered at
        once), nor is a sound after the last words (babble after "oui" made a second
        segment)."""
        return self._paused_turns_wait and self._segments.hesitated_before_last_words()

    def _ending_by_signals(self) -> Ending:
        """:meth:`_ending` from Smart Turn, the words and the text model alone."""
        if self._analyzer is None:
            return "complete" if asks_for_answer(self._text) else "waited"
        if self._verdict != EndOfTurnState.COMPLETE:
            return "finished" if self._words_outweigh_audio() else "waited"
        asks = self._words_allow_short_wait(self._text)
        p = self._p_end
        if p is None:  # no model, or it did not answer: the words decide, as without it
            return "complete" if asks else "waited"
        if asks:
            # Under the veto's threshold (a question mark's own, far lower) the model hears
            # the words going on: they wait for the bound, as a fragment does.
            return "complete" if p >= self._veto_below(self._text) else "waited"
        return "finished" if self._model_reads_finished() else "waited"

    def _veto_below(self, text: str) -> float:
        """The p(end) under which the model holds these words that ask: 0 (never) where
        :func:`beyond_the_veto` leaves them to the words rule, except that a question mark
        has a threshold of its own (``text_question_unfinished_p``)."""
        if len(words(text)) < self._veto_min_words:
            return 0.0
        if ends_with_question_mark(last_sentence(text)):
            return self._question_unfinished_p
        return self._text_unfinished_p

    def _words_outweigh_audio(self) -> bool:
        """Smart Turn hears this pause unfinished, but with ``words_over_audio`` the words ask
        for an answer and the model does not hold them, or with ``model_over_audio`` the
        words do not ask and the model reads them finished."""
        if self._text_model is None or self._verdict != EndOfTurnState.INCOMPLETE:
            return False
        if not asks_for_answer(self._text):
            return self._model_over_audio and self._model_reads_finished()
        if not self._words_over_audio:
            return False
        if beyond_the_veto(self._text, self._veto_min_words):
            return True
        return self._p_end is not None and self._p_end >= self._text_end_p

    def _model_reads_finished(self) -> bool:
        """The text model's p(end) calls words that do not ask a finished sentence (words
        :meth:`_model_may_read_finished` allows: a p(end) of at least ``text_end_p`` means it
        is at most 1)."""
        return (
            self._p_end is not None
            and self._p_end >= self._text_end_p
            and self._model_may_read_finished(self._text, self._latest)
        )

    def _wait_s(self, ending: Ending) -> float:
        """The quiet after the end of speech before a turn that ends this way ends."""
        if ending == "complete":
            return self._complete_wait_s
        return self._text_end_wait_s if ending == "finished" else self._unfinished_wait_s

    def _text_model_would_decide(self) -> bool:
        """Whether the model's p(end) may change when this turn ends (see :meth:`_ending`):
        it may veto words that ask, or let words that do not ask end the turn."""
        if self._text_model is None or self._analyzer is None or not self._text:
            return False
        if self._verdict not in (None, EndOfTurnState.COMPLETE) and not self._verdict_due:
            # Smart Turn heard this pause as unfinished: the model can change that only for
            # words that ask (``words_over_audio``) or, with ``model_over_audio``, for others
            if not asks_for_answer(self._text):
                return self._model_over_audio and self._model_may_read_finished(
                    self._text, self._latest
                )
            return self._words_over_audio and not beyond_the_veto(self._text, self._veto_min_words)
        if self._complete_wait_s >= self._unfinished_wait_s:
            return False
        if self._words_allow_short_wait(self._text):
            if self._veto_below(self._text) > 0:
                return True
            return self._words_over_audio and not beyond_the_veto(self._text, self._veto_min_words)
        return self._model_may_read_finished(self._text, self._latest)

    async def _ask_text_model(self) -> None:
        """Ask the model about the turn's words so far (a final transcript just came), off the
        frame path; an older question's answer is no longer wanted."""
        if self._p_task is not None:
            await self.task_manager.cancel_task(self._p_task)
            self._p_task = None
        self._p_end, self._p_due = None, False
        if not self._text_model_would_decide():
            return
        self._p_due = True
        self._p_task = self.task_manager.create_task(
            self._read_text_model(self._text, self._turns_ended), f"{self}::_read_text_model"
        )

    def _answer_worth_waiting_s(self) -> float | None:
        """How long the model's answer on the turn's words is worth waiting for, where that is
        longer than the client's own limit (``TextEndOfTurn.timeout_s``, 0.35 s by default).
        Words that may end on the short wait need the answer before it: the client's limit
        (``None``). For words that may not, the answer decides between the model's wait and
        the bound, so it is worth waiting for until the bound, where the turn ends without it:
        a slow answer (Chinese, Japanese or Korean words, many tokens each to SmolLM2, read on
        one thread: 110-195 ms on average in the East Asian benches, some past 0.35 s) then
        ends the turn when it comes, not at the bound."""
        if self._speech_ended_at is None or self._words_allow_short_wait(self._text):
            return None
        return self._speech_ended_at + self._unfinished_wait_s - time.time()

    def _prime_text_model(self) -> None:
        """The user began to speak: have the model read the conversation so far in the
        meantime, so that its question at the turn's end reads only the words
        (:meth:`TextEndOfTurn.prime`)."""
        if self._text_model is None or self._analyzer is None or self._context is None:
            return
        if self._prime_task is not None and not self._prime_task.done():
            return
        self._prime_task = self.task_manager.create_task(
            self._text_model.prime(self._context()), f"{self}::_prime_text_model"
        )

    async def _read_text_model(self, text: str, turn: int) -> None:
        assert self._text_model is not None
        conversation = self._context() if self._context is not None else ()
        limit_s = self._answer_worth_waiting_s()
        p = await self._text_model.probability(text, conversation, limit_s)  # None: no answer
        self._p_task = None
        if turn != self._turns_ended or text != self._text:
            return  # the turn ended, or more words came, while the model read these
        self._p_end, self._p_due = p, False
        logger.debug(f"{self}: the text model says p(end)={p}")
        self._schedule()

    def _words_allow_short_wait(self, text: str) -> bool:
        """The words' part beside Smart Turn's verdict (``text_check``)."""
        if self._text_check == "unfinished":
            return not ends_unfinished(text)
        return asks_for_answer(text)

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
            return bound + self._late_final_s  # the last words belong to this turn: wait for them
        if not self._text:
            return bound  # every segment came back without words: an empty turn
        if self._verdict_due or self._p_due:
            # Smart Turn's verdict, the text model's p(end): each arrives, or gives up, well
            # before this (the model's client has a timeout far below the bound).
            return bound
        return self._speech_ended_at + self._wait_s(self._ending())

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
            elif self._answer_ahead_now():
                self._ahead = UserTurnSpeculation(text=self._text)
                logger.debug(f"{self}: answering ahead of the turn's end, {wait:.2f} s away")
                await self.trigger_user_turn_inference_triggered(speculation=self._ahead)
                continue  # the deadline again: things may have moved while the answer started
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), wait)
        self._watcher = None
        if self._segments_due > 0:
            logger.warning(
                f"{self}: {self._segments_due} transcript(s) overdue; the turn ends without them"
            )
            self._segments_given_up += self._segments_due
            self._segments_due = 0
        how = self._ending() if self._text else "no words"
        logger.debug(f"{self}: turn ends ({how})")
        await self._call_event_handler("on_turn_ended", how)
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead.text == self._text:
            # The answer under way is this turn's: finalize only, which releases it (as
            # Pipecat's eager strategy keeps a speculation that held).
            await self.trigger_user_turn_finalized(confirms_speculation=True)
            return
        if ahead is not None:
            await self.trigger_user_turn_speculation_cancelled()
        await self.trigger_user_turn_stopped()

    async def _withdraw_ahead(self) -> None:
        self._ahead = None
        logger.debug(f"{self}: the answer started ahead is withdrawn")
        await self.trigger_user_turn_speculation_cancelled()

    def _answer_ahead_now(self) -> bool:
        """Whether to start the answer now, ahead of the turn's end: every signal is in, the
        models call the turn finished and only the quiet is awaited (``answer_ahead``), and
        no answer runs on these words yet. A question that ends at once gains nothing; a turn
        that waits for the bound is more often a pause than a statement."""
        return (
            self._answer_ahead
            and bool(self._text)
            and (self._ahead is None or self._ahead.text != self._text)
            and not self._speaking
            and self._segments_due == 0
            and not (self._verdict_due or self._p_due)
            and self._ending() == "finished"
        )

    def _audio_behind(self, at: float) -> float:
        """How long to wait for the audio of the quiet the clock says has lasted until ``at``
        (0: it has been heard, or there is no audio to wait for).

        A busy server reads the caller's audio late: the clock says the quiet has lasted, but
        the words that broke it may still be on their way, and a sound the VAD did not call
        speech starts the quiet again. Looked at again soon (a late burst comes all at once),
        for at most :data:`MAX_AUDIO_LAG_S` past the deadline, then the clock decides (a client
        may send no audio in silence). Up to one frame of it is never late: it is still being
        spoken into the frame that brings it (a phone call's audio comes 60 ms at a time, and
        waiting for that frame ended turns up to 60 ms past their deadline).
        """
        if self._speech_ended_at is None:
            return 0.0
        missing = self._quiet.missing_s(at - self._speech_ended_at)
        if missing <= 0 or time.time() >= at + MAX_AUDIO_LAG_S:
            return 0.0
        return min(0.02, missing)
