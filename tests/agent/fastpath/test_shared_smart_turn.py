"""The shared, batched Smart Turn gives the probabilities Pipecat's per-call analyzer gives.

The test set: four calls, each a run of the paused utterances of ``tests/fakes/paused_speech``
(Piper voice; clauses, hesitations, lists, questions) with quiet before and after, asked for a
verdict at every pause as a strategy would. Pipecat's ``LocalSmartTurnAnalyzerV3`` hears each
call alone, on a clock that moves with the audio; ours hear the four calls at once, so their
verdicts go through the model in batches. Every verdict, every silence-timeout COMPLETE and
every probability must match, at 8 kHz (a phone call, resampled to the model's 16 kHz) and at
16 kHz, for Pipecat's analyzer as it is and for the variant that keeps the turn's audio after a
COMPLETE verdict (what the adaptive strategy uses).
"""

from __future__ import annotations

import asyncio
import time
import types
from typing import Any

import numpy as np
import pytest
from pipecat.audio.turn.base_turn_analyzer import BaseTurnAnalyzer, EndOfTurnState
from pipecat.audio.turn.smart_turn import base_smart_turn
from pipecat.audio.turn.smart_turn.base_smart_turn import SmartTurnParams
from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3

from agent.fastpath import shared_smart_turn
from agent.fastpath.shared_smart_turn import SharedSmartTurnAnalyzer, smart_turn_features
from agent.turns import smart_turn_batcher
from agent.turns.smart_turn_batcher import STATS, SmartTurnBatcher, smart_turn_session
from tests.fakes.paused_speech import phrase_audio, utterances

CALLS = 4
UTTERANCES_PER_CALL = 6
VAD_STOP_S = 0.2  # the verdict is asked once the VAD has heard this much quiet
Op = tuple[str, bytes, bool]  # ("audio", pcm, is_speech) | ("ask", b"", False) | ("clear", ...)


def call_script(call: int, rate: int, frame_s: float, *, clear_every: int) -> list[Op]:
    """One call: utterances of the set (rotated per call), a verdict asked at each pause
    and after the last phrase; the turn cleared after every ``clear_every`` utterances."""
    frame = int(rate * frame_s)
    ops: list[Op] = []

    def audio(pcm: np.ndarray, speech: bool) -> None:
        for start in range(0, len(pcm), frame):
            ops.append(("audio", pcm[start : start + frame].tobytes(), speech))

    def quiet(seconds: float) -> np.ndarray:
        return np.zeros(int(seconds * rate), np.int16)

    audio(quiet(0.6), False)
    said = utterances()
    for n in range(UTTERANCES_PER_CALL):
        utterance = said[(call * 3 + n) % len(said)]
        for index, phrase in enumerate(utterance.phrases):
            audio(phrase_audio(phrase, rate), True)
            pause = utterance.pauses_s[index] if index < len(utterance.pauses_s) else 0.5
            audio(quiet(VAD_STOP_S), False)
            ops.append(("ask", b"", False))
            audio(quiet(pause - VAD_STOP_S), False)
        if (n + 1) % clear_every == 0:
            ops.append(("clear", b"", False))
    return ops


Verdicts = list[tuple[str, EndOfTurnState, float | None]]


async def play(
    analyzer: BaseTurnAnalyzer, ops: list[Op], clock: list[float], rate: int
) -> Verdicts:
    """Feed ``ops``; the verdicts (asked, and silence timeouts) with their probabilities."""
    verdicts: Verdicts = []
    for kind, pcm, speech in ops:
        if kind == "audio":
            clock[0] += len(pcm) / 2 / rate
            if analyzer.append_audio(pcm, speech) == EndOfTurnState.COMPLETE:
                verdicts.append(("timeout", EndOfTurnState.COMPLETE, None))
        elif kind == "ask":
            state, metrics = await analyzer.analyze_end_of_turn()
            probability = getattr(metrics, "probability", None)
            verdicts.append(("asked", state, probability))
        else:
            analyzer.clear()
    return verdicts


class TurnKeepingReference(LocalSmartTurnAnalyzerV3):
    """Pipecat's analyzer minus the clear after a COMPLETE verdict (the turn is kept)."""

    async def analyze_end_of_turn(self) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._model_executor, self._process_speech_segment, self._audio_buffer
        )


