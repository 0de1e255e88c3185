"""The FastAPI app: WebRTC and telephony calls, the playground page, health endpoints.

``create_app(settings)`` wires one :class:`~agent.calls.CallRegistry` (the call limit) into the
transports. Routes:

- ``GET /healthz`` the process is up (with call counts); ``GET /readyz`` STT, LLM and TTS are
  reachable (200, or 503 naming what is down; 503 ``draining`` or ``full`` at
  ``server.max_calls``, so a load balancer sends new calls elsewhere); ``GET /calls`` call counts.
- ``GET /calls/{id}`` one call's record (turns, latency stages, why it ended), running or
  among the last 50 ended (Bearer ``server.api_token``; off without one). With
  ``records.directory`` set, every ended call's record is also appended to that day's JSON
  Lines file (:mod:`agent.observability.record_sink`), and with ``records.recording`` each
  call is recorded as a WAV (:mod:`agent.observability.call_recording`).
- ``POST /calls/outbound`` ``{"to": "+1555…", "from": "+1555…"}`` places a phone call through
  Twilio (same Bearer token; see :mod:`agent.transports.outbound`); with
  ``"interpreter_session"`` and ``"party"``, the callee joins that interpreted session.
- ``GET /metrics`` Prometheus: per-turn latency by stage, calls, STT reconnects, errors
  (see :mod:`agent.observability`); every call's pipeline gets a turn-latency observer.
- Interpreted sessions (two calls, each party hearing the other in its own language):
  ``POST /interpreter/sessions``, ``GET /interpreter/sessions/{id}`` (same Bearer token;
  :mod:`agent.interpreter`); a call joins one through its WebRTC offer's ``request_data``, its
  Twilio or Telnyx webhook's query, or ``POST /calls/outbound``.
- WebRTC: ``POST|PATCH /api/offer``, ``POST /start``, ``POST|PATCH /sessions/{id}/api/offer``
  (see :mod:`agent.transports.webrtc`).
- Twilio: ``POST /telephony/twilio``, ``WS /telephony/twilio/ws``
  (see :mod:`agent.transports.telephony`); Telnyx, with ``telnyx.public_key`` set:
  ``POST /telephony/telnyx``, ``WS /telephony/telnyx/ws`` (:mod:`agent.transports.telnyx`).
- Call analytics, with ``analytics.enabled``: ``POST /analytics/{twilio,telnyx}``, ``WS
  /analytics/{twilio,telnyx}/ws`` (:mod:`agent.transports.listen_only`), the live view and
  record search under ``/analytics`` (:mod:`agent.analytics.operator`).
- The offline playground at ``/`` and ``/client`` (files under ``/playground/``).

It is the only composer: it builds each call's worker from the pipeline factory
(``pipelines.voice_agent``, or ``pipelines.translation`` with ``translation.enabled``, unless a
test passes another) and attaches every observer there,
inline (:mod:`agent.fastpath`): its turn latency, its record, its idle watch (and its
recorder).

Draining (``voice-agent serve`` on SIGTERM: :meth:`CallRegistry.drain`): ``/readyz`` answers
503 at once, new calls are refused, calls in progress go on for up to
``server.drain_timeout_s`` and are then closed (1001 "going away"). On shutdown every running
call is cancelled and awaited before the app exits.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

from fastapi import Body, FastAPI, Header, HTTPException, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from loguru import logger
from pipecat.observers.base_observer import BaseObserver
from pipecat.pipeline.worker import PipelineWorker
from pipecat.transports.base_transport import BaseTransport
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from agent.analytics import redaction
from agent.analytics.operator import operator_router
from agent.analytics.post_call import PostCallAnalysis
from agent.analytics.store import AnalyticsCalls
from agent.calls import Call, CallLimitReached, CallRegistry
from agent.config import Settings
from agent.credentials import same_secret
from agent.fastpath.idle_watch import IdleCallWatch
from agent.fastpath.inline_observers import observe_inline
from agent.health import readiness
from agent.interpreter.notices import NOTICE_LANGUAGE, NoticeTranslations
from agent.interpreter.routes import interpreter_router
from agent.interpreter.sessions import InterpreterError, InterpreterSessions
from agent.llm.clients import close_shared_clients
from agent.llm.translation import Translator
from agent.memory import trim_when_idle
from agent.observability.answer_outcomes import count_turn_outcomes
from agent.observability.call_record import CallRecordObserver
from agent.observability.call_recording import CallRecordings
from agent.observability.client_latency import TurnLatencyToClient
from agent.observability.metrics import CONTENT_TYPE, AgentMetrics
from agent.observability.record_sink import RecordSink
from agent.observability.tracing import Tracing, setup_tracing
from agent.observability.turn_latency import TurnLatencyObserver
from agent.stt.channels import bearer_auth
from agent.transports.listen_only import ListenOnlyStreams
from agent.transports.outbound import OutboundCalls, OutboundUnavailable
from agent.transports.telephony import TelephonyCalls, http_base_url
from agent.transports.traits import traits_of
from agent.transports.twilio_rest import TwilioRESTError
from agent.transports.webrtc import WebRTCCalls
from pipelines.analytics import track_transcription
from pipelines.interpreter import build_interpreted_task
from pipelines.services import translator
from pipelines.translation import build_translation_task
from pipelines.voice_agent import build_voice_agent_task

PLAYGROUND_DIR = Path(__file__).resolve().parent / "playground"


class PipelineFactory(Protocol):
    """Builds one call's bare worker (e.g. :func:`pipelines.voice_agent.build_voice_agent_task`)."""

    def __call__(
        self, transport: BaseTransport, settings: Settings, *, call_id: str
    ) -> PipelineWorker: ...


