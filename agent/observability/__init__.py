"""Seeing what the server does: per-turn latency, Prometheus metrics, optional traces.

- :mod:`~agent.observability.turn_latency`: a per-call observer that times every turn.
- :mod:`~agent.observability.metrics`: the Prometheus registry served at ``GET /metrics``.
- :mod:`~agent.observability.tracing`: OpenTelemetry spans per call and turn (optional).
- :mod:`~agent.observability.call_record`: each call's turns, played text and end reason;
  :mod:`~agent.observability.record_sink` writes them as JSON Lines,
  :mod:`~agent.observability.call_recording` records the call as a WAV (optional).
- :mod:`~agent.observability.log_privacy`: no transcript text in the server's logs.
"""

from agent.observability.metrics import STAGES, AgentMetrics
from agent.observability.turn_latency import TurnLatencyObserver, TurnTimings

__all__ = ["STAGES", "AgentMetrics", "TurnLatencyObserver", "TurnTimings"]