@pytest.mark.parametrize(
    ("rate", "frame_s", "keep_turn"),
    [(8000, 0.06, True), (16000, 0.02, False)],
    ids=["phone-8k-keeps-turn", "webrtc-16k-pipecat-clear"],
)
async def test_batched_verdicts_equal_pipecats_per_call_analyzer(
    rate: int, frame_s: float, keep_turn: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    params = SmartTurnParams(pre_speech_ms=1000) if keep_turn else SmartTurnParams()
    scripts = [call_script(c, rate, frame_s, clear_every=2) for c in range(CALLS)]

    # Pipecat's analyzer times its audio with time.monotonic(): give it a clock that moves
    # with the audio, as a real-time call's does.
    expected: list[Verdicts] = []
    for script in scripts:
        clock = [0.0]
        fake_time = types.SimpleNamespace(
            monotonic=lambda c=clock: c[0], perf_counter=time.perf_counter
        )
        monkeypatch.setattr(base_smart_turn, "time", fake_time)
        reference_cls = TurnKeepingReference if keep_turn else LocalSmartTurnAnalyzerV3
        stock = reference_cls(params=params)
        stock.set_sample_rate(rate)
        expected.append(await play(stock, script, clock, rate))
        await stock.cleanup()
    monkeypatch.undo()

    batcher = SmartTurnBatcher()
    batches_before = STATS.batches
    inferences_before = STATS.inferences
    ours = []
    for _ in range(CALLS):
        analyzer = SharedSmartTurnAnalyzer(
            params=params, clear_on_complete=not keep_turn, batcher=batcher
        )
        analyzer.set_sample_rate(rate)
        ours.append(analyzer)
    got = await asyncio.gather(
        *(play(a, s, [0.0], rate) for a, s in zip(ours, scripts, strict=True))
    )

    asked = sum(1 for verdicts in expected for v in verdicts if v[2] is not None)
    assert asked >= 50, "the test set is too small to say anything"
    assert STATS.inferences - inferences_before == asked
    assert STATS.batches - batches_before < asked, "the calls' verdicts were never batched"
    assert STATS.largest_batch > 1
    for call, (mine, theirs) in enumerate(zip(got, expected, strict=True)):
        assert [v[:2] for v in mine] == [v[:2] for v in theirs], f"call {call}: verdicts differ"
        p_mine = np.array([np.nan if v[2] is None else v[2] for v in mine])
        p_theirs = np.array([np.nan if v[2] is None else v[2] for v in theirs])
        np.testing.assert_allclose(p_mine, p_theirs, rtol=0, atol=1e-5, equal_nan=True)
    completes = sum(v[1] == EndOfTurnState.COMPLETE for verdicts in got for v in verdicts)
    assert 0 < completes < sum(len(v) for v in got), "the set must hold both verdicts"


async def test_a_call_holds_only_its_audio_window_and_all_calls_share_one_session() -> None:
    """Per call: at most ``max_duration_secs`` of PCM16 (Pipecat's keeps a whole turn and a
    session of its own); the model is loaded once for every analyzer."""
    rate = 8000
    analyzers = [SharedSmartTurnAnalyzer(clear_on_complete=False) for _ in range(3)]
    second = np.full(rate, 1000, np.int16).tobytes()
    for analyzer in analyzers:
        analyzer.set_sample_rate(rate)
        for _ in range(30):  # 30 s of speech: one long turn
            analyzer.append_audio(second, True)
        window = int(analyzer.params.max_duration_secs * rate) * 2
        assert window <= analyzer.state_nbytes <= window + len(second)
    assert smart_turn_session() is smart_turn_session()
    assert smart_turn_batcher._session is not None
    assert not any(hasattr(a, "_session") or hasattr(a, "_executor") for a in analyzers)


async def test_a_failed_verdict_reads_incomplete_and_harms_no_other_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A verdict whose input cannot be made fails alone (the strategy then waits its upper
    bound); the other call in the same batch gets its verdict."""
    real = shared_smart_turn.smart_turn_features

    def features(segment: np.ndarray, sample_rate: int) -> np.ndarray:
        if sample_rate == 12000:
            raise ValueError("no features")
        return real(segment, sample_rate)

    monkeypatch.setattr(shared_smart_turn, "smart_turn_features", features)
    batcher = SmartTurnBatcher(max_delay_s=0.05)
    good, bad = (SharedSmartTurnAnalyzer(batcher=batcher) for _ in range(2))
    for analyzer, rate in ((good, 16000), (bad, 12000)):
        analyzer.set_sample_rate(rate)
        analyzer.append_audio(
            (np.sin(np.arange(rate) * 0.05) * 8000).astype(np.int16).tobytes(), True
        )
    failures_before, batches_before = STATS.failed, STATS.batches
    (_, good_metrics), (bad_state, bad_metrics) = await asyncio.gather(
        good.analyze_end_of_turn(), bad.analyze_end_of_turn()
    )
    assert good_metrics is not None
    assert 0.0 <= good_metrics.probability <= 1.0  # type: ignore[attr-defined]
    assert (bad_state, bad_metrics) == (EndOfTurnState.INCOMPLETE, None)
    assert (STATS.failed, STATS.batches) == (failures_before + 1, batches_before + 1)


def test_features_are_pipecats() -> None:
    """The model input is Pipecat's, resampling included (the batch only stacks them)."""
    rate = 8000
    pcm = (np.sin(np.arange(3 * rate) * 0.03) * 6000).astype(np.int16)
    stock = LocalSmartTurnAnalyzerV3()
    stock.set_sample_rate(rate)
    seen: list[np.ndarray] = []
    stock._session = types.SimpleNamespace(  # type: ignore[assignment]
        run=lambda _out, feeds: seen.append(feeds["input_features"][0]) or [np.array([[0.5]])]
    )
    stock._predict_endpoint(pcm.astype(np.float32) / 32768.0)
    np.testing.assert_array_equal(smart_turn_features(pcm, rate), seen[0])