def create_app(settings: Settings, *, pipeline: PipelineFactory | None = None) -> FastAPI:
    """Build the server. ``pipeline`` replaces the voice agent's (tests, demos)."""
    registry = CallRegistry(max_calls=settings.server.max_calls)
    metrics = AgentMetrics(calls=registry)
    tracing = setup_tracing(settings.observability)
    records = settings.records
    sink = None
    if records.directory is not None:
        sink = RecordSink(
            records.directory, on_error=lambda: metrics.count_error("call_record", "disk")
        )
        registry.when_ended(sink.write)
    recordings = (
        CallRecordings(records.directory)
        if records.recording and records.directory is not None
        else None
    )
    interpreter = InterpreterSessions(notices=_notice_translations(settings))
    registry.when_ended(interpreter.leave)
    registry.when_ended(trim_when_idle(lambda: registry.stats.active == 0))
    factory = ObservedCalls(
        pipeline or default_pipeline(settings),
        settings=settings,
        metrics=metrics,
        tracing=tracing,
        recordings=recordings,
        interpreter=interpreter,
    )
    webrtc = WebRTCCalls(
        settings=settings, registry=registry, task_factory=factory, interpreter=interpreter
    )
    outbound = OutboundCalls(settings=settings, registry=registry, interpreter=interpreter)
    telephony = TelephonyCalls(
        settings=settings,
        registry=registry,
        task_factory=factory,
        count_bad_input=metrics.count_error,
        reserved=outbound,
        interpreter=interpreter,
    )
    analytics = _analytics(settings, registry, metrics, sink)
    if settings.transfer.enabled and not settings.twilio.rest_enabled:
        logger.warning(
            "transfer.enabled, but the transfer_call tool is not offered: it needs Twilio's "
            "REST API (set twilio.account_sid and twilio.auth_token)"
        )

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await registry.shutdown()
            if analytics is not None:
                await analytics.close()
            if recordings is not None:
                await recordings.close()
            if sink is not None:
                await sink.close()
            await webrtc.close()
            await close_shared_clients()
            if tracing is not None:
                tracing.shutdown()

    app = FastAPI(title="voice-agent", lifespan=lifespan)
    if settings.server.trusted_proxies:
        # Here, not in uvicorn's config: whoever serves the app (voice-agent serve, a test,
        # another ASGI server) believes X-Forwarded-For from these peers and no others.
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=settings.server.trusted_proxies)
    app.state.settings = settings
    app.state.registry = registry
    app.state.metrics = metrics
    app.state.webrtc = webrtc
    app.include_router(webrtc.router)
    app.include_router(telephony.router)
    app.include_router(outbound.router)
    app.state.interpreter = interpreter
    app.include_router(
        interpreter_router(
            interpreter,
            settings=settings,
            check=lambda authorization: _check_operator(settings, authorization),
            base_url=lambda request: http_base_url(request, settings),
        )
    )
    if analytics is not None:
        app.state.analytics = analytics
        app.include_router(analytics.streams.router)
        app.include_router(
            operator_router(
                calls=analytics.calls,
                registry=registry,
                check=lambda authorization: _check_operator(settings, authorization),
                summary_due=analytics.summary_due,
            )
        )

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "calls": asdict(registry.stats)}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        if registry.draining:  # at once, without probing: no new call may come here
            return JSONResponse({"status": "draining"}, status_code=503)
        if not registry.has_capacity:  # full: a load balancer sends the next call elsewhere
            return JSONResponse({"status": "full", "calls": asdict(registry.stats)}, 503)
        components = await readiness(settings)
        down = [name for name, status in components.items() if not status.ok]
        body: dict[str, Any] = {
            "status": "ready" if not down else "unavailable",
            "components": {name: status.as_dict() for name, status in components.items()},
        }
        if down:
            body["down"] = down
        return JSONResponse(body, status_code=503 if down else 200)

    @app.get("/calls")
    async def calls() -> dict[str, Any]:
        return asdict(registry.stats)

    @app.get("/calls/{call_id}")
    async def call_record(
        call_id: str, authorization: str | None = Header(default=None)
    ) -> dict[str, Any]:
        _check_operator(settings, authorization)
        call = registry.find(call_id)
        if call is None:
            raise HTTPException(404, f"no running or recent call {call_id!r}")
        return call.as_record()

    @app.post("/calls/outbound", status_code=201)
    async def call_out(
        request: Request,
        to: str = Body(embed=True),
        from_: str | None = Body(default=None, embed=True, alias="from"),
        interpreter_session: str | None = Body(default=None, embed=True),
        party: str | None = Body(default=None, embed=True),
        authorization: str | None = Header(default=None),
    ) -> dict[str, Any]:
        _check_operator(settings, authorization)
        try:
            call = await outbound.place(
                to=to,
                from_=from_,
                base_url=http_base_url(request, settings),
                interpreter_session=interpreter_session,
                party=party,
            )
        except OutboundUnavailable as exc:
            raise HTTPException(400, str(exc)) from None
        except InterpreterError as exc:
            raise HTTPException(exc.status, str(exc)) from None
        except CallLimitReached as exc:
            raise HTTPException(503, str(exc), headers={"Retry-After": "5"}) from None
        except TwilioRESTError as exc:
            raise HTTPException(502, f"Twilio did not place the call: {exc}") from None
        return call.as_record()

    @app.get("/metrics", include_in_schema=False)
    async def prometheus_metrics() -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE)

    @app.get("/", include_in_schema=False)
    @app.get("/client", include_in_schema=False)
    @app.get("/client/", include_in_schema=False)
    async def playground() -> FileResponse:
        return FileResponse(PLAYGROUND_DIR / "index.html", headers={"Cache-Control": "no-cache"})

    app.mount("/playground", StaticFiles(directory=PLAYGROUND_DIR), name="playground")
    return app


