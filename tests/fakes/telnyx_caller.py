"""The Telnyx side of a phone call, as Telnyx speaks it, for tests and benches: the signed
TeXML webhook, then the media stream.

The webhook (developers.telnyx.com/docs/voice/programmable-voice/texml-instruction-fetching and
…/texml-twiml-compatibility): a TeXML application POSTs the call's TwiML-compatible form
(``CallSid``, ``AccountSid``, ``From``, ``To``, ``CallStatus``, ``Direction``) to the number's
voice URL. Every Telnyx webhook is signed (developers.telnyx.com/docs/development/
api-fundamentals/webhooks): ``telnyx-timestamp`` (Unix seconds) and
``telnyx-signature-ed25519``, the base64 Ed25519 signature of ``timestamp|raw body`` with the
account's key. :func:`place_call` signs with :data:`PRIVATE_KEY`, a fixed test key whose
public half, :data:`PUBLIC_KEY`, is what a test server's ``telnyx.public_key`` holds.

The media stream (developers.telnyx.com/docs/voice/programmable-voice/media-streaming and the
AsyncAPI page developers.telnyx.com/api-reference/websockets/stream-call-media-over-websocket):
Telnyx opens the ``<Stream url>`` of the TeXML answer and sends ``{"event": "connected",
"version": "1.0.0"}``; ``start`` with ``sequence_number``, top-level ``stream_id`` and
``start: {user_id, call_control_id, client_state, media_format: {encoding, sample_rate,
channels}}``; then ``media`` (``media: {track: "inbound", chunk, timestamp, payload}``, 20 ms of
8 kHz G.711, base64), ``dtmf`` (``dtmf: {digit}``), ``mark`` (``mark: {name}``) and ``stop``
(``stop: {user_id, call_control_id}``), each with ``sequence_number`` and ``stream_id``. What
the server sends back (bidirectional RTP mode) is ``media`` with ``media: {payload}``, ``clear``
and ``mark``; the caller records it as :class:`~tests.fakes.twilio_caller.TwilioCaller` does.

Pacing, sending and recording are :class:`TwilioCaller`'s; only the messages differ.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import os
import time
import warnings
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode
from xml.etree import ElementTree

import httpx
import websockets
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from tests.fakes.twilio_caller import FRAME_BYTES, TwilioCaller, payloads, ulaw_speech

with warnings.catch_warnings():  # the reference G.711 codecs; Python 3.12 still ships them
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop

Codec = Literal["PCMU", "PCMA"]

PRIVATE_KEY = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"telnyx test key").digest())
"""The test account's signing key (Telnyx keeps the real one)."""
PUBLIC_KEY = base64.b64encode(
    PRIVATE_KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
).decode()
"""What a test server's ``telnyx.public_key`` holds."""

CALL_FORM = {
    "AccountSid": "0a1b2c3d-0000-4000-8000-000000000001",
    "CallSid": "v3:telnyx-test-call-0001",
    "From": "+15550001",
    "To": "+15550002",
    "CallStatus": "ringing",
    "Direction": "inbound",
}

WEBHOOK_TIMEOUT_S = 15.0
"""How long the fake carrier waits for the webhook's answer."""

_calls = itertools.count(1)


def new_call_form() -> dict[str, str]:
    """:data:`CALL_FORM` for a call of its own: Telnyx gives every call a new call SID."""
    return {**CALL_FORM, "CallSid": f"v3:telnyx-test-call-{next(_calls):04d}-{os.getpid()}"}


USER_ID = "3E6F995F-85F7-4705-9741-53B116D28237"
"""The Telnyx user the test calls belong to (as in Telnyx's examples)."""

ALAW_SILENCE = b"\xd5"

_MEDIA = (
    '{{"event": "media", "sequence_number": "{}", "media": {{"track": "inbound", "chunk": "{}", '
    '"timestamp": "{}", "payload": "{}"}}, "stream_id": "{}"}}'
)


