"""Keypresses as the model reads them: one sentence per sequence, and the first key interrupts."""

from __future__ import annotations

from pipecat.audio.dtmf.types import KeypadEntry
from pipecat.frames.frames import InputDTMFFrame, InterruptionFrame, TranscriptionFrame
from pipecat.tests.utils import SleepFrame, run_test

from agent.llm.keypresses import KeypressAggregator


def keys(digits: str) -> list[InputDTMFFrame]:
    return [InputDTMFFrame(KeypadEntry(d)) for d in digits]


async def test_a_sequence_becomes_one_sentence_after_the_quiet() -> None:
    down, up = await run_test(
        KeypressAggregator(timeout_s=0.2),
        frames_to_send=[*keys("12"), SleepFrame(0.5), *keys("3#")],
    )
    said = [f.text for f in down if isinstance(f, TranscriptionFrame)]
    assert said == ["The caller pressed 12.", "The caller pressed 3#."]
    assert all(f.finalized for f in down if isinstance(f, TranscriptionFrame))
    assert sum(isinstance(f, InterruptionFrame) for f in up) == 2  # one per sequence


async def test_speech_transcripts_pass_through_unchanged() -> None:
    spoken = TranscriptionFrame(text="press one", user_id="", timestamp="")
    down, _up = await run_test(KeypressAggregator(timeout_s=0.2), frames_to_send=[spoken])
    assert [f.text for f in down if isinstance(f, TranscriptionFrame)] == ["press one"]
