"""A WebRTC call's audio receiver releases each frame when the next one starts to arrive, not
four frames (80 ms) later; the calls themselves run through it in the WebRTC tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiortc import RTCPeerConnection
from aiortc.jitterbuffer import JitterBuffer
from aiortc.rtp import RtpPacket

from agent.fastpath.audio_jitter import release_audio_promptly

BUFFER = "_RTCRtpReceiver__jitter_buffer"
OPUS_FRAME = 960  # 20 ms at Opus's 48 kHz RTP clock


@pytest.fixture
async def answering() -> AsyncIterator[RTCPeerConnection]:
    """The server's side of a call whose browser offered to send audio."""
    caller, server = RTCPeerConnection(), RTCPeerConnection()
    caller.addTransceiver("audio", direction="sendrecv")
    await caller.setLocalDescription(await caller.createOffer())
    await server.setRemoteDescription(caller.localDescription)
    yield server
    await caller.close()
    await server.close()


def receiver_buffer(pc: RTCPeerConnection) -> JitterBuffer:
    (transceiver,) = pc.getTransceivers()
    buffer = getattr(transceiver.receiver, BUFFER)
    assert isinstance(buffer, JitterBuffer)
    return buffer


async def test_a_frame_leaves_with_the_next_packet_not_the_fourth(
    answering: RTCPeerConnection,
) -> None:
    assert packets_waited(receiver_buffer(answering)) == 4  # aiortc 1.16's audio: 80 ms
    release_audio_promptly(answering)
    buffer = receiver_buffer(answering)
    assert packets_waited(buffer) == 1  # 20 ms
    assert buffer.capacity == 16
    release_audio_promptly(answering)  # again, as on a renegotiation: the same buffer
    assert receiver_buffer(answering) is buffer


def packets_waited(buffer: JitterBuffer) -> int:
    """How many packets (20 ms each) must arrive after a frame before it leaves the buffer."""
    for sequence in range(buffer.capacity):
        packet = RtpPacket(payload_type=111, sequence_number=sequence)
        packet.timestamp = sequence * OPUS_FRAME
        packet._data = b"opus"  # type: ignore[attr-defined]
        _, frame = buffer.add(packet)
        if frame is not None:
            assert frame.timestamp == 0
            return sequence
    raise AssertionError("no frame left the buffer")
