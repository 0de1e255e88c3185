"""Optional OpenTelemetry traces of every call's turns, exported over OTLP/HTTP.

With ``observability.otel_enabled`` each call is one trace: a ``voice_agent.call`` span, a
``voice_agent.turn`` child per user turn (end of speech → first audio out, every stage in ms
as attributes) and under it one span per stage interval (``vad``, ``stt``, ``llm``, ``tts``,
``audio_out``), so a slow turn shows where its time went in any trace viewer.

OpenTelemetry is an optional dependency (the ``tracing`` extra); switching tracing on
without it fails at start with :class:`TracingUnavailable`, which says what to install.
The tracer provider is this app's own (and becomes the global one if none is set yet, so
Pipecat's own service spans, when a worker has ``enable_tracing``, go to the same place).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from loguru import logger

from agent.config import ConfigError, ObservabilitySettings
from agent.observability.metrics import STAGES

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer

    from agent.observability.turn_latency import TurnTimings

INSTALL_HINT: Final = (
    "pip install 'voice-agent[tracing]' (opentelemetry-sdk and "
    "opentelemetry-exporter-otlp-proto-http), or switch tracing off with "
    "VOICE_AGENT_OBSERVABILITY__OTEL_ENABLED=false"
)

_INTERVALS: Final = (
    ("vad", "speech_end", "vad_stop"),
    ("stt", "vad_stop", "stt_final"),
    ("llm", "stt_final", "llm_first_token"),
    ("tts", "llm_first_token", "tts_first_audio"),
    ("audio_out", "tts_first_audio", "first_audio_out"),
)
"""Each stage span: its name and the two moments it runs between."""


class TracingUnavailable(ConfigError):
    """Tracing is switched on but the OpenTelemetry packages are not installed."""


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL for a collector address (``/v1/traces`` added to a bare host)."""
    stripped = endpoint.rstrip("/")
    if stripped.endswith("/v1/traces"):
        return stripped
    return stripped + "/v1/traces"


class Tracing:
    """The app's tracer: hands each call a :class:`CallTrace`; flushes on shutdown."""

    def __init__(self, provider: TracerProvider) -> None:
        self._provider = provider
        self.tracer: Tracer = provider.get_tracer("voice_agent")

    def call(self, call_id: str) -> CallTrace:
        return CallTrace(self.tracer, call_id)

    def shutdown(self) -> None:
        """Export what is still buffered and stop (the app's lifespan calls this)."""
        self._provider.shutdown()


def check_tracing(settings: ObservabilitySettings) -> None:
    """Fail fast, before anything starts, when tracing is on and cannot work.

    Raises:
        TracingUnavailable: tracing is on and OpenTelemetry is not installed.
    """
    if not settings.otel_enabled:
        return
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError as exc:
        raise _unavailable(exc) from None


def _unavailable(exc: ImportError) -> TracingUnavailable:
    return TracingUnavailable(
        f"observability.otel_enabled is set but OpenTelemetry is not installed "
        f"(cannot import {exc.name or exc}): {INSTALL_HINT}"
    )


def setup_tracing(
    settings: ObservabilitySettings,
    *,
    service_name: str = "voice-agent",
    exporter: SpanExporter | None = None,
) -> Tracing | None:
    """The app's :class:`Tracing`, or ``None`` when ``otel_enabled`` is off.

    Args:
        exporter: Where spans go; by default OTLP/HTTP to ``settings.otlp_endpoint``.

    Raises:
        TracingUnavailable: tracing is on and OpenTelemetry is not installed.
    """
    if not settings.otel_enabled:
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            endpoint = settings.otlp_endpoint
            exporter = OTLPSpanExporter(endpoint=traces_url(endpoint) if endpoint else None)
    except ImportError as exc:
        raise _unavailable(exc) from None
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    if type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider":  # none set yet
        trace.set_tracer_provider(provider)
    logger.info(f"OpenTelemetry traces go to {settings.otlp_endpoint or 'the OTLP default'}")
    return Tracing(provider)


class CallTrace:
    """One call's trace: the call span, opened now, and a span per closed turn under it."""

    def __init__(self, tracer: Tracer, call_id: str) -> None:
        self._tracer = tracer
        self._call_id = call_id
        self._span: Span = tracer.start_span("voice_agent.call", attributes={"call.id": call_id})
        self._ended = False

    def turn(self, timings: TurnTimings, *, epoch_offset_ns: int) -> None:
        """Record a closed turn; pipeline-clock times + ``epoch_offset_ns`` = Unix time (ns)."""
        from opentelemetry import trace

        moments = {
            name: at + epoch_offset_ns
            for name in ("speech_end", *STAGES)
            if (at := getattr(timings, name)) is not None
        }
        if "speech_end" not in moments:
            return
        attributes: dict[str, Any] = {
            "call.id": self._call_id,
            "turn.index": timings.index,
            "turn.complete": timings.complete,
        }
        for stage, ms in timings.stages_ms().items():
            if ms is not None:
                attributes[f"turn.{stage}_ms"] = ms
        parent = trace.set_span_in_context(self._span)
        span = self._tracer.start_span(
            "voice_agent.turn",
            context=parent,
            start_time=moments["speech_end"],
            attributes=attributes,
        )
        inside = trace.set_span_in_context(span)
        for name, start, end in _INTERVALS:
            if start in moments and end in moments:
                self._tracer.start_span(name, context=inside, start_time=moments[start]).end(
                    end_time=moments[end]
                )
        span.end(end_time=max(moments.values()))

    def end(self) -> None:
        if not self._ended:
            self._ended = True
            self._span.end()
