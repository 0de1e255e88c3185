"""Seeing what the server does: per-turn latency, Prometheus metrics, optional traces.

- :mod:`~agent.observability.turn_latency`: a per-call observer that times every turn.
- :mod:`~agent.observability.metrics`: the Prometheus registry served at ``GET /metrics``.
- :mod:`~agent.observability.tracing`: OpenTelemetry spans per call and turn (optional).
"""

from agent.observability.metrics import STAGES, AgentMetrics
from agent.observability.turn_latency import TurnLatencyObserver, TurnTimings

__all__ = ["STAGES", "AgentMetrics", "TurnLatencyObserver", "TurnTimings"]
