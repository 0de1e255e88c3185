"""Phone calls from Telnyx, the second carrier behind the ``TelephonyProvider`` seam.

Telnyx's flow with a TeXML application: the number's voice webhook ``POST /telephony/telnyx``
(form-encoded, TwiML-compatible) gets TeXML ``<Connect><Stream url=… bidirectionalMode="rtp">``
back; Telnyx then opens ``WS /telephony/telnyx/ws`` and sends ``connected``, ``start``
(``stream_id``; ``start.call_control_id`` and ``start.media_format``), 20 ms G.711 ``media``
frames, ``dtmf``, ``mark``, ``error`` and finally ``stop``
(developers.telnyx.com/docs/voice/programmable-voice/media-streaming,
developers.telnyx.com/docs/voice/programmable-voice/texml-verbs/stream).

The codec: the TeXML asks for ``telnyx.codec`` (PCMU or PCMA) both ways; Telnyx falls back to the
call's own codec when it cannot transcode, so the caller's audio is decoded as the ``start``
message's ``media_format.encoding`` says. Anything but 8 kHz mono PCMU/PCMA is refused.

Security: Telnyx signs each webhook with Ed25519 (``telnyx-signature-ed25519`` over
``telnyx-timestamp|raw body``, developers.telnyx.com/docs/development/api-fundamentals/webhooks);
the webhook checks it against ``telnyx.public_key`` and refuses a missing, wrong or stale one
with 403 before anything starts (only those, and replays of a signed one, count against the
per-source limit). The stream must come from a call whose webhook was signed: rather than rely
on Telnyx echoing a parameter of ours in ``start``, the stream URL carries a token the webhook
signs with ``telnyx.stream_secret``, valid for a minute and for one stream only
(:mod:`agent.transports.stream_tokens`). A webhook URL that names an interpreted session
(``?interpreter_session=…&party=…``, :mod:`agent.interpreter`) hands both on in the stream URL
beside the token; Telnyx does not sign the URL, so the session id (128 random bits, made by the
operator) is what the call presents, as on WebRTC.
"""

from __future__ import annotations

import base64
import binascii
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlencode
from xml.sax.saxutils import quoteattr

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from fastapi import Request
from fastapi.responses import Response
from pipecat.serializers.base_serializer import FrameSerializer

from agent.config import Settings
from agent.credentials import ascii_digits
from agent.fastpath.media_stream_reader import RealTimeBudget
from agent.fastpath.telnyx_serializer import G711, BatchingTelnyxSerializer
from agent.interpreter.sessions import PARTY_PARAMETER, SESSION_PARAMETER
from agent.transports.stream_tokens import StreamTokens
from agent.transports.telephony import (
    AUDIO_BURST_S,
    INPUT_FRAME_MS,
    TELEPHONY_SAMPLE_RATE,
    StreamStart,
    WebhookCheck,
    public_base_url,
    twiml_reject_busy,
    websocket_url,
)

SIGNATURE_HEADER = "telnyx-signature-ed25519"
TIMESTAMP_HEADER = "telnyx-timestamp"


CODECS: tuple[G711, ...] = ("PCMU", "PCMA")


def signature_problem(
    public_key: Ed25519PublicKey,
    body: bytes,
    headers: Mapping[str, str],
    *,
    now: float,
    tolerance_s: float,
) -> str | None:
    """Why the webhook's Ed25519 signature does not hold, or ``None`` when it does."""
    timestamp = headers.get(TIMESTAMP_HEADER)
    signature = headers.get(SIGNATURE_HEADER)
    if not timestamp or not signature:
        return f"missing {SIGNATURE_HEADER} or {TIMESTAMP_HEADER}"
    if not ascii_digits(timestamp):
        return f"{TIMESTAMP_HEADER} is not Unix seconds"
    signed_at = int(timestamp)
    if abs(now - signed_at) > tolerance_s:
        return (
            f"{TIMESTAMP_HEADER} is {now - signed_at:+.0f} s off this server's clock (more "
            f"than telnyx.signature_tolerance_s = {tolerance_s:g}): a replay, or a wrong clock"
        )
    try:
        raw = base64.b64decode(signature, validate=True)
        public_key.verify(raw, timestamp.encode() + b"|" + body)
    except (binascii.Error, ValueError, InvalidSignature):
        return "the signature does not match telnyx.public_key"
    return None


def texml_stream(url: str, codec: G711) -> str:
    """TeXML that connects the call to ``url`` as a bidirectional RTP stream in ``codec``."""
    stream = (
        f'<Stream url={quoteattr(url)} codec="{codec}" bidirectionalMode="rtp" '
        f'bidirectionalCodec="{codec}"/>'
    )
    return f'<?xml version="1.0" encoding="UTF-8"?><Response><Connect>{stream}</Connect></Response>'


