"""One scripted phone call through the real server, then ``GET /metrics``.

Real parts on loopback: the offline ASR server (faster-whisper behind vLLM's realtime
protocol), the offline responder, an espeak speech server, our app, a Twilio Media Streams
client speaking espeak audio in real time, and an OTLP/HTTP collector that decodes the
protobuf trace export. The call must leave every turn stage in the histograms (already while
it runs), move the call counters, log a ``turn_latency`` line and export the turn's spans.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
import websockets
from fastapi import FastAPI, Request
from fastapi.responses import Response
from prometheus_client.parser import text_string_to_metric_families

from agent.observability.metrics import STAGES
from tests.agent.transports.stack import (
    async_wait_for,
    running_server,
    stack_settings,
)
from tests.conftest import requires_espeak
from tests.fakes.serving import background
from tests.fakes.speech_server import SpeechServer
from tests.fakes.twilio_caller import TwilioCaller, ulaw_speech

pytestmark = [requires_espeak, pytest.mark.timeout(120)]


def otlp_collector(received: list[Any]) -> FastAPI:
    """An OTLP/HTTP trace receiver: decodes each protobuf export into its spans."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    app = FastAPI()

    @app.post("/v1/traces")
    async def traces(request: Request) -> Response:
        export = ExportTraceServiceRequest()
        export.ParseFromString(await request.body())
        for resource_spans in export.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                received.extend(scope_spans.spans)
        return Response(
            ExportTraceServiceResponse().SerializeToString(),
            media_type="application/x-protobuf",
        )

    return app


def scrape(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def stage_counts(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[str, float]:
    return {
        stage: samples[("voice_agent_turn_stage_seconds_count", (("stage", stage),))]
        for stage in STAGES
    }


async def test_a_call_fills_every_stage_histogram_and_exports_its_turn(
    asr_server_url: str, asr_model_name: str, turn_log: list[dict[str, Any]]
) -> None:
    pytest.importorskip("opentelemetry.sdk", reason="tracing needs the tracing extra")
    spans: list[Any] = []
    with SpeechServer(voice="espeak") as tts, background(otlp_collector(spans)) as otlp:
        settings = stack_settings(asr_url=asr_server_url, asr_model=asr_model_name, tts_url=tts.url)
        settings.observability.otel_enabled = True
        settings.observability.otlp_endpoint = otlp
        with running_server(settings) as (url, app):
            registry = app.state.registry
            async with httpx.AsyncClient(base_url=url) as http:
                before = await http.get("/metrics")
                assert before.status_code == 200
                assert before.headers["content-type"].startswith("text/plain")
                baseline = scrape(before.text)
                assert set(stage_counts(baseline).values()) == {0}

                ws_url = url.replace("http://", "ws://") + "/telephony/twilio/ws"
                async with websockets.connect(ws_url) as ws:
                    caller = TwilioCaller(ws)
                    await caller.start()
                    await caller.silence(0.3)
                    await caller.speak(ulaw_speech("what is the weather like in paris today"))
                    quiet = asyncio.create_task(caller.silence(15))
                    await async_wait_for(
                        lambda: caller.count("media") >= 5, timeout_s=30, what="the bot's answer"
                    )
                    during = scrape((await http.get("/metrics")).text)
                    quiet.cancel()
                    await caller.stop()
                    await asyncio.wait_for(caller.closed.wait(), 10)
                await async_wait_for(
                    lambda: registry.stats.active == 0, timeout_s=10, what="the call to end"
                )
                after = scrape((await http.get("/metrics")).text)
            call_id = registry.recent()[-1].id

    # During the call: every stage of the answered turn is already in the histograms.
    assert all(count >= 1 for count in stage_counts(during).values()), stage_counts(during)
    assert during[("voice_agent_turn_seconds_count", ())] >= 1
    assert during[("voice_agent_active_calls", ())] == 1
    # After it: the call counters moved.
    assert after[("voice_agent_active_calls", ())] == 0
    assert after[("voice_agent_calls_started_total", ())] == 1
    assert after[("voice_agent_calls_ended_total", ())] == 1
    assert after[("voice_agent_turns_total", (("complete", "true"),))] >= 1
    assert after[("voice_agent_turn_seconds_sum", ())] > 0

    answered = [line for line in turn_log if line["call_id"] == call_id and line["complete"]]
    assert answered, turn_log
    assert all(answered[0][f"{stage}_ms"] is not None for stage in STAGES)
    assert answered[0]["text"].startswith(f"turn_latency call_id={call_id} turn=")

    # The server flushed its spans to the collector on shutdown.
    names = [span.name for span in spans]
    assert "voice_agent.call" in names and "voice_agent.turn" in names, names
    assert {"vad", "stt", "llm", "tts", "audio_out"} <= set(names), names
    turn = next(span for span in spans if span.name == "voice_agent.turn")
    call = next(span for span in spans if span.name == "voice_agent.call")
    assert turn.parent_span_id == call.span_id and turn.trace_id == call.trace_id
    attributes = {a.key: a.value for a in turn.attributes}
    assert attributes["call.id"].string_value == call_id
    assert attributes["turn.first_audio_out_ms"].int_value > 0
