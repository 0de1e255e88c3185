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
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

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

from agent.stt.frames import SpeechSegmentTranscribedFrame
from agent.turns import adaptive_stop
from agent.turns.adaptive_stop import AdaptiveUserTurnStopStrategy
from tests.fakes.turn_analyzer import ScriptedTurnAnalyzer
from tests.fakes.virtual_time import VirtualTimeLoop, VirtualWallClock

STOP_SECS = 0.2
BOUND_S = 1.3  # the shipped unfinished_wait_s
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
def utterances(draw: st.DrawFn) -> list[Segment]:
    count = draw(st.integers(1, 4))
    ending = draw(st.sampled_from(ENDINGS))
    segments = []
    for i in range(count):
        segments.append(
            Segment(
                speech_s=draw(st.floats(0.2, 1.5)),
                gap_s=draw(st.floats(0.1, 0.9)),
                final_delay_s=draw(st.floats(0.0, 1.5)),
                empty=draw(st.booleans()),
                words=ending if i == count - 1 else FRAGMENTS[i],
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
    segments: list[Segment], smart_turn: ScriptedTurnAnalyzer | None, loop: VirtualTimeLoop
) -> dict[str, Any]:
    strategy = AdaptiveUserTurnStopStrategy(
        complete_wait_s=0.0, unfinished_wait_s=BOUND_S, turn_analyzer=smart_turn
    )
    aggregator = LLMUserAggregator(
        LLMContext(),
        params=LLMUserAggregatorParams(
            user_turn_strategies=UserTurnStrategies(
                start=[VADUserTurnStartStrategy(), TranscriptionUserTurnStartStrategy()],
                stop=[strategy],
            )
        ),
    )
    seen: dict[str, Any] = {"ends": [], "messages": [], "fallbacks": 0}

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


def run(segments: list[Segment], smart_turn: ScriptedTurnAnalyzer | None) -> dict[str, Any]:
    loop = VirtualTimeLoop()
    original = adaptive_stop.time
    adaptive_stop.time = VirtualWallClock(loop)  # type: ignore[assignment]
    try:
        return loop.run_until_complete(converse(segments, smart_turn, loop))
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
