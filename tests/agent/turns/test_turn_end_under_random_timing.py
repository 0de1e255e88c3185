"""The end of a turn under any timing: random pauses, a slow recognizer, finals that arrive
after the caller went on, and segments the recognizer heard no words in.

Hypothesis draws an utterance cut by the VAD into 1-4 segments (0.1-0.9 s from one VAD stop to
the next start), a final transcript for each 0-1.5 s after its VAD stop (in order, as the STT
sends them, so a late one lands after the next segment began), and which segments came back
empty (their words then come in the next segment's final, as the STT joins them), and, when
Smart Turn is on, its verdict and how long it takes (0-0.5 s). The frames
go through Pipecat's real user aggregator with the adaptive strategy, on an event loop whose
clock jumps (:mod:`tests.fakes.virtual_time`): hundreds of conversations in seconds, exact on
any machine. Each must end in exactly one turn, never before its last VAD stop, within the
bound after the end of speech or at once when a late final arrives, with every word in the
user message, and never by Pipecat's fallback.

With the text model as the default profile sets it (its veto on words that ask, its wait for
statements it calls finished and for turns the caller hesitated in), its answer is drawn too
(none, below or above each threshold) and how long it takes (0-0.4 s): it may move the end of
the turn between the three waits, and only by what it said, never by when it said it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pipecat.audio.turn.base_turn_analyzer import EndOfTurnState
from pipecat.frames.frames import (
    EndFrame,
    Frame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMUserAggregator,
    LLMUserAggregatorParams,
)
from pipecat.turns.user_start import (
    TranscriptionUserTurnStartStrategy,
    VADUserTurnStartStrategy,
)
from pipecat.turns.user_turn_strategies import UserTurnStrategies
from pipecat.workers.runner import WorkerRunner

from agent.config import TurnSettings
from agent.fastpath.tentative_answer import TentativeAnswerUserAggregator
from agent.stt.frames import SpeechSegmentTranscribedFrame
from agent.turns import adaptive_stop
from agent.turns.adaptive_stop import AdaptiveUserTurnStopStrategy, Ending
from tests.fakes.text_model import ScriptedTextModel
from tests.fakes.turn_analyzer import ScriptedTurnAnalyzer
from tests.fakes.virtual_time import VirtualTimeLoop, VirtualWallClock

STOP_SECS = 0.2
BOUND_S = 1.3  # the shipped unfinished_wait_s
DEFAULT = TurnSettings()
"""The default profile's text-model settings: the veto, the model's wait and its p(end)."""
SLACK_S = 0.05  # frame hops on the loop; the clock itself is exact
FRAGMENTS = ["hello there.", "i would like to", "book a table and", "for the"]
"""Words that do not end a turn on their own, so the utterance is one turn."""
ENDINGS = ["can you tell me when the store opens?", "for two people."]


@dataclass(frozen=True)
class Segment:
    speech_s: float  # VAD start to VAD stop
    gap_s: float  # this VAD stop to the next VAD start
    final_delay_s: float  # this VAD stop to its final transcript
    empty: bool  # the recognizer heard no words in it alone
    words: str


smart_turns = st.one_of(
    st.none(),
    st.builds(ScriptedTurnAnalyzer, st.sampled_from(EndOfTurnState), st.floats(0.0, 0.5)),
)


@st.composite
def utterances(
    draw: st.DrawFn,
    fragments: list[str] = FRAGMENTS,
    endings: list[str] = ENDINGS,
    last_heard: bool = False,
) -> list[Segment]:
    """Segments of one utterance; with ``last_heard`` the recognizer hears words in the last
    one (so the turn's words are its ending's)."""
    count = draw(st.integers(1, 4))
    ending = draw(st.sampled_from(endings))
    segments = []
    for i in range(count):
        segments.append(
            Segment(
                speech_s=draw(st.floats(0.2, 1.5)),
                gap_s=draw(st.floats(0.1, 0.9)),
                final_delay_s=draw(st.floats(0.0, 1.5)),
                empty=draw(st.booleans()) and not (last_heard and i == count - 1),
                words=ending if i == count - 1 else fragments[i],
            )
        )
    return segments


@dataclass
class Event:
    at: float
    frame: Frame


def timeline(segments: list[Segment], wall0: float) -> tuple[list[Event], float, float, str]:
    """The frames the VAD and the STT send, in time order; the last VAD stop, the last final's
    arrival, and the words the user message must hold."""
    events: list[Event] = []
    t = 1.0
    final_at = 0.0
    carried = ""
    heard: list[str] = []
    for segment in segments:
        events.append(Event(t, VADUserStartedSpeakingFrame(start_secs=0.2, timestamp=wall0 + t)))
        t += segment.speech_s
        stop = VADUserStoppedSpeakingFrame(stop_secs=STOP_SECS, timestamp=wall0 + t)
        events.append(Event(t, stop))
        last_stop = t
        final_at = max(t + segment.final_delay_s, final_at)  # the STT answers in order
        words = f"{carried} {segment.words}".strip()
        if segment.empty:
            carried = words  # its audio goes in front of the next segment's
            events.append(Event(final_at, SpeechSegmentTranscribedFrame("")))
        else:
            carried = ""
            heard.append(words)
            final = TranscriptionFrame(words, "caller", "now")
            final.finalized = True
            events.append(Event(final_at, final))
            events.append(Event(final_at, SpeechSegmentTranscribedFrame(words)))
        t += segment.gap_s
    events.sort(key=lambda e: e.at)  # stable: a final stays before its segment frame
    return events, last_stop, final_at, " ".join(heard)


async def converse(
    segments: list[Segment], strategy: AdaptiveUserTurnStopStrategy, loop: VirtualTimeLoop
) -> dict[str, Any]:
    # With the text model, ours (it keeps or withdraws the answer started ahead); else Pipecat's.
    tentative = strategy._text_model is not None
    aggregator = (TentativeAnswerUserAggregator if tentative else LLMUserAggregator)(
        LLMContext(),
        params=LLMUserAggregatorParams(
            user_turn_strategies=UserTurnStrategies(
                start=[VADUserTurnStartStrategy(), TranscriptionUserTurnStartStrategy()],
                stop=[strategy],
            )
        ),
    )
    seen: dict[str, Any] = {"ends": [], "messages": [], "fallbacks": 0, "ahead": []}
    if tentative:

        @aggregator.event_handler("on_eager_answer")
        async def _ahead(_aggregator: Any, outcome: str) -> None:
            seen["ahead"].append(outcome)

    @aggregator.event_handler("on_user_turn_stopped")
    async def _stopped(_aggregator: Any, _strategy: Any, message: Any) -> None:
        seen["ends"].append(loop.time())
        seen["messages"].append(message.content)

    @aggregator.event_handler("on_user_turn_stop_timeout")
    async def _fallback(_aggregator: Any) -> None:
        seen["fallbacks"] += 1

    worker = PipelineWorker(Pipeline([aggregator]), idle_timeout_secs=None)
    events, last_stop, final_at, heard = timeline(segments, loop.wall() - loop.time())

    async def drive() -> None:
        for event in events:
            await asyncio.sleep(max(0.0, event.at - loop.time()))
            await worker.queue_frame(event.frame)
        await asyncio.sleep(last_stop + BOUND_S + 10.0 - loop.time())  # past any fallback
        await worker.queue_frame(EndFrame())

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await asyncio.gather(runner.run(), drive())
    seen.update(last_stop=last_stop, final_at=final_at, heard=heard)
    return seen


def run(
    segments: list[Segment],
    smart_turn: ScriptedTurnAnalyzer | None,
    text_model: ScriptedTextModel | None = None,
    words_over_audio: bool = False,
    model_over_audio: bool = False,
    text_question_unfinished_p: float = 0.0,
) -> dict[str, Any]:
    loop = VirtualTimeLoop()
    original = adaptive_stop.time
    adaptive_stop.time = VirtualWallClock(loop)  # type: ignore[assignment]
    try:
        with_the_model: dict[str, Any] = {}
        if text_model is not None:  # as the default profile sets it
            with_the_model = {
                "text_model": text_model,
                "text_end_p": DEFAULT.text_end_p,
                "text_end_wait_s": DEFAULT.text_end_wait_s,
                "text_unfinished_p": DEFAULT.text_unfinished_p,
                "answer_ahead": True,
                "words_over_audio": words_over_audio,
                "model_over_audio": model_over_audio,
                "text_question_unfinished_p": text_question_unfinished_p,
                "paused_turns_wait": DEFAULT.paused_turns_wait,
            }
        strategy = AdaptiveUserTurnStopStrategy(
            complete_wait_s=0.0,
            unfinished_wait_s=BOUND_S,
            turn_analyzer=smart_turn,
            **with_the_model,
        )
        return loop.run_until_complete(converse(segments, strategy, loop))
    finally:
        adaptive_stop.time = original
        loop.close()


@settings(max_examples=150, deadline=None)
@given(utterances(), smart_turns)
def test_every_utterance_ends_in_one_turn_on_time_with_all_its_words(
    segments: list[Segment], smart_turn: ScriptedTurnAnalyzer | None
) -> None:
    seen = run(segments, smart_turn)
    assert seen["fallbacks"] == 0, "Pipecat's fallback ended the turn"
    assert len(seen["ends"]) == 1, f"{len(seen['ends'])} turn ends: {seen['messages']}"
    (ended,) = seen["ends"]
    last_stop, final_at = seen["last_stop"], seen["final_at"]
    assert ended >= last_stop, "ended before the caller stopped speaking"
    speech_end = last_stop - STOP_SECS
    latest = max(speech_end + BOUND_S, final_at)
    assert ended <= latest + SLACK_S, (
        f"ended {ended - speech_end:.2f} s after the end of speech; the bound is {BOUND_S} s "
        f"and the last final came {final_at - speech_end:.2f} s after it"
    )
    if seen["heard"]:
        assert seen["messages"] == [seen["heard"]]
        if seen["heard"].endswith("?"):  # a complete question waits only for its signals
            if smart_turn is None:
                assert ended <= max(speech_end, final_at) + SLACK_S
            elif smart_turn.state == EndOfTurnState.COMPLETE:
                # Asked at the pause, or when the final makes the words a question.
                verdict_at = max(last_stop, final_at) + smart_turn.delay_s
                assert ended <= max(speech_end, final_at, verdict_at) + SLACK_S


# ---------------------------------------------------------------- with the text model

CLOSED_FRAGMENTS = ["hello there.", "um.", "well i was thinking.", "so."]
"""Fragments the recognizer closed with a full stop, which the model reads as going on (p 0):
none ends the turn on its own, and the turn's words are the last sentence's."""
HESITATIONS = {"um.", "so."}
"""Of them, those a pause after is a hesitation (a filler, a connective): the turn then waits
the model's wait at the soonest, as after a segment with no words."""
QUESTION = "can you tell me when the store opens?"
"""Words that ask, closed with a question mark: the model is not asked (beyond the veto), but
with ``text_question_unfinished_p``."""
REQUEST = "can you tell me the opening hours."
"""Words that ask by their order alone: the veto reads them."""
STATEMENT = "i would like a table for two people."
"""Words that ask for nothing: the model's wait, if it calls them finished."""
Options = tuple[bool, bool, float]
"""``words_over_audio`` and ``model_over_audio`` (what may end a turn Smart Turn hears
unfinished on the model's wait), and ``text_question_unfinished_p`` (the model's threshold for
a question mark)."""


