"""A carrier's listen-only fork of a call (``<Start><Stream track="both_tracks">``), for tests
and benches: the signed webhook, then a media stream that carries both sides of the call.

Twilio (twilio.com/docs/voice/twiml/stream, …/media-streams/websocket-messages): with
``track="both_tracks"`` the ``start`` message lists ``tracks: ["inbound", "outbound"]`` and
every 20 ms brings one ``media`` message per track, ``media.track`` ``inbound`` (the caller)
or ``outbound`` (what the call plays to the caller), each with its own ``chunk`` count and
``timestamp`` (ms from the start of the stream). Telnyx (TeXML ``<Start><Stream
track="both_tracks">``, Call Control ``stream_track=both_tracks``) sends the same ``media``
messages in its own envelope (``sequence_number``, ``stream_id``). The ``start``, ``stop`` and
pacing are those of :class:`~tests.fakes.twilio_caller.TwilioCaller` /
:class:`~tests.fakes.telnyx_caller.TelnyxCaller`.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlencode
from xml.etree import ElementTree

import httpx
import websockets

from agent.transports.telephony import twilio_signature
from tests.fakes import telnyx_caller
from tests.fakes.telnyx_caller import TelnyxCaller
from tests.fakes.twilio_caller import FRAME_S, SILENCE, TOKEN, TwilioCaller, payloads

Carrier = Literal["twilio", "telnyx"]
Track = Literal["inbound", "outbound"]


@dataclass(frozen=True)
class Forked:
    """What the analytics webhook answered: where to stream, with what, and whom it dials."""

    url: str
    parameters: dict[str, str]
    dial: str


async def ring(base_url: str, carrier: Carrier, call_sid: str) -> Forked:
    """POST the number's analytics webhook, signed as the carrier signs it; the answer's
    ``<Start><Stream>`` (which must ask for both tracks) and ``<Dial>``."""
    url = f"{base_url}/analytics/{carrier}"
    async with httpx.AsyncClient(timeout=telnyx_caller.WEBHOOK_TIMEOUT_S) as http:
        if carrier == "twilio":
            form = {"CallSid": call_sid, "AccountSid": "AC0001", "From": "+15550001"}
            headers = {"X-Twilio-Signature": twilio_signature(url, form, TOKEN)}
            response = await http.post(url, data=form, headers=headers)
        else:
            form = {**telnyx_caller.CALL_FORM, "CallSid": call_sid}
            body = urlencode(form).encode()
            headers = {
                "content-type": "application/x-www-form-urlencoded",
                **telnyx_caller.sign(body),
            }
            response = await http.post(url, content=body, headers=headers)
    response.raise_for_status()
    answer = ElementTree.fromstring(response.text)
    stream = answer.find("./Start/Stream")
    dial = answer.find("./Dial")
    if stream is None or stream.get("track") != "both_tracks" or dial is None:
        raise AssertionError(
            f"no <Start><Stream track='both_tracks'> and <Dial> in {response.text!r}"
        )
    parameters = {p.get("name", ""): p.get("value", "") for p in stream.findall("./Parameter")}
    return Forked(stream.get("url", ""), parameters, "".join(dial.itertext()))


def timeline(
    parts: Sequence[tuple[float, Track, bytes]], *, total_s: float
) -> dict[Track, list[str]]:
    """Both tracks' 20 ms payloads for a call of ``total_s`` seconds in which each part (start
    second, track, 8 kHz μ-law) is heard from its start; silence elsewhere (parts of one
    track must not overlap)."""
    frames = math.ceil(total_s / FRAME_S)
    tracks: dict[Track, list[str]] = {"inbound": [SILENCE] * frames, "outbound": [SILENCE] * frames}
    for start_s, track, ulaw in parts:
        first = round(start_s / FRAME_S)
        for index, payload in enumerate(payloads(ulaw)):
            if first + index < frames:
                tracks[track][first + index] = payload
    return tracks


class BothTracksStream:
    """One forked call's media stream over an open WebSocket."""

    def __init__(self, ws: websockets.ClientConnection, carrier: Carrier, call_sid: str) -> None:
        self.carrier = carrier
        self.caller: TwilioCaller = (
            TwilioCaller(ws, call_sid, stream_sid=f"MZ{call_sid[-8:]}")
            if carrier == "twilio"
            else TelnyxCaller(ws, call_sid, stream_id=f"stream-{call_sid[-8:]}")
        )
        self._chunks = {"inbound": 0, "outbound": 0}
        self.max_late_s = 0.0
        self.sent_at: list[float] = []
        """When each 20 ms tick's messages went (``time.monotonic()``), tick by tick."""

    async def start(self, parameters: dict[str, str]) -> None:
        if isinstance(self.caller, TelnyxCaller):
            await self.caller.start()  # its token is in the stream URL
        else:
            await self.caller.start(parameters=parameters, tracks=("inbound", "outbound"))

    async def play(self, tracks: dict[Track, list[str]]) -> float:
        """Send both tracks at real-time pace, one message per track every 20 ms; returns
        when the last frame went."""
        started = time.monotonic()
        inbound, outbound = tracks["inbound"], tracks["outbound"]
        for index in range(max(len(inbound), len(outbound))):
            due = started + index * FRAME_S
            now = time.monotonic()
            if due > now:
                await asyncio.sleep(due - now)
            else:
                self.max_late_s = max(self.max_late_s, now - due)
            for track, frames in (("inbound", inbound), ("outbound", outbound)):
                if index < len(frames):
                    await self.caller.ws.send(self._media(track, frames[index]))
            self.sent_at.append(time.monotonic())
        return time.monotonic()

    async def stop(self) -> None:
        await self.caller.stop()

    async def close(self) -> None:
        await self.caller.close()

    def _media(self, track: str, payload: str) -> str:
        self._chunks[track] += 1
        self.caller._sequence += 1
        chunk = self._chunks[track]
        template = _TWILIO_MEDIA if self.carrier == "twilio" else _TELNYX_MEDIA
        return template.format(
            self.caller._sequence, track, chunk, (chunk - 1) * 20, payload, self.caller.stream_sid
        )


_TWILIO_MEDIA = (
    '{{"event": "media", "sequenceNumber": "{}", "media": {{"track": "{}", "chunk": "{}", '
    '"timestamp": "{}", "payload": "{}"}}, "streamSid": "{}"}}'
)
_TELNYX_MEDIA = (
    '{{"event": "media", "sequence_number": "{}", "media": {{"track": "{}", "chunk": "{}", '
    '"timestamp": "{}", "payload": "{}"}}, "stream_id": "{}"}}'
)
"""``media`` messages, formatted without ``json.dumps`` (a load test sends thousands a second)."""
