"""The transcript-aware end of turn: which words sound unfinished, and that it is Pipecat's
speech-timeout strategy underneath (same frames handled, same trigger)."""

from __future__ import annotations

import pytest
from pipecat.turns.user_stop import SpeechTimeoutUserTurnStopStrategy

from agent.config import TurnSettings
from agent.fastpath.transcript_turn_stop import (
    TranscriptAwareUserTurnStopStrategy,
    looks_unfinished,
)


@pytest.mark.parametrize(
    "text",
    [
        "I would like to book a table,",
        "So",
        "Um",
        "I need apples, bread and",
        "My number is 5",
        "five five five one two",
        "When I finally got home...",
        "I was wondering if",
    ],
)
def test_words_that_trail_off_are_unfinished(text: str) -> None:
    assert looks_unfinished(text)


@pytest.mark.parametrize(
    "text",
    ["What time is it?", "Is the store open today?", "Book a table for two.", "", "Thanks."],
)
def test_complete_turns_are_not(text: str) -> None:
    assert not looks_unfinished(text)


def test_it_is_pipecats_speech_timeout_strategy_underneath() -> None:
    strategy = TranscriptAwareUserTurnStopStrategy(user_speech_timeout=0.0, unfinished_wait_s=0.7)
    assert isinstance(strategy, SpeechTimeoutUserTurnStopStrategy)
    for private in ("_text", "_vad_user_speaking", "_user_speech_wait_done", "_stt_wait_done"):
        assert hasattr(strategy, private), f"Pipecat renamed {private}: see the module docstring"


def test_the_pipeline_uses_it_when_configured() -> None:
    from pipelines.voice_agent import _turn_strategies

    (stop,) = _turn_strategies(TurnSettings(end_of_turn="transcript")).stop
    assert isinstance(stop, TranscriptAwareUserTurnStopStrategy)
    (default,) = _turn_strategies(TurnSettings()).stop
    assert type(default) is SpeechTimeoutUserTurnStopStrategy