def expected_ending(
    heard: str, verdict: EndOfTurnState, p: float | None, options: Options, paused: bool
) -> Ending:
    """How the turn must end once every signal is in: Smart Turn's verdict, then the words,
    then the model's p(end) where it may change the outcome, and a turn the caller hesitated
    in (``paused``) never on the short wait (the strategy's docstring)."""
    ending = ending_by_signals(heard, verdict, p, options)
    return "finished" if ending == "complete" and paused else ending


def ending_by_signals(
    heard: str, verdict: EndOfTurnState, p: float | None, options: Options
) -> Ending:
    words_over_audio, model_over_audio, question_unfinished_p = options
    if verdict != EndOfTurnState.COMPLETE:
        if words_over_audio and heard.endswith(QUESTION):
            return "finished"  # a question mark: the words need no model
        finished = p is not None and p >= DEFAULT.text_end_p
        if heard.endswith(STATEMENT):
            return "finished" if model_over_audio and finished else "waited"
        return "finished" if words_over_audio and heard.endswith(REQUEST) and finished else "waited"
    if heard.endswith(QUESTION):
        vetoed = p is not None and p < question_unfinished_p
        return "waited" if vetoed else "complete"
    if heard.endswith(REQUEST):
        return "waited" if p is not None and p < DEFAULT.text_unfinished_p else "complete"
    finished = p is not None and p >= DEFAULT.text_end_p
    return "finished" if finished else "waited"  # a statement


