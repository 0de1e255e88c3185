"""Smart Turn v3 that keeps the turn: Pipecat's verdict on the same audio, but a COMPLETE
verdict no longer throws away the turn's audio so far."""

from __future__ import annotations

import numpy as np
from pipecat.audio.turn.base_turn_analyzer import EndOfTurnState
from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3

from agent.fastpath.turn_long_smart_turn import TurnLongSmartTurnV3
from tests.fakes.paused_speech import phrase_audio

RATE = 8000
CHUNK = 160  # 20 ms


def feed(analyzer: LocalSmartTurnAnalyzerV3, pcm: np.ndarray, *, speech: bool) -> None:
    for start in range(0, len(pcm), CHUNK):
        analyzer.append_audio(pcm[start : start + CHUNK].tobytes(), speech)


async def test_same_verdict_as_pipecats_and_the_turn_is_kept() -> None:
    stock, ours = LocalSmartTurnAnalyzerV3(), TurnLongSmartTurnV3()
    question = phrase_audio("what time is it", RATE)
    quiet = np.zeros(int(0.3 * RATE), np.int16)
    verdicts = []
    for analyzer in (stock, ours):
        analyzer.set_sample_rate(RATE)
        feed(analyzer, question, speech=True)
        feed(analyzer, quiet, speech=False)
        verdicts.append(await analyzer.analyze_end_of_turn())
    (stock_state, stock_metrics), (our_state, our_metrics) = verdicts
    assert stock_state == our_state == EndOfTurnState.COMPLETE
    assert stock_metrics is not None and our_metrics is not None
    assert our_metrics.probability == stock_metrics.probability  # type: ignore[attr-defined]
    assert stock._audio_buffer == [], "Pipecat clears on COMPLETE (see the module docstring)"
    assert len(ours._audio_buffer) > 0, "the turn's audio was thrown away"
    assert ours.params.pre_speech_ms == 1000  # a short "um" the VAD missed is heard
    ours.clear()  # the adaptive strategy's call when the turn really ends
    assert ours._audio_buffer == []
    for analyzer in (stock, ours):
        await analyzer.cleanup()
