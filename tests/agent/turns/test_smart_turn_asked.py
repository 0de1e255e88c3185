"""Smart Turn is asked only at pauses where its verdict may decide when the turn ends.

With the adaptive strategy, the verdict matters only when the words so far could end the turn
on the short wait (COMPLETE ends the turn at once, INCOMPLETE after the longer wait); a turn
whose words rule that out waits the longer wait whatever the model says, so the model (~50 ms
of a core per verdict) is not asked. The words come in the interim transcript before the VAD
stop, or only in the final one after it; a segment with no interim yet may be anything, so it
is judged at the VAD stop, beside the recognizer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pipecat.audio.turn.base_turn_analyzer import EndOfTurnState
from pipecat.clocks.system_clock import SystemClock
from pipecat.frames.frames import InterimTranscriptionFrame
from pipecat.processors.frame_processor import FrameProcessorSetup
from pipecat.utils.asyncio.task_manager import TaskManager

from agent.turns.adaptive_stop import AdaptiveUserTurnStopStrategy
from tests.agent.turns.test_adaptive_stop import STOP_SECS, WAIT_S, Recorder
from tests.fakes.turn_analyzer import ScriptedTurnAnalyzer


@pytest.fixture
async def make() -> AsyncIterator[Any]:
    """A strategy asking ``analyzer``, driven frame by frame (``complete_wait_s`` 0 unless
    given)."""
    made: list[AdaptiveUserTurnStopStrategy] = []

    async def build(analyzer: ScriptedTurnAnalyzer, complete_wait_s: float = 0.0) -> Recorder:
        strategy = AdaptiveUserTurnStopStrategy(
            complete_wait_s=complete_wait_s, unfinished_wait_s=WAIT_S, turn_analyzer=analyzer
        )
        setup = FrameProcessorSetup(
            clock=SystemClock(),
            task_manager=TaskManager(),
            pipeline_worker=None,  # type: ignore[arg-type]
        )
        await strategy.setup(setup)
        made.append(strategy)
        return Recorder(strategy)

    yield build
    for strategy in made:
        await strategy.cleanup()


async def test_statements_and_fragments_heard_in_the_interim_never_ask_the_model(
    make: Any,
) -> None:
    analyzer = ScriptedTurnAnalyzer(EndOfTurnState.COMPLETE)
    turn = await make(analyzer)
    for words in ("I would like to book a table", "for two people."):
        await turn.speak()
        await turn.strategy.process_frame(InterimTranscriptionFrame(words.lower(), "u", "t"))
        await turn.pause(words)
    await asyncio.sleep(WAIT_S + 0.05)
    assert len(turn.ended) == 1
    assert analyzer.asked == 0


async def test_a_segment_not_heard_yet_is_judged_at_the_vad_stop(make: Any) -> None:
    """A short word ("Stop.") is often decoded only after the VAD stop: the model judges the
    pause beside the recognizer, so a slow final does not wait for the verdict too."""
    analyzer = ScriptedTurnAnalyzer(EndOfTurnState.COMPLETE)
    turn = await make(analyzer)
    await turn.speak()
    await turn.pause(None)
    await asyncio.sleep(0.01)
    assert analyzer.asked == 1, "not asked at the VAD stop"
    await turn.transcribed("Stop.")
    await asyncio.sleep(0.05)
    assert analyzer.asked == 1
    assert turn.after_speech() < STOP_SECS + 0.1


async def test_a_question_heard_in_the_interim_is_judged_at_the_vad_stop(make: Any) -> None:
    """While the recognizer finishes, the model judges the pause: asked once, not again when
    the final comes."""
    analyzer = ScriptedTurnAnalyzer(EndOfTurnState.COMPLETE)
    turn = await make(analyzer)
    await turn.speak()
    await turn.strategy.process_frame(
        InterimTranscriptionFrame("is the store open today", "u", "t")
    )
    await turn.pause(None)
    await asyncio.sleep(0.01)  # the verdict runs in a task of its own
    assert analyzer.asked == 1, "not asked at the VAD stop"
    await turn.transcribed("Is the store open today?")
    await asyncio.sleep(0.05)
    assert analyzer.asked == 1
    assert turn.after_speech() < STOP_SECS + 0.1


async def test_a_question_only_the_final_reveals_is_judged_when_it_comes(make: Any) -> None:
    analyzer = ScriptedTurnAnalyzer(EndOfTurnState.INCOMPLETE)
    turn = await make(analyzer)
    await turn.speak()
    await turn.strategy.process_frame(InterimTranscriptionFrame("um", "u", "t"))
    await turn.pause(None)
    await asyncio.sleep(0.01)
    assert analyzer.asked == 0
    await turn.transcribed("Um... What was it?")
    await asyncio.sleep(WAIT_S)
    assert analyzer.asked == 1
    assert turn.after_speech() > WAIT_S - 0.02, "ended early on the words alone"


async def test_with_equal_waits_the_verdict_decides_nothing_and_is_not_asked(
    make: Any,
) -> None:
    analyzer = ScriptedTurnAnalyzer(EndOfTurnState.COMPLETE)
    turn = await make(analyzer, complete_wait_s=WAIT_S)
    await turn.speak()
    await turn.pause("What time is it?")
    await asyncio.sleep(WAIT_S + 0.05)
    assert len(turn.ended) == 1 and analyzer.asked == 0
