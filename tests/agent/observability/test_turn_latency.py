"""The turn-latency observer fed synthetic ``FramePushed`` events with known pipeline times.

Sources are real Pipecat processor classes (a TTS service, an output transport), because the
observer trusts a frame only from the processor that makes it: TTS audio from the TTS, the
"bot started speaking" from the output transport.
"""

from __future__ import annotations

from typing import Any

import pytest
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    ErrorFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.utils.errors import ErrorCategory

from agent.observability.metrics import STAGES, AgentMetrics
from agent.observability.turn_latency import TurnLatencyObserver
from tests.agent.observability.synthetic import UP, Pipeline, answered_turn, audio, feed


def sample(metrics: AgentMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


async def test_a_turn_records_every_stage_from_the_end_of_speech(
    turn_log: list[dict[str, Any]],
) -> None:
    metrics = AgentMetrics(process=False)
    observer = TurnLatencyObserver(call_id="call-1", metrics=metrics)
    await feed(observer, answered_turn(Pipeline(), 0))

    expected = {
        "vad_stop": 0.2,
        "stt_final": 0.3,
        "llm_first_token": 0.35,
        "tts_first_audio": 0.5,
        "first_audio_out": 0.52,
    }
    for stage, seconds in expected.items():
        assert sample(metrics, "voice_agent_turn_stage_seconds_count", stage=stage) == 1
        assert sample(metrics, "voice_agent_turn_stage_seconds_sum", stage=stage) == pytest.approx(
            seconds
        )
    assert sample(metrics, "voice_agent_turn_seconds_count") == 1
    assert sample(metrics, "voice_agent_turn_seconds_sum") == pytest.approx(0.52)
    assert sample(metrics, "voice_agent_turns_total", complete="true") == 1

    assert len(turn_log) == 1
    line = turn_log[0]
    assert line["call_id"] == "call-1" and line["turn"] == 1 and line["complete"] is True
    assert {stage: line[f"{stage}_ms"] for stage in STAGES} == {
        "vad_stop": 200,
        "stt_final": 300,
        "llm_first_token": 350,
        "tts_first_audio": 500,
        "first_audio_out": 520,
    }
    assert line["text"] == (
        "turn_latency call_id=call-1 turn=1 complete=true vad_stop_ms=200 stt_final_ms=300 "
        "llm_first_token_ms=350 tts_first_audio_ms=500 first_audio_out_ms=520 total_ms=520"
    )


async def test_only_the_maker_of_a_frame_counts_for_its_stage() -> None:
    p = Pipeline()
    metrics = AgentMetrics(process=False)
    observer = TurnLatencyObserver(call_id="c", metrics=metrics, log_turns=False)
    events = answered_turn(p, 0)
    # The output transport re-chunks TTS audio into new TTSAudioRawFrames, and a
    # "bot started speaking" could come from elsewhere: neither is the stage.
    events.insert(10, p.push(p.out, audio(), 1400))
    events.insert(10, p.push(p.llm, BotStartedSpeakingFrame(), 1450))
    await feed(observer, events)
    turn = observer.closed_turns[-1]
    assert turn.stages_ms()["tts_first_audio"] == 500
    assert turn.stages_ms()["first_audio_out"] == 520


async def test_a_barge_in_does_not_lend_the_old_answer_to_the_next_turn() -> None:
    p = Pipeline()
    metrics = AgentMetrics(process=False)
    observer = TurnLatencyObserver(call_id="c", metrics=metrics, log_turns=False)
    await feed(observer, answered_turn(p, 0))
    # The bot is still talking when the user speaks again; the old answer's frames keep
    # arriving before and after the new turn's VAD stop.
    await feed(
        observer,
        [
            p.push(p.vad, VADUserStartedSpeakingFrame(), 3000),
            p.push(p.llm, LLMTextFrame(" three"), 3100),
            p.push(p.tts, audio(), 3150),
            p.push(p.out, BotStartedSpeakingFrame(), 3160),
            p.push(p.vad, VADUserStoppedSpeakingFrame(stop_secs=0.2), 4200),
            p.push(p.llm, LLMTextFrame(" o'clock"), 4210),
            p.push(p.tts, audio(), 4220),
            p.push(p.out, BotStartedSpeakingFrame(), 4230),
        ],
    )
    await feed(observer, answered_turn(p, 3000)[5:])  # the new turn's own answer
    second = observer.closed_turns[-1]
    assert second.index == 2
    assert second.stages_ms() == {
        "vad_stop": 200,
        "stt_final": 300,
        "llm_first_token": 350,
        "tts_first_audio": 500,
        "first_audio_out": 520,
    }
    assert sample(metrics, "voice_agent_turns_total", complete="true") == 2
    assert sample(metrics, "voice_agent_turn_seconds_count") == 2


async def test_an_unanswered_turn_is_closed_incomplete_when_the_next_begins(
    turn_log: list[dict[str, Any]],
) -> None:
    p = Pipeline()
    metrics = AgentMetrics(process=False)
    observer = TurnLatencyObserver(call_id="c", metrics=metrics)
    await feed(
        observer,
        [
            p.push(p.vad, VADUserStartedSpeakingFrame(), 0),
            p.push(p.vad, VADUserStoppedSpeakingFrame(stop_secs=0.25), 1000),
            p.push(p.stt, TranscriptionFrame("um", "u", "now"), 1100),
        ],
    )
    await feed(observer, answered_turn(p, 2000))
    first, second = observer.closed_turns
    assert not first.complete and second.complete
    assert first.stages_ms() == {
        "vad_stop": 250,
        "stt_final": 350,
        "llm_first_token": None,
        "tts_first_audio": None,
        "first_audio_out": None,
    }
    assert sample(metrics, "voice_agent_turns_total", complete="false") == 1
    assert sample(metrics, "voice_agent_turns_total", complete="true") == 1
    assert sample(metrics, "voice_agent_turn_seconds_count") == 1
    assert sample(metrics, "voice_agent_turn_stage_seconds_count", stage="stt_final") == 2
    assert sample(metrics, "voice_agent_turn_stage_seconds_count", stage="first_audio_out") == 1
    assert [line["complete"] for line in turn_log] == [False, True]
    assert "first_audio_out_ms=- total_ms=-" in turn_log[0]["text"]


async def test_speech_cut_off_by_the_end_of_the_call_is_logged_at_cleanup(
    turn_log: list[dict[str, Any]],
) -> None:
    p = Pipeline()
    observer = TurnLatencyObserver(call_id="c", metrics=AgentMetrics(process=False))
    await feed(
        observer,
        [
            p.push(p.vad, VADUserStartedSpeakingFrame(), 0),
            p.push(p.vad, VADUserStoppedSpeakingFrame(stop_secs=0.2), 900),
        ],
    )
    assert turn_log == []
    await observer.cleanup()
    assert [(line["turn"], line["complete"]) for line in turn_log] == [(1, False)]


async def test_frames_before_any_speech_are_not_a_turn(turn_log: list[dict[str, Any]]) -> None:
    p = Pipeline()
    metrics = AgentMetrics(process=False)
    observer = TurnLatencyObserver(call_id="c", metrics=metrics)
    # A greeting spoken before the user says anything.
    await feed(
        observer,
        [
            p.push(p.llm, LLMFullResponseStartFrame(), 10),
            p.push(p.llm, LLMTextFrame("Hello"), 20),
            p.push(p.tts, audio(), 100),
            p.push(p.out, BotStartedSpeakingFrame(), 120),
        ],
    )
    await observer.cleanup()
    for stage in STAGES:
        assert sample(metrics, "voice_agent_turn_stage_seconds_count", stage=stage) == 0
    assert turn_log == []


async def test_errors_are_counted_by_the_processor_that_reported_them() -> None:
    p = Pipeline()
    metrics = AgentMetrics(process=False)
    observer = TurnLatencyObserver(call_id="c", metrics=metrics)
    await feed(
        observer,
        [
            p.push(p.tts, ErrorFrame("speech server down", category=ErrorCategory.CONNECTIVITY), 5),
            p.push(p.tts, ErrorFrame("again", category=ErrorCategory.CONNECTIVITY), 6, UP),
            p.push(p.llm, ErrorFrame("no category"), 7, UP),
        ],
    )
    assert sample(metrics, "voice_agent_errors_total", kind="_TTS", category="connectivity") == 2
    assert (
        sample(metrics, "voice_agent_errors_total", kind="FrameProcessor", category="unknown") == 1
    )


async def test_without_metrics_or_logging_the_observer_still_times_turns() -> None:
    observer = TurnLatencyObserver(call_id="c", log_turns=False)
    await feed(observer, answered_turn(Pipeline(), 0))
    assert observer.closed_turns[-1].complete
