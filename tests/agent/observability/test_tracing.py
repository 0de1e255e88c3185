"""OpenTelemetry: off by default, a clear start-up error without the packages, and one span
per call, per turn and per stage interval, with the pipeline clock mapped to Unix time."""

from __future__ import annotations

import sys

import pytest
from pipecat.clocks.system_clock import SystemClock
from pipecat.frames.frames import VADUserStartedSpeakingFrame

from agent.config import ConfigError, ObservabilitySettings, load_settings
from agent.observability.tracing import (
    TracingUnavailable,
    check_tracing,
    setup_tracing,
    traces_url,
)
from agent.observability.turn_latency import TurnLatencyObserver
from agent.server import create_app
from tests.agent.observability.synthetic import MS, Pipeline, answered_turn, feed

pytest.importorskip("opentelemetry.sdk", reason="tracing needs the tracing extra")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)


def test_tracing_is_off_by_default() -> None:
    assert setup_tracing(ObservabilitySettings()) is None
    check_tracing(ObservabilitySettings())  # nothing to check
    check_tracing(ObservabilitySettings(otel_enabled=True))  # installed here
    assert load_settings("default").observability.otel_enabled is False


def test_switching_tracing_on_without_opentelemetry_fails_at_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    settings = load_settings("default", overrides={"observability": {"otel_enabled": True}})
    with pytest.raises(TracingUnavailable, match=r"voice-agent\[tracing\]"):
        check_tracing(settings.observability)
    with pytest.raises(TracingUnavailable) as raised:
        create_app(settings)
    assert isinstance(raised.value, ConfigError)
    assert "voice-agent[tracing]" in str(raised.value)
    assert "VOICE_AGENT_OBSERVABILITY__OTEL_ENABLED=false" in str(raised.value)


def test_a_non_http_otlp_endpoint_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"observability\.otlp_endpoint"):
        load_settings("default", overrides={"observability": {"otlp_endpoint": "grpc://x:4317"}})


def test_the_traces_path_is_added_once() -> None:
    assert traces_url("http://collector:4318") == "http://collector:4318/v1/traces"
    assert traces_url("http://collector:4318/") == "http://collector:4318/v1/traces"
    assert traces_url("http://c:4318/v1/traces") == "http://c:4318/v1/traces"


async def test_a_turn_becomes_a_span_with_one_child_per_stage() -> None:
    exporter = InMemorySpanExporter()
    tracing = setup_tracing(ObservabilitySettings(otel_enabled=True), exporter=exporter)
    assert tracing is not None
    p = Pipeline()
    clock = SystemClock()
    clock.start()
    p.vad.get_clock = lambda: clock  # type: ignore[method-assign]  # as if set up in a pipeline
    observer = TurnLatencyObserver(call_id="call-7", log_turns=False, trace=tracing.call("call-7"))
    await feed(observer, answered_turn(p, 0))
    await feed(observer, [p.push(p.vad, VADUserStartedSpeakingFrame(), 9000)])  # never ends
    await observer.cleanup()
    tracing.shutdown()

    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert set(spans) == {"voice_agent.call", "voice_agent.turn", "vad", "stt", "llm", "tts"} | {
        "audio_out"
    }
    call, turn = spans["voice_agent.call"], spans["voice_agent.turn"]
    assert turn.parent is not None and turn.parent.span_id == call.context.span_id
    for stage in ("vad", "stt", "llm", "tts", "audio_out"):
        parent = spans[stage].parent
        assert parent is not None and parent.span_id == turn.context.span_id
    assert turn.attributes is not None
    assert turn.attributes["call.id"] == "call-7"
    assert turn.attributes["turn.first_audio_out_ms"] == 520
    assert turn.start_time is not None and turn.end_time is not None
    assert turn.end_time - turn.start_time == 520 * MS
    durations = {
        stage: (spans[stage].end_time or 0) - (spans[stage].start_time or 0)
        for stage in ("vad", "stt", "llm", "tts", "audio_out")
    }
    assert durations == {
        "vad": 200 * MS,
        "stt": 100 * MS,
        "llm": 50 * MS,
        "tts": 150 * MS,
        "audio_out": 20 * MS,
    }