def _notice_translations(settings: Settings) -> NoticeTranslations | None:
    """The interpreted sessions' notices in each party's language, by the session's own
    translating model (none without an LLM: sessions need one anyway)."""
    if not settings.llm.base_url:
        return None

    def translator_into(language: str) -> Translator:
        languages = {"source_language": NOTICE_LANGUAGE, "target_language": language}
        return translator(settings.translation.model_copy(update=languages), settings.llm)

    return NoticeTranslations(translator_into)


def default_pipeline(settings: Settings) -> PipelineFactory:
    """Every call's pipeline: the voice agent, or with ``translation.enabled`` the
    translation call (:mod:`pipelines.translation`)."""
    if settings.translation.enabled:
        return build_translation_task
    return build_voice_agent_task


class _Analytics:
    """The listen-only streams, their calls and the post-call step, built together."""

    def __init__(
        self,
        settings: Settings,
        registry: CallRegistry,
        metrics: AgentMetrics,
        sink: RecordSink | None,
    ) -> None:
        self._sink = sink
        self.post_call = (
            PostCallAnalysis(settings.llm, settings.analytics, on_done=self._analysed)
            if settings.llm.base_url
            else None
        )
        self.calls = AnalyticsCalls(
            redacting=settings.analytics.redact,
            history=settings.analytics.history,
            on_ended=self.post_call.submit if self.post_call else None,
        )
        self.streams = ListenOnlyStreams(
            settings=settings,
            registry=registry,
            calls=self.calls,
            transcriber=track_transcription(settings.stt),
            count_bad_input=metrics.count_error,
        )

    def summary_due(self, call: Call) -> bool:
        return self.post_call is not None and bool(call.utterances)

    def _analysed(self, call: Call) -> None:
        conversation = self.calls.find(call.id)
        if conversation is not None and call.analysis is not None:
            conversation.analysis_ready(call.analysis)
        if self._sink is not None:
            self._sink.write(call)  # the complete record: the last line for this call id

    async def close(self) -> None:
        if self.post_call is not None:
            await self.post_call.close()


