"""Caller audio out of aiortc's jitter buffer as soon as it is complete, not 80 ms later.

aiortc's ``RTCRtpReceiver`` (1.16) gives each audio track a ``JitterBuffer(capacity=16,
prefetch=4)``: a frame leaves the buffer only once four later frames have arrived, so every
20 ms Opus frame reaches the pipeline 80 ms after it came. A player keeps such a cushion to
hold a steady playout clock; the pipeline has none to hold (the VAD and the recognizer take
audio as it comes), so on a WebRTC call the end of every turn was heard 80 ms late. The
prefetch is no defence against the network either: the buffer releases frames in sequence
order only, so a reordered packet is waited for, and a lost one holds the buffer until 16
packets pass, with or without it.

With ``prefetch=0`` a frame leaves when the first packet of the next one arrives: 20 ms after
it came instead of 80, on every frame, so the VAD hears the caller stop 60 ms sooner. Mirrors
``aiortc.rtcrtpreceiver.RTCRtpReceiver.__init__`` (aiortc 1.16.0), whose buffer is a private
attribute; ``tests/agent/fastpath/test_audio_jitter.py`` fails if aiortc renames it.
"""

from __future__ import annotations

from aiortc import RTCPeerConnection, RTCRtpReceiver
from aiortc.jitterbuffer import JitterBuffer
from loguru import logger

AUDIO_CAPACITY = 16
"""aiortc's own capacity for audio: how many packets a lost one may hold up."""

_BUFFER = "_RTCRtpReceiver__jitter_buffer"


def release_audio_promptly(pc: RTCPeerConnection) -> None:
    """Give each audio receiver of ``pc`` a jitter buffer without prefetch. Call it once the
    remote description is set (the receivers exist) and before media flows; calling it again
    (a renegotiation) leaves a receiver already changed as it is."""
    for transceiver in pc.getTransceivers():
        if transceiver.kind != "audio":
            continue
        receiver = transceiver.receiver
        buffer = getattr(receiver, _BUFFER, None)
        if not isinstance(buffer, JitterBuffer):
            logger.warning(
                f"aiortc's {RTCRtpReceiver.__name__} has no {_BUFFER} (aiortc changed?): "
                "caller audio keeps its 80 ms jitter-buffer delay"
            )
            return
        if buffer._prefetch != 0:
            setattr(receiver, _BUFFER, JitterBuffer(capacity=AUDIO_CAPACITY, prefetch=0))
