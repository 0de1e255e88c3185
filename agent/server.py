"""The FastAPI app: WebRTC and telephony calls, the playground page, health endpoints.

``create_app(settings)`` wires one :class:`~agent.calls.CallRegistry` (the call limit) into the
transports. Routes:

- ``GET /healthz`` the process is up (with call counts); ``GET /readyz`` STT, LLM and TTS are
  reachable (200, or 503 naming what is down); ``GET /calls`` call counts.
- ``GET /metrics`` Prometheus: per-turn latency by stage, calls, STT reconnects, errors
  (see :mod:`agent.observability`); every call's pipeline gets a turn-latency observer.
- WebRTC: ``POST|PATCH /api/offer``, ``POST /start``, ``POST|PATCH /sessions/{id}/api/offer``
  (see :mod:`agent.transports.webrtc`).
- Twilio: ``POST /telephony/twilio``, ``WS /telephony/twilio/ws``
  (see :mod:`agent.transports.telephony`).
- The offline playground at ``/`` and ``/client`` (files under ``/playground/``).

On shutdown every running call is cancelled and awaited before the app exits.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pipecat.observers.base_observer import BaseObserver
from pipecat.pipeline.worker import PipelineWorker
from pipecat.transports.base_transport import BaseTransport

from agent.calls import CallRegistry
from agent.config import Settings
from agent.health import readiness
from agent.llm.clients import close_shared_clients
from agent.observability.metrics import CONTENT_TYPE, AgentMetrics
from agent.observability.tracing import Tracing, setup_tracing
from agent.observability.turn_latency import TurnLatencyObserver
from agent.transports import TaskFactory, build_voice_agent
from agent.transports.telephony import TelephonyCalls
from agent.transports.webrtc import WebRTCCalls

PLAYGROUND_DIR = Path(__file__).resolve().parent / "playground"


def create_app(settings: Settings, *, task_factory: TaskFactory | None = None) -> FastAPI:
    """Build the server. ``task_factory`` replaces the voice-agent pipeline (tests, demos)."""
    registry = CallRegistry(max_calls=settings.server.max_calls)
    metrics = AgentMetrics(calls=registry)
    tracing = setup_tracing(settings.observability)
    factory = _Observed(task_factory or build_voice_agent, metrics=metrics, tracing=tracing)
    webrtc = WebRTCCalls(settings=settings, registry=registry, task_factory=factory)
    telephony = TelephonyCalls(settings=settings, registry=registry, task_factory=factory)

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


class _Observed:
    """Adds the turn-latency observer (metrics, log line, trace) to every call's pipeline."""

    def __init__(
        self, factory: TaskFactory, *, metrics: AgentMetrics, tracing: Tracing | None
    ) -> None:
        self._factory = factory
        self._metrics = metrics
        self._tracing = tracing

    def __call__(
        self,
        transport: BaseTransport,
        settings: Settings,
        *,
        call_id: str,
        observers: list[BaseObserver] | None = None,
    ) -> PipelineWorker:
        latency = TurnLatencyObserver(
            call_id=call_id,
            metrics=self._metrics,
            log_turns=settings.observability.log_turns,
            trace=self._tracing.call(call_id) if self._tracing else None,
        )
        return self._factory(
            transport, settings, call_id=call_id, observers=[*(observers or []), latency]
        )