def sign(
    body: bytes, *, timestamp: int | None = None, key: Ed25519PrivateKey = PRIVATE_KEY
) -> dict[str, str]:
    """The headers Telnyx sends with ``body``: its timestamp and Ed25519 signature."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    signature = key.sign(stamp.encode() + b"|" + body)
    return {
        "telnyx-timestamp": stamp,
        "telnyx-signature-ed25519": base64.b64encode(signature).decode(),
    }


async def post_webhook(
    base_url: str,
    form: dict[str, str] | None = None,
    *,
    headers: dict[str, str] | None = None,
    query: str = "",
) -> httpx.Response:
    """POST the TeXML voice webhook (``query``: what the number's webhook URL carries); signed
    now with :data:`PRIVATE_KEY` unless ``headers`` are given (a forger's, or none)."""
    body = urlencode(form or new_call_form()).encode()
    sent = sign(body) if headers is None else headers
    # A carrier waits seconds for a webhook (Twilio 15 s), not httpx's default 5: forty calls
    # ringing at once on a loaded 2-core machine are answered, only later.
    async with httpx.AsyncClient(timeout=WEBHOOK_TIMEOUT_S) as http:
        return await http.post(
            base_url + "/telephony/telnyx" + (f"?{query}" if query else ""),
            content=body,
            headers={"content-type": "application/x-www-form-urlencoded", **sent},
        )


def stream_url_of(texml: str) -> str:
    """The ``<Connect><Stream url>`` of a TeXML answer."""
    stream = ElementTree.fromstring(texml).find("./Connect/Stream")
    if stream is None or not stream.get("url"):
        raise AssertionError(f"no <Connect><Stream url> in {texml!r}")
    return stream.get("url", "")


async def place_call(base_url: str, form: dict[str, str] | None = None, *, query: str = "") -> str:
    """Ring the number as Telnyx does: the signed webhook (for a new call SID unless ``form``
    names one: two identical signed webhooks are a replay); returns the media-stream URL the
    TeXML answer names."""
    response = await post_webhook(base_url, form or new_call_form(), query=query)
    response.raise_for_status()
    return stream_url_of(response.text)


def to_alaw(pcm: bytes) -> bytes:
    """8 kHz PCM16 as A-law (PCMA)."""
    return audioop.lin2alaw(pcm, 2)


def alaw_speech(text: str, *, trim: bool = False) -> bytes:
    """``text`` spoken (see :mod:`tests.fakes.speech`) as 8 kHz A-law; ``trim`` as in
    :func:`~tests.fakes.twilio_caller.ulaw_speech`."""
    return to_alaw(audioop.ulaw2lin(ulaw_speech(text, trim=trim), 2))


class TelnyxCaller(TwilioCaller):
    """One Telnyx media stream over an open WebSocket; reading starts at once.

    ``codec``: what the ``start`` message declares and the caller streams; ``playback``: what
    the server's audio is in (the TeXML's ``bidirectionalCodec``), ``codec`` unless given.
    """

    def __init__(
        self,
        ws: websockets.ClientConnection,
        call_control_id: str = "v3:telnyx-test-call-0001",
        *,
        stream_id: str = "32DE0DEA-53CB-4B21-89A4-9E1819C043BC",
        codec: Codec = "PCMU",
        playback: Codec | None = None,
        keep_events: bool = True,
    ) -> None:
        self.codec = codec
        self.playback = playback or codec
        if codec == "PCMA":
            self.silence_frame = payloads(ALAW_SILENCE * FRAME_BYTES)[0]
        super().__init__(ws, call_control_id, stream_sid=stream_id, keep_events=keep_events)

    @property
    def call_control_id(self) -> str:
        return self.call_sid

    async def start(self, token: str | None = None) -> None:
        """``connected`` then ``start``. Telnyx's ``start`` carries nothing of the server's:
        its stream token is in the URL, so ``token`` is ignored."""
        await self.ws.send(json.dumps({"event": "connected", "version": "1.0.0"}))
        start = {
            "user_id": USER_ID,
            "call_control_id": self.call_sid,
            "client_state": "aGF2ZSBhIG5pY2UgZGF5ID1d",
            "media_format": {"encoding": self.codec, "sample_rate": 8000, "channels": 1},
        }
        await self._send_event("start", start=start)

    async def press(self, digits: str) -> None:
        """One ``dtmf`` message per key, as Telnyx sends them when the caller presses keys."""
        for digit in digits:
            await self._send_event("dtmf", dtmf={"digit": digit})

    async def mark(self, name: str) -> None:
        """``mark``: the audio before the server's mark ``name`` has played."""
        await self._send_event("mark", mark={"name": name})

    async def stop(self) -> None:
        """``stop``: the call is over (the caller hung up)."""
        await self._send_event(
            "stop",
            stop={"user_id": USER_ID, "call_control_id": self.call_sid},
        )

    async def _send_event(self, event: str, **body: Any) -> None:
        self._sequence += 1
        message = {"event": event, "sequence_number": str(self._sequence), **body}
        await self.ws.send(json.dumps({**message, "stream_id": self.stream_sid}))

    def _media_message(self, payload: str) -> str:
        return _MEDIA.format(
            self._sequence, self._chunk, (self._chunk - 1) * 20, payload, self.stream_sid
        )

    def _to_pcm(self, g711: bytes) -> bytes:
        if self.playback == "PCMA":
            return audioop.alaw2lin(g711, 2)
        return audioop.ulaw2lin(g711, 2)


def query_token(url: str) -> str:
    """The ``token`` query parameter of a stream URL."""
    return dict(parse_qsl(url.partition("?")[2])).get("token", "")
