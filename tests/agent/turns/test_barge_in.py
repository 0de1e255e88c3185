"""The turn start, frame by frame: a VAD start starts the turn whatever the bot does, and the
VAD is told to need ``barge_in_secs`` of speech while the bot speaks, ``start_secs`` again
once it stops. A real call, where the VAD takes those settings, is in
``test_barge_in_on_a_call.py``."""

from __future__ import annotations

from typing import Any

import pytest
from pipecat.audio.vad.vad_analyzer import VADParams
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    Frame,
    VADParamsUpdateFrame,
    VADUserStartedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.turns.types import ProcessFrameResult

from agent.turns.barge_in import BargeInUserTurnStartStrategy

QUIET = VADParams(start_secs=0.1, stop_secs=0.2, confidence=0.5, min_volume=0.4)


class Watched:
    """The strategy, with what it pushed and how many turns it started."""

    def __init__(self, barge_in_secs: float) -> None:
        self.strategy = BargeInUserTurnStartStrategy(vad_params=QUIET, barge_in_secs=barge_in_secs)
        self.pushed: list[tuple[Frame, FrameDirection]] = []
        self.turns = 0

        @self.strategy.event_handler("on_push_frame")
        async def _pushed(_strategy: Any, frame: Frame, direction: FrameDirection) -> None:
            self.pushed.append((frame, direction))

        @self.strategy.event_handler("on_user_turn_started")
        async def _started(_strategy: Any, _params: Any) -> None:
            self.turns += 1

    def start_secs_sent(self) -> list[float]:
        assert all(direction == FrameDirection.UPSTREAM for _, direction in self.pushed)
        return [f.params.start_secs for f, _ in self.pushed if isinstance(f, VADParamsUpdateFrame)]


async def test_while_the_bot_speaks_the_vad_needs_the_barge_in_speech() -> None:
    watched = Watched(barge_in_secs=0.2)
    await watched.strategy.process_frame(BotStartedSpeakingFrame())
    await watched.strategy.process_frame(BotStartedSpeakingFrame())  # one per bot sentence
    assert watched.start_secs_sent() == [0.2]
    await watched.strategy.process_frame(BotStoppedSpeakingFrame())
    assert watched.start_secs_sent() == [0.2, 0.1]


async def test_only_the_start_time_changes() -> None:
    watched = Watched(barge_in_secs=0.3)
    await watched.strategy.process_frame(BotStartedSpeakingFrame())
    sent = watched.pushed[0][0]
    assert isinstance(sent, VADParamsUpdateFrame)
    assert sent.params == QUIET.model_copy(update={"start_secs": 0.3})


async def test_with_one_start_time_for_both_the_vad_is_left_alone() -> None:
    watched = Watched(barge_in_secs=QUIET.start_secs)
    await watched.strategy.process_frame(BotStartedSpeakingFrame())
    await watched.strategy.process_frame(BotStoppedSpeakingFrame())
    assert watched.pushed == []


@pytest.mark.parametrize("bot_speaking", [False, True])
async def test_a_vad_start_starts_the_turn(bot_speaking: bool) -> None:
    watched = Watched(barge_in_secs=0.2)
    if bot_speaking:
        await watched.strategy.process_frame(BotStartedSpeakingFrame())
    result = await watched.strategy.process_frame(VADUserStartedSpeakingFrame())
    assert result == ProcessFrameResult.STOP
    assert watched.turns == 1


def test_a_barge_in_needs_some_speech() -> None:
    with pytest.raises(ValueError, match="barge_in_secs"):
        BargeInUserTurnStartStrategy(vad_params=QUIET, barge_in_secs=0)
