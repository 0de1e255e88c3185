"""The Telnyx caller itself: one that strayed from Telnyx's messages or signed its webhook
differently from Telnyx would make the Telnyx tests pass for nothing."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve

from tests.fakes.telnyx_caller import PUBLIC_KEY, TelnyxCaller, sign, stream_url_of
from tests.fakes.twilio_caller import FRAME_BYTES

pytestmark = pytest.mark.timeout(30)


def test_the_webhook_is_signed_as_telnyx_signs_it() -> None:
    body = b"CallSid=v3%3A1&From=%2B15550001"
    headers = sign(body, timestamp=1700000000)
    assert headers["telnyx-timestamp"] == "1700000000"
    signature = base64.b64decode(headers["telnyx-signature-ed25519"], validate=True)
    assert len(signature) == 64
    key = Ed25519PublicKey.from_public_bytes(base64.b64decode(PUBLIC_KEY))
    key.verify(signature, b"1700000000|" + body)  # raises if it were anything else
    assert abs(int(sign(body)["telnyx-timestamp"]) - time.time()) < 5


def test_the_stream_url_is_read_from_the_texml_answer() -> None:
    texml = (
        '<?xml version="1.0" encoding="UTF-8"?><Response><Connect>'
        '<Stream url="wss://h/telephony/telnyx/ws?token=a.b.c" bidirectionalMode="rtp"/>'
        "</Connect></Response>"
    )
    assert stream_url_of(texml) == "wss://h/telephony/telnyx/ws?token=a.b.c"
    with pytest.raises(AssertionError):
        stream_url_of('<Response><Reject reason="busy"/></Response>')


@pytest.mark.parametrize("codec, silence", [("PCMU", 0xFF), ("PCMA", 0xD5)])
async def test_the_caller_speaks_telnyxs_protocol_at_real_time_pace(
    codec: str, silence: int
) -> None:
    received: list[dict[str, Any]] = []
    arrived: list[float] = []

    async def telnyx_side(ws: ServerConnection) -> None:
        async for message in ws:
            received.append(json.loads(message))
            arrived.append(time.monotonic())

    async with serve(telnyx_side, "127.0.0.1", 0) as server:
        url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        async with connect(url) as ws:
            caller = TelnyxCaller(ws, "v3:C42", stream_id="S42", codec=codec)  # type: ignore[arg-type]
            await caller.start()
            await caller.speak(b"\x00" * (FRAME_BYTES * 10 + 1))  # 11 frames, the last padded
            await caller.silence(0.02)
            await caller.press("5")
            await caller.mark("played")
            await caller.stop()
            await caller.close()
        await asyncio.sleep(0.1)

    events = [m["event"] for m in received]
    assert events == ["connected", "start"] + ["media"] * 12 + ["dtmf", "mark", "stop"]
    assert received[0] == {"event": "connected", "version": "1.0.0"}
    start = received[1]
    assert start["stream_id"] == "S42"
    assert start["start"]["call_control_id"] == "v3:C42"
    assert set(start["start"]) == {"user_id", "call_control_id", "client_state", "media_format"}
    assert start["start"]["media_format"] == {"encoding": codec, "sample_rate": 8000, "channels": 1}
    media = received[2:14]
    assert all(m["media"]["track"] == "inbound" for m in media)
    assert all(len(base64.b64decode(m["media"]["payload"])) == FRAME_BYTES for m in media)
    assert base64.b64decode(media[-1]["media"]["payload"]) == bytes([silence]) * FRAME_BYTES
    assert [m["media"]["chunk"] for m in media] == [str(n) for n in range(1, 13)]
    assert [int(m["sequence_number"]) for m in received[1:]] == list(range(1, 17))
    assert all(m["stream_id"] == "S42" for m in received[1:])
    assert "streamSid" not in json.dumps(received)  # nothing of Twilio's
    assert 0.18 <= arrived[12] - arrived[2] < 0.4  # 10 gaps of 20 ms
    assert received[-3]["dtmf"] == {"digit": "5"}
    assert received[-2]["mark"] == {"name": "played"}
    assert received[-1]["stop"]["call_control_id"] == "v3:C42"
