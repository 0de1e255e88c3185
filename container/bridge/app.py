"""The SageMaker ↔ vLLM bridge: a FastAPI app and the uvicorn settings it must run with.

SageMaker's bidirectional-streaming contract (port 8080): ``GET``/``POST /ping`` answers 200
when the container can serve, and ``WS /invocations-bidirectional-stream`` carries one caller's
stream. vLLM serves the realtime protocol on ``/v1/realtime`` on a loopback port; this app
relays between the two (see :mod:`.relay`) and reports its counters at ``GET /metrics``.

Run it with ``python -m bridge.app`` (the container) or ``python -m container.bridge.app``
(a checkout): :func:`main` reads :class:`~.settings.BridgeSettings` from the environment and
starts uvicorn with :func:`uvicorn_config`, which the tests use too.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn
from fastapi import FastAPI, Response, WebSocket

from .health import HealthProbe
from .logs import LOGGER_NAME, log_config, quiet_client_faults
from .metrics import BridgeMetrics
from .relay import RelaySession
from .settings import STREAM_PATH, BridgeSettings, SettingsError


def create_app(settings: BridgeSettings | None = None) -> FastAPI:
    """Build the bridge for ``settings`` (default: from the environment)."""
    settings = settings or BridgeSettings.from_env()
    quiet_client_faults()
    metrics = BridgeMetrics()
    logger = logging.getLogger(LOGGER_NAME)
    probe: HealthProbe | None = None

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        nonlocal probe
        probe = HealthProbe(
            url=settings.health_url,
            timeout_s=settings.health_timeout_s,
            cache_s=settings.health_cache_s,
        )
        logger.info(
            "bridge.started",
            extra={
                "fields": {
                    "upstream": settings.upstream_url,
                    "health": settings.health_url,
                    "max_message_bytes": settings.max_message_bytes,
                }
            },
        )
        try:
            yield
        finally:
            await probe.aclose()

    app = FastAPI(title="Voxtral SageMaker bridge", lifespan=lifespan, docs_url=None)
    app.state.settings = settings
    app.state.metrics = metrics

    @app.api_route("/ping", methods=["GET", "POST"])
    async def ping() -> Response:
        """200 when vLLM's ``/health`` answers 200, else 503 (SageMaker stops routing)."""
        assert probe is not None, "lifespan not started"
        healthy = await probe.healthy()
        metrics.upstream_healthy.set(1 if healthy else 0)
        if healthy:
            return Response("ok\n", media_type="text/plain")
        return Response(
            f"speech server not ready: {probe.last_error}\n",
            status_code=503,
            media_type="text/plain",
        )

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        return Response(metrics.render(), media_type=metrics.content_type)

    @app.websocket(STREAM_PATH)
    async def stream(websocket: WebSocket) -> None:
        await RelaySession(
            client=websocket, settings=settings, metrics=metrics, logger=logger
        ).run()

    return app


def uvicorn_config(
    app: FastAPI, settings: BridgeSettings, *, configure_logging: bool = True
) -> uvicorn.Config:
    """uvicorn as the bridge needs it.

    - ``websockets-sansio``: pauses reading a client until the app takes its message, so a
      client can't queue unboundedly; it answers pings at the protocol layer.
    - ``ws_max_size`` at twice our limit: messages between the two get an ``error`` event.
    - No keepalive pings of our own by default: SageMaker pings every 60 s and closes the
      stream itself after missed pongs (set ``BRIDGE_CLIENT_PING_INTERVAL_S`` to add ours).
    - No per-message deflate by default: base64 audio barely compresses and deflate was a
      third of the relay's CPU when measured.
    """
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        ws="websockets-sansio",
        ws_max_size=settings.hard_message_bytes,
        ws_ping_interval=settings.client_ping_interval_s,
        ws_ping_timeout=settings.client_ping_interval_s,
        ws_per_message_deflate=settings.per_message_deflate,
        log_config=log_config(settings.log_level) if configure_logging else None,
        log_level=settings.log_level,
        access_log=False,  # SageMaker pings constantly; streams are logged by the relay
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=5,
    )


def main() -> int:
    """Serve the bridge with settings from the environment; 2 on a bad setting."""
    try:
        settings = BridgeSettings.from_env()
    except SettingsError as exc:
        print(f"bridge: {exc}", file=sys.stderr)
        return 2
    uvicorn.Server(uvicorn_config(create_app(settings), settings)).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
