"""The bridge's counters, exposed at ``GET /metrics`` in Prometheus text format.

One registry per app (not the global one) so that several bridges in one process, as in
the tests, never share or clash. Label values are fixed sets: nothing a client sends can
create a new time series.
"""

from __future__ import annotations

from typing import Literal

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
)

Direction = Literal["client_to_upstream", "upstream_to_client"]
ErrorKind = Literal[
    "upstream_unavailable",
    "invalid_binary",
    "message_too_large",
    "upstream_abnormal_close",
    "upstream_stalled",
    "client_stalled",
    "internal",
]
Initiator = Literal["client", "upstream", "bridge"]

ERROR_KINDS: tuple[ErrorKind, ...] = (
    "upstream_unavailable",
    "invalid_binary",
    "message_too_large",
    "upstream_abnormal_close",
    "upstream_stalled",
    "client_stalled",
    "internal",
)
DIRECTIONS: tuple[Direction, ...] = ("client_to_upstream", "upstream_to_client")
INITIATORS: tuple[Initiator, ...] = ("client", "upstream", "bridge")


class BridgeMetrics:
    """Sessions, messages and errors; every label value is pre-created so a scrape shows 0s."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.sessions_active = Gauge(
            "voxtral_bridge_sessions_active",
            "Streams open right now (client and vLLM sockets both held).",
            registry=self.registry,
        )
        self.sessions = Counter(
            "voxtral_bridge_sessions",
            "Streams accepted since start.",
            registry=self.registry,
        )
        messages = Counter(
            "voxtral_bridge_messages",
            "Messages relayed, by direction.",
            ["direction"],
            registry=self.registry,
        )
        relayed_bytes = Counter(
            "voxtral_bridge_message_bytes",
            "Payload bytes relayed, by direction (text counted in characters).",
            ["direction"],
            registry=self.registry,
        )
        errors = Counter(
            "voxtral_bridge_errors",
            "Errors, by kind.",
            ["kind"],
            registry=self.registry,
        )
        closes = Counter(
            "voxtral_bridge_closes",
            "Ended streams, by the side that ended them.",
            ["initiator"],
            registry=self.registry,
        )
        self.upstream_healthy = Gauge(
            "voxtral_bridge_upstream_healthy",
            "1 if vLLM's /health answered 200 at the last probe, else 0.",
            registry=self.registry,
        )
        # Children resolved once: the per-message path is a plain method call.
        self.messages = {d: messages.labels(direction=d) for d in DIRECTIONS}
        self.bytes = {d: relayed_bytes.labels(direction=d) for d in DIRECTIONS}
        self.errors = {k: errors.labels(kind=k) for k in ERROR_KINDS}
        self.closes = {i: closes.labels(initiator=i) for i in INITIATORS}

    def relayed(self, direction: Direction, size: int) -> None:
        self.messages[direction].inc()
        self.bytes[direction].inc(size)

    def error(self, kind: ErrorKind) -> None:
        self.errors[kind].inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
