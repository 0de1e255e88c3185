"""The service's tuning knobs, declared once.

A plain frozen dataclass so a Pipecat bot can build one without this app's settings; the app
nests it in its own config (``[stt.params]``) and passes it through as it is.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class RealtimeSTTParams:
    """How :class:`~agent.stt.service.VoxtralRealtimeSTTService` cuts, sends and recovers turns.

    Every limit is checked when the object is built; a wrong value raises ``ValueError``
    naming the knob.
    """

    preroll_s: float = 0.8
    """Audio kept from before the VAD fired, sent at the start of each turn (0-2 s). The VAD
    reports speech only once it is sure, and a soft first word is not: "turn on the lights"
    was reported 0.65 s after it began (a 0.4 s pre-roll then lost "turn"). It costs nothing
    between turns: idle audio is kept as it came and converted only when a turn starts."""
    chunk_ms: int = 20
    """Audio batched per append message; 20 ms sends every pipeline frame (10-1000)."""
    stall_timeout_s: float = 8.0
    """A generation with no server event for this long while audio flows is restarted with
    its audio replayed."""
    final_timeout_s: float = 5.0
    """A final commit unanswered for this long is treated as a stall."""
    max_generation_s: float = 600.0
    """A turn longer than this is split, so a monologue never runs into the server's
    ``--max-model-len``."""
    max_connection_age_s: float | None = None
    """Rotate the connection between turns once it is this old (SageMaker caps a connection's
    life); ``None`` never rotates."""
    connect_timeout_s: float = 10.0
    """Limit for opening a channel and receiving ``session.created``."""
    reconnect_min_wait_s: float = 0.2
    """Backoff floor between reconnect attempts."""
    reconnect_max_wait_s: float = 4.0
    """Backoff ceiling between reconnect attempts."""
    reconnect_attempts: int = 8
    """Consecutive failed attempts before the error is permanent. With the default waits
    (0.2 s doubling to 4 s) that rides out about 14 s without a server: a restart of the
    recognizer or a short network outage costs no turn."""
    ttfs_p99_latency: float = 0.6
    """Measured P99 from the end of speech to the final transcript (``bench/``); Pipecat's
    turn logic waits this long for a final transcript before giving up on it."""
    eager_stable_s: float = 0.1
    """With eager end of turn on: after the VAD stops, the interim transcript counts as
    stable (and is sent as an ``EagerTranscriptionFrame``) once no new words came for this
    long (0-2 s)."""

    def __post_init__(self) -> None:
        _within("preroll_s", self.preroll_s, 0.0, 2.0)
        _within("chunk_ms", self.chunk_ms, 10, 1000)
        _within("eager_stable_s", self.eager_stable_s, 0.0, 2.0)
        for name in (
            "stall_timeout_s",
            "final_timeout_s",
            "max_generation_s",
            "connect_timeout_s",
            "reconnect_max_wait_s",
            "ttfs_p99_latency",
        ):
            _positive(name, getattr(self, name))
        if self.max_connection_age_s is not None:
            _positive("max_connection_age_s", self.max_connection_age_s)
        _within("reconnect_min_wait_s", self.reconnect_min_wait_s, 0.0, self.reconnect_max_wait_s)
        if self.reconnect_attempts < 1:
            raise ValueError(
                f"reconnect_attempts must be at least 1, not {self.reconnect_attempts}"
            )


def _within(name: str, value: float, low: float, high: float) -> None:
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}, not {value}")


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{name} must be greater than 0, not {value}")
