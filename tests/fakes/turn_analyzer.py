"""A turn analyzer with Smart Turn's interface and no model: it answers the verdict it is
given, after an optional delay (the model's own thread), and counts how often it was asked."""

from __future__ import annotations

import asyncio
from typing import Any

from pipecat.audio.turn.base_turn_analyzer import BaseTurnAnalyzer, EndOfTurnState


class ScriptedTurnAnalyzer(BaseTurnAnalyzer):
    """Says ``state`` to every ``analyze_end_of_turn``, ``delay_s`` after being asked."""

    def __init__(self, state: EndOfTurnState, delay_s: float = 0.0) -> None:
        super().__init__()
        self.state, self.delay_s = state, delay_s
        self.asked = 0

    @property
    def speech_triggered(self) -> bool:
        return False

    @property
    def params(self) -> Any:
        return None

    def append_audio(self, buffer: bytes, is_speech: bool) -> EndOfTurnState:
        return EndOfTurnState.INCOMPLETE

    async def analyze_end_of_turn(self) -> tuple[EndOfTurnState, None]:
        self.asked += 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return self.state, None

    def update_vad_start_secs(self, vad_start_secs: float) -> None:
        pass

    def clear(self) -> None:
        pass