@pytest.mark.parametrize(
    ("ending", "answers"),
    [
        (QUESTION, [None, 0.01, 0.5]),
        (REQUEST, [None, 0.01, DEFAULT.text_unfinished_p, 0.5]),
        (STATEMENT, [None, 0.05, DEFAULT.text_end_p, 0.5]),
    ],
    ids=["question", "request", "statement"],
)
@pytest.mark.parametrize(
    "options",
    [(False, False, 0.0), (True, False, 0.0), (True, True, 0.0), (True, True, 0.02)],
    ids=[
        "Smart Turn decides",
        "words that ask over it",
        "and the model's finished too",
        "and the model reads question marks",
    ],
)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_the_text_model_changes_when_a_turn_ends_never_how_many_or_its_words(
    ending: str, answers: list[float | None], options: Options, data: st.DataObject
) -> None:
    """The model answers p(end) on the turn's whole words (0 on fragments) some time after it
    is asked; ``None`` is a model that gave no opinion. Whatever the order in which the
    verdict, the finals and the model's answer arrive, the turn ends once, with every word, at
    the wait its ending has: never before it (a held turn waits for the bound), and no later
    than the wait or the last signal."""
    segments = data.draw(utterances(CLOSED_FRAGMENTS, [ending], last_heard=True))
    smart_turn = data.draw(
        st.builds(ScriptedTurnAnalyzer, st.sampled_from(EndOfTurnState), st.floats(0.0, 0.5))
    )
    p = data.draw(st.sampled_from(answers), "p(end)")
    model_s = data.draw(st.floats(0.0, 0.4), "the model's time")
    model = ScriptedTextModel(lambda text: p if text.endswith(ending) else 0.0, model_s)
    seen = run(segments, smart_turn, model, *options)
    assert seen["fallbacks"] == 0, "Pipecat's fallback ended the turn"
    assert len(seen["ends"]) == 1, f"{len(seen['ends'])} turn ends: {seen['messages']}"
    assert seen["messages"] == [seen["heard"]]
    (ended,) = seen["ends"]
    last_stop, final_at = seen["last_stop"], seen["final_at"]
    speech_end = last_stop - STOP_SECS
    assert last_stop <= ended <= max(speech_end + BOUND_S, final_at) + SLACK_S
    if final_at > speech_end + BOUND_S:
        return  # a late final: the turn ends the moment it arrives, as asserted
    paused = DEFAULT.paused_turns_wait and any(
        segment.empty or segment.words in HESITATIONS for segment in segments[:-1]
    )
    ending = expected_ending(seen["heard"], smart_turn.state, p, options, paused)
    wait_s = {"complete": 0.0, "finished": DEFAULT.text_end_wait_s, "waited": BOUND_S}[ending]
    assert ended >= speech_end + wait_s - SLACK_S, (
        f"ended {ended - speech_end:.2f} s after the end of speech; a {ending} turn waits "
        f"{wait_s} s"
    )
    # Smart Turn is asked at the VAD stop or when the final comes, the model when it comes.
    signals_at = max(max(last_stop, final_at) + smart_turn.delay_s, final_at + model_s)
    if signals_at < speech_end + BOUND_S:  # else the bound ends it, on what is known then
        assert ended <= max(speech_end + wait_s, signals_at) + SLACK_S, (
            f"ended {ended - speech_end:.2f} s after the end of speech; a {ending} turn waits "
            f"{wait_s} s and its signals were in {signals_at - speech_end:.2f} s after it"
        )
    # The answer is started ahead only while a finished turn waits out its quiet, on its final
    # words: kept when the turn ends, never restarted.
    if ending != "finished":
        assert seen["ahead"] == []
    elif signals_at < speech_end + wait_s - SLACK_S:
        assert seen["ahead"] == ["kept"]
