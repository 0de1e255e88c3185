"""The carriers as the shared telephony tests see them: how a call reaches its media stream,
and the caller that speaks each one's protocol (:mod:`tests.fakes.twilio_caller`,
:mod:`tests.fakes.telnyx_caller`).

Twilio's stream token travels in its ``start`` message, so a Twilio caller dials the stream
URL directly; Telnyx's travels in the stream URL, so a Telnyx caller first rings the number
(the signed TeXML webhook) and connects where the answer says.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlencode

import httpx
import websockets

from agent.transports.telephony import twilio_signature
from tests.fakes import telnyx_caller
from tests.fakes.telnyx_caller import TelnyxCaller
from tests.fakes.twilio_caller import TOKEN, TwilioCaller

CarrierName = Literal["twilio", "telnyx"]


@dataclass(frozen=True)
class Carrier:
    name: CarrierName

    @property
    def ws_path(self) -> str:
        return f"/telephony/{self.name}/ws"

    def ws_url(self, base_url: str) -> str:
        """The media-stream URL with no token: what a stranger dials."""
        return base_url.replace("http://", "ws://") + self.ws_path

    async def stream_url(self, base_url: str, n: int = 1) -> str:
        """The URL the carrier opens the media stream on, after its webhook was answered."""
        if self.name == "twilio":
            return self.ws_url(base_url)
        return await telnyx_caller.place_call(base_url)

    def caller(self, ws: websockets.ClientConnection, n: int = 1) -> TwilioCaller:
        if self.name == "twilio":
            return TwilioCaller(ws, f"CA{n:04d}", stream_sid=f"MZ{n:04d}")
        return TelnyxCaller(ws, f"v3:telnyx-test-call-{n:04d}", stream_id=f"stream-{n:04d}")

    @asynccontextmanager
    async def call(
        self, base_url: str, n: int = 1, *, forged: str | None = None
    ) -> AsyncIterator[TwilioCaller]:
        """A caller on an open media stream, not yet started (``forged``: a stream token the
        server never issued, in the URL for Telnyx; for Twilio, pass it to ``start``)."""
        if forged is not None and self.name == "telnyx":
            url = self.ws_url(base_url) + "?" + urlencode({"token": forged})
        else:
            url = await self.stream_url(base_url, n)
        callers: list[TwilioCaller] = []
        try:
            async with websockets.connect(url) as ws:
                callers.append(self.caller(ws, n))
                yield callers[0]
        finally:  # after the close handshake, which the reader sees through, as a carrier does
            for caller in callers:
                await caller.close()

    async def signed_webhook(self, base_url: str) -> httpx.Response:
        """The number's voice webhook, signed as the carrier signs it."""
        if self.name == "telnyx":
            return await telnyx_caller.post_webhook(base_url)
        form = {"CallSid": "CA0001", "AccountSid": "AC0001", "From": "+15550001"}
        url = base_url + "/telephony/twilio"
        headers = {"X-Twilio-Signature": twilio_signature(url, form, TOKEN)}
        async with httpx.AsyncClient() as http:
            return await http.post(url, data=form, headers=headers)


CARRIERS = [Carrier("twilio"), Carrier("telnyx")]
