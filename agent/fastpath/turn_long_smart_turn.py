"""Smart Turn v3 that hears the whole user turn, not only the speech since its last "complete".

Pipecat's ``BaseSmartTurn.analyze_end_of_turn`` clears its audio buffer whenever the model
says COMPLETE. Under Pipecat's own strategy that verdict ends the turn, so nothing is lost.
Under the adaptive strategy (:mod:`agent.turns.adaptive_stop`) a COMPLETE verdict on a
fragment that the words do not call a question ("um...") ends nothing, and the person goes
on; a cleared buffer then judges "what was it?" alone, a plain question, where the whole
"um... what was it?" sounds like someone still thinking (0.14 complete). So the buffer is kept
until the turn ends (the strategy calls :meth:`clear`) or the model's own silence limit.

Mirrors ``pipecat.audio.turn.smart_turn.base_smart_turn.BaseSmartTurn.analyze_end_of_turn``
(Pipecat 1.14.0), minus its ``_clear`` on COMPLETE; reads ``_model_executor``,
``_process_speech_segment`` and ``_audio_buffer``.
"""

from __future__ import annotations

import asyncio

from pipecat.audio.turn.base_turn_analyzer import EndOfTurnState
from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3
from pipecat.metrics.metrics import MetricsData


class TurnLongSmartTurnV3(LocalSmartTurnAnalyzerV3):
    """Smart Turn v3 whose verdicts all hear the turn from its first word."""

    async def analyze_end_of_turn(self) -> tuple[EndOfTurnState, MetricsData | None]:
        loop = asyncio.get_running_loop()
        state, result = await loop.run_in_executor(
            self._model_executor, self._process_speech_segment, self._audio_buffer
        )
        return state, result
