"""What a transport tells the pipeline about its client, declared rather than guessed.

A transport that differs from the defaults implements :class:`TransportTraits` (phone calls:
8 kHz, no RTVI); any other Pipecat ``BaseTransport`` gets :data:`DEFAULT_TRAITS`. An input
transport that can run the call's VAD itself implements :class:`HostsVAD`; one that carries a
phone call, :class:`CarriesPhoneCall`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from pipecat.audio.vad.vad_analyzer import VADAnalyzer

from agent.stt.protocol import SAMPLE_RATE
from agent.transports.call_control import CallControl


@runtime_checkable
class TransportTraits(Protocol):
    """A transport's client, as the pipeline needs to know it."""

    @property
    def pipeline_sample_rate(self) -> int:
        """The rate the client's audio natively has; the pipeline runs at it, so audio is
        not resampled twice (phone calls: 8 kHz)."""
        ...

    @property
    def speaks_rtvi(self) -> bool:
        """Whether the client understands Pipecat's RTVI messages (a phone does not)."""
        ...


@dataclass(frozen=True, slots=True)
class DefaultTraits:
    """A browser or SDK client: 16 kHz, the STT's own rate, and RTVI."""

    pipeline_sample_rate: int = SAMPLE_RATE
    speaks_rtvi: bool = True


DEFAULT_TRAITS = DefaultTraits()


def traits_of(transport: object) -> TransportTraits:
    """The transport's declared traits, or the defaults."""
    return transport if isinstance(transport, TransportTraits) else DEFAULT_TRAITS


@runtime_checkable
class HostsVAD(Protocol):
    """An input transport that runs the call's VAD itself (no ``VADProcessor`` stage)."""

    def use_vad(self, analyzer: VADAnalyzer) -> None:
        """Analyse the caller's audio with ``analyzer``; call before the pipeline starts."""
        ...


@runtime_checkable
class CarriesPhoneCall(Protocol):
    """A transport that carries a phone call: the caller's keypresses arrive as
    ``InputDTMFFrame``s, and the carrier may let the call be controlled (transferred)."""

    @property
    def call_control(self) -> CallControl | None:
        """How to act on the call; ``None`` when the carrier's API is not configured."""
        ...
