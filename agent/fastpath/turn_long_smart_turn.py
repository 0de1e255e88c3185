"""Smart Turn v3 that hears the whole user turn, not only the speech since its last "complete".

Pipecat's ``BaseSmartTurn.analyze_end_of_turn`` clears its audio buffer whenever the model
says COMPLETE. Under Pipecat's own strategy that verdict ends the turn, so nothing is lost.
Under the adaptive strategy (:mod:`agent.turns.adaptive_stop`) a COMPLETE verdict on a
fragment that the words do not call a question ("um...") ends nothing, and the person goes
on; a cleared buffer then judges "what was it?" alone, a plain question, where the whole
"um... what was it?" sounds like someone still thinking (0.14 complete). So the buffer is kept
until the turn ends (the strategy calls :meth:`clear`) or the model's own silence limit.

It also hears more before the first word the VAD reported (1 s instead of Pipecat's 0.5 s,
plus the VAD's start delay): Silero needs 200 ms of speech to report any, so a short "um" or
"so" before a pause goes unreported, and without it "um... what was it?" is judged as a plain
"what was it?".

Mirrors ``pipecat.audio.turn.smart_turn.base_smart_turn.BaseSmartTurn.analyze_end_of_turn``
(Pipecat 1.14.0), minus its ``_clear`` on COMPLETE; reads ``_model_executor``,
``_process_speech_segment`` and ``_audio_buffer``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pipecat.audio.turn.base_turn_analyzer import EndOfTurnState
from pipecat.audio.turn.smart_turn.base_smart_turn import SmartTurnParams
from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3
from pipecat.metrics.metrics import MetricsData

PRE_SPEECH_MS = 1000


class TurnLongSmartTurnV3(LocalSmartTurnAnalyzerV3):
    """Smart Turn v3 whose verdicts all hear the turn from its first word."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("params", SmartTurnParams(pre_speech_ms=PRE_SPEECH_MS))
        super().__init__(**kwargs)

    async def analyze_end_of_turn(self) -> tuple[EndOfTurnState, MetricsData | None]:
        loop = asyncio.get_running_loop()
        state, result = await loop.run_in_executor(
            self._model_executor, self._process_speech_segment, self._audio_buffer
        )
        return state, result