def parse_media_format(media_format: Any) -> G711:
    """The caller's codec from ``start.media_format``; only 8 kHz mono PCMU/PCMA is taken."""
    if media_format is None:
        return "PCMU"  # the PSTN default, for a start without a media_format
    if not isinstance(media_format, dict):
        raise ValueError("Telnyx 'start.media_format' must be an object")
    encoding = media_format.get("encoding")
    rate = media_format.get("sample_rate", TELEPHONY_SAMPLE_RATE)
    channels = media_format.get("channels", 1)
    if encoding not in CODECS:
        raise ValueError(
            f"unsupported encoding {str(encoding)[:20]!r}: PCMU or PCMA only (telnyx.codec)"
        )
    if str(rate) != str(TELEPHONY_SAMPLE_RATE) or str(channels) != "1":
        raise ValueError(f"unsupported media format {rate!r} Hz x {channels!r}: 8000 Hz mono only")
    return "PCMU" if encoding == "PCMU" else "PCMA"


class TelnyxProvider:
    """Telnyx media streams behind a TeXML application (on when ``telnyx.public_key`` is set)."""

    name = "telnyx"
    ws_path = "/telephony/telnyx/ws"

    def __init__(self, settings: Settings) -> None:
        config = settings.telnyx
        if not config.public_key:
            raise ValueError("TelnyxProvider needs telnyx.public_key (every webhook is checked)")
        self._settings = settings
        self._public_key = Ed25519PublicKey.from_public_bytes(base64.b64decode(config.public_key))
        self._tolerance_s = config.signature_tolerance_s
        self._codec: G711 = config.codec
        self._tokens = StreamTokens(
            config.stream_secret or secrets.token_hex(32), purpose="telnyx-stream"
        )
        self._answered: dict[str, float] = {}  # signatures answered -> when they go stale

    async def verify_webhook(self, request: Request) -> WebhookCheck:
        body = await request.body()
        problem = signature_problem(
            self._public_key, body, request.headers, now=time.time(), tolerance_s=self._tolerance_s
        )
        if problem is None and not self._replayed(request.headers[SIGNATURE_HEADER]):
            return WebhookCheck(signed=True)
        if problem is None:
            problem = "this signed webhook was answered already (a replay)"
        return WebhookCheck(
            signed=False,
            refusal=Response(
                f"Telnyx webhook refused: {problem} (telnyx.public_key must be the account's "
                "public key from Mission Control, and this server's clock must be right)\n",
                status_code=403,
                media_type="text/plain",
            ),
            reason=f"Telnyx webhook refused: {problem}",
        )

    async def answer_webhook(self, request: Request, *, busy: bool) -> Response:
        if busy:
            return Response(twiml_reject_busy(), media_type="application/xml")
        url = websocket_url(public_base_url(request, self._settings), self.ws_path)
        query = {"token": self._tokens.issue()}
        for name in (SESSION_PARAMETER, PARTY_PARAMETER):  # an interpreted session's party
            if name in request.query_params:
                query[name] = request.query_params[name]
        url = f"{url}?{urlencode(query)}"
        return Response(texml_stream(url, self._codec), media_type="application/xml")

    def _replayed(self, signature: str) -> bool:
        """Whether this exact signed webhook was answered within the signature's window (it
        is remembered now). A signature is over the timestamp and the body, so Telnyx's own
        retry, signed anew, is not a replay; a captured webhook sent again is, and would
        otherwise mint a fresh stream token each time."""
        now = time.time()
        self._answered = {s: until for s, until in self._answered.items() if until > now}
        if signature in self._answered:
            return True
        self._answered[signature] = now + 2 * self._tolerance_s
        return False

    def parse_start(self, message: dict[str, Any]) -> StreamStart | None:
        if message.get("event") != "start":
            return None
        start = message.get("start")
        if not isinstance(start, dict):
            raise ValueError("Telnyx 'start' must be an object")
        stream_id = message.get("stream_id")
        if not isinstance(stream_id, str) or not stream_id:
            raise ValueError("Telnyx 'start' message has no stream_id")
        call_control_id = start.get("call_control_id")
        if not isinstance(call_control_id, str) or not call_control_id:
            raise ValueError("Telnyx 'start' has no call_control_id")
        codec = parse_media_format(start.get("media_format"))
        # the same names as Twilio's facts: Telnyx's TeXML calls the call control id CallSid
        attributes = {"call_sid": call_control_id, "stream_sid": stream_id, "codec": codec}
        for key in ("from", "to"):
            if isinstance(start.get(key), str):
                attributes[key] = start[key]
        return StreamStart(stream_id=stream_id, call_id=call_control_id, attributes=attributes)

    def authorize(self, start: StreamStart) -> bool:
        return self._tokens.redeem(start.query.get("token", ""))

    def serializer(
        self,
        start: StreamStart,
        *,
        on_stop: Callable[[], None],
        on_bad_message: Callable[[str, str], None],
    ) -> FrameSerializer:
        caller: G711 = "PCMA" if start.attributes.get("codec") == "PCMA" else "PCMU"
        return BatchingTelnyxSerializer(
            start.stream_id,
            caller_encoding=caller,
            bot_encoding=self._codec,
            on_stop=on_stop,
            on_bad_message=on_bad_message,
            frame_ms=INPUT_FRAME_MS,
            # G.711: one byte per sample
            budget=RealTimeBudget(TELEPHONY_SAMPLE_RATE, burst_s=AUDIO_BURST_S),
        )
