"""The FastAPI app: WebRTC and telephony calls, the playground page, health endpoints.

``create_app(settings)`` wires one :class:`~agent.calls.CallRegistry` (the call limit) into the
transports. Routes:

- ``GET /healthz`` the process is up (with call counts); ``GET /readyz`` STT, LLM and TTS are
  reachable (200, or 503 naming what is down); ``GET /calls`` call counts.
- ``GET /calls/{id}`` one call with its transcript, running or recently ended (Bearer
  ``server.api_token``; off without one).
- ``GET /metrics`` Prometheus: per-turn latency by stage, calls, STT reconnects, errors
  (see :mod:`agent.observability`); every call's pipeline gets a turn-latency observer.
- WebRTC: ``POST|PATCH /api/offer``, ``POST /start``, ``POST|PATCH /sessions/{id}/api/offer``
  (see :mod:`agent.transports.webrtc`).
- Twilio: ``POST /telephony/twilio``, ``WS /telephony/twilio/ws``
  (see :mod:`agent.transports.telephony`).
- The offline playground at ``/`` and ``/client`` (files under ``/playground/``).

It is the only composer: it builds each call's worker from the pipeline factory
(``pipelines.voice_agent`` unless a test passes another) and attaches every observer there,
inline (:mod:`agent.fastpath`): the call's transcript, its turn latency, its idle watch.

Draining (``voice-agent serve`` on SIGTERM: :meth:`CallRegistry.drain`): ``/readyz`` answers
503 at once, new calls are refused, calls in progress go on for up to
``server.drain_timeout_s`` and are then closed (1001 "going away"). On shutdown every running
call is cancelled and awaited before the app exits.
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

from fastapi import FastAPI, Header, HTTPException
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pipecat.pipeline.worker import PipelineWorker
from pipecat.transports.base_transport import BaseTransport

from agent.calls import Call, CallRegistry
from agent.config import Settings
from agent.fastpath.idle_watch import IdleCallWatch
from agent.fastpath.inline_observers import observe_inline
from agent.health import readiness
from agent.llm.clients import close_shared_clients
from agent.observability.answer_outcomes import count_answer_outcomes
from agent.observability.metrics import CONTENT_TYPE, AgentMetrics
from agent.observability.tracing import Tracing, setup_tracing
from agent.observability.transcript import CallTranscriptObserver
from agent.observability.turn_latency import TurnLatencyObserver
from agent.stt.channels import bearer_auth
from agent.transports.telephony import TelephonyCalls
from agent.transports.webrtc import WebRTCCalls
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
    factory = ObservedCalls(
        pipeline or build_voice_agent_task, settings=settings, metrics=metrics, tracing=tracing
    )
    webrtc = WebRTCCalls(settings=settings, registry=registry, task_factory=factory)
    telephony = TelephonyCalls(
        settings=settings,
        registry=registry,
        task_factory=factory,
        count_bad_input=metrics.count_error,
    )

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await registry.shutdown()
            await webrtc.close()
            await close_shared_clients()
            if tracing is not None:
                tracing.shutdown()

    app = FastAPI(title="voice-agent", lifespan=lifespan)
    app.state.settings = settings
    app.state.registry = registry
    app.state.metrics = metrics
    app.state.webrtc = webrtc
    app.include_router(webrtc.router)
    app.include_router(telephony.router)

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "calls": asdict(registry.stats)}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        if registry.draining:  # at once, without probing: no new call may come here
            return JSONResponse({"status": "draining"}, status_code=503)
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


def _check_operator(settings: Settings, authorization: str | None) -> None:
    token = settings.server.api_token
    if not token:
        raise HTTPException(
            404, "the operator API is off: set server.api_token (VOICE_AGENT_SERVER__API_TOKEN)"
        )
    expected = (bearer_auth(token) or {}).get("Authorization", "")
    if not authorization or not hmac.compare_digest(authorization, expected):
        raise HTTPException(401, "send Authorization: Bearer <server.api_token>")


class ObservedCalls:
    """The transports' :class:`~agent.worker.CallTaskFactory`: the call's pipeline with every
    observer attached, inline: transcript, turn latency (metrics, log line, trace), idle watch."""

    def __init__(
        self,
        pipeline: PipelineFactory,
        *,
        settings: Settings,
        metrics: AgentMetrics,
        tracing: Tracing | None,
    ) -> None:
        self._pipeline = pipeline
        self._settings = settings
        self._metrics = metrics
        self._tracing = tracing

    def __call__(self, transport: BaseTransport, call: Call) -> PipelineWorker:
        worker = self._pipeline(transport, self._settings, call_id=call.id)
        latency = TurnLatencyObserver(
            call_id=call.id,
            metrics=self._metrics,
            log_turns=self._settings.observability.log_turns,
            trace=self._tracing.call(call.id) if self._tracing else None,
        )
        observe_inline(worker, [CallTranscriptObserver(call), latency, IdleCallWatch(worker)])
        count_answer_outcomes(worker, self._metrics)
        return worker