def _analytics(
    settings: Settings, registry: CallRegistry, metrics: AgentMetrics, sink: RecordSink | None
) -> _Analytics | None:
    return _Analytics(settings, registry, metrics, sink) if settings.analytics.enabled else None


def _check_operator(settings: Settings, authorization: str | None) -> None:
    token = settings.server.api_token
    if not token:
        raise HTTPException(
            404, "the operator API is off: set server.api_token (VOICE_AGENT_SERVER__API_TOKEN)"
        )
    expected = (bearer_auth(token) or {}).get("Authorization", "")
    if not authorization or not same_secret(authorization, expected):
        raise HTTPException(401, "send Authorization: Bearer <server.api_token>")


class ObservedCalls:
    """The transports' :class:`~agent.worker.CallTaskFactory`: the call's pipeline with every
    observer attached, inline: turn latency (metrics, log line, trace, and an RTVI message to
    a client that speaks RTVI), the call's record, idle watch, and the recorder when
    recording is on."""

    def __init__(
        self,
        pipeline: PipelineFactory,
        *,
        settings: Settings,
        metrics: AgentMetrics,
        tracing: Tracing | None,
        recordings: CallRecordings | None = None,
        interpreter: InterpreterSessions | None = None,
    ) -> None:
        self._pipeline = pipeline
        self._interpreter = interpreter
        self._settings = settings
        self._metrics = metrics
        self._tracing = tracing
        self._recordings = recordings

    def __call__(self, transport: BaseTransport, call: Call) -> PipelineWorker:
        party = self._interpreter.party_of(call) if self._interpreter else None
        if party is not None:  # one side of an interpreted session
            worker = build_interpreted_task(transport, self._settings, call_id=call.id, party=party)
        else:
            worker = self._pipeline(transport, self._settings, call_id=call.id)
        latency = TurnLatencyObserver(
            call_id=call.id,
            metrics=self._metrics,
            log_turns=self._settings.observability.log_turns,
            trace=self._tracing.call(call.id) if self._tracing else None,
            on_answer=TurnLatencyToClient(worker) if traits_of(transport).speaks_rtvi else None,
        )
        idle = IdleCallWatch(worker, on_timeout=lambda: call.end_because("idle"))
        redact = redaction.redact if self._settings.records.redact else None
        record = CallRecordObserver(call, latency=latency, redact=redact)
        observers: list[BaseObserver] = [latency, record, idle]
        if self._recordings is not None:
            observers.append(self._recordings.recorder(call))
        observe_inline(worker, observers)
        count_turn_outcomes(worker, self._metrics)
        return worker
