"""Voxtral realtime speech-to-text for Pipecat, over vLLM's Realtime API or SageMaker.

A self-contained Pipecat plugin in the shape of Pipecat's ``services/<vendor>/``: it imports
only Pipecat, websockets and numpy/soxr (and, lazily, the SageMaker SDK from
:mod:`agent.stt.sagemaker`), never the rest of this repository::

    from agent.stt import VoxtralRealtimeSTTService, websocket_channel_factory

    stt = VoxtralRealtimeSTTService(
        channel_factory=websocket_channel_factory("ws://gpu:8000/v1/realtime"),
    )

Modules: ``protocol`` (the wire events), ``channels`` (the send/receive/close seam and its
WebSocket channel), ``memory`` (in-memory channels for tests), ``session`` (the handshake),
``params`` (tuning), ``turn`` and ``audio`` (per-turn bookkeeping, 16 kHz conversion),
``service`` (the Pipecat service), ``client`` (feed audio, read transcripts without a
pipeline), ``sagemaker`` (the SageMaker HTTP/2 channel).
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.stt.channels import (
        ChannelClosed,
        ChannelError,
        ChannelFactory,
        RealtimeChannel,
        WebSocketChannel,
        bearer_auth,
        websocket_channel_factory,
    )
    from agent.stt.memory import MemoryChannel, MockRealtimeEndpoint, channel_pair
    from agent.stt.params import RealtimeSTTParams
    from agent.stt.protocol import SAMPLE_RATE, VOXTRAL_MODEL
    from agent.stt.service import VoxtralRealtimeSTTService

_HOMES = {
    "ChannelClosed": "channels",
    "ChannelError": "channels",
    "ChannelFactory": "channels",
    "RealtimeChannel": "channels",
    "WebSocketChannel": "channels",
    "bearer_auth": "channels",
    "websocket_channel_factory": "channels",
    "MemoryChannel": "memory",
    "MockRealtimeEndpoint": "memory",
    "channel_pair": "memory",
    "RealtimeSTTParams": "params",
    "SAMPLE_RATE": "protocol",
    "VOXTRAL_MODEL": "protocol",
    "VoxtralRealtimeSTTService": "service",
}
__all__ = [
    "SAMPLE_RATE",
    "VOXTRAL_MODEL",
    "ChannelClosed",
    "ChannelError",
    "ChannelFactory",
    "MemoryChannel",
    "MockRealtimeEndpoint",
    "RealtimeChannel",
    "RealtimeSTTParams",
    "VoxtralRealtimeSTTService",
    "WebSocketChannel",
    "bearer_auth",
    "channel_pair",
    "websocket_channel_factory",
]


def __getattr__(name: str) -> Any:
    """Import on first use, so ``agent.stt.protocol`` alone does not load Pipecat."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'agent.stt' has no attribute {name!r}")
    return getattr(import_module(f"agent.stt.{home}"), name)
