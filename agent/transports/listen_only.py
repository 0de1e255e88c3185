"""Listen-only analytics streams: both tracks of a call a person handles, no bot in it.

Twilio forks a call's audio with ``<Start><Stream track="both_tracks">``: the stream's
``media`` messages carry ``media.track`` ``inbound`` (the caller) or ``outbound`` (what the
call plays to the caller: the agent's voice), each 20 ms of 8 kHz μ-law. Telnyx does the same
from a TeXML ``<Start><Stream track="both_tracks">`` (Call Control: ``stream_track=
both_tracks``), in PCMU or PCMA. Nothing is ever sent back.

Routes (on with ``analytics.enabled``): ``POST /analytics/twilio`` (and ``/analytics/telnyx``
with ``telnyx.public_key``) is the number's voice webhook, checked exactly as the agent's
(Twilio's HMAC signature, Telnyx's Ed25519); its answer starts the stream, with a single-use
stream token of its own purpose (an agent stream's token opens no analytics stream, nor the
reverse), then dials ``analytics.dial``, the person who takes the call. ``WS
/analytics/{carrier}/ws`` takes the stream: a ``start`` within 5 s, an authorized token, one
stream per call, and a call slot of the :class:`~agent.calls.CallRegistry` (kind
``twilio-analytics`` / ``telnyx-analytics``), so ``server.max_calls``, drain, shutdown, the
call counters and metrics cover these streams as they cover the agent's calls. A full or
draining server still dials the person: the call goes on, unrecorded.

Each track goes to its own transcriber (``pipelines.analytics``; the server hands the factory
in, as it hands the agent's pipeline to the telephony transport), and the transcripts to the
call's :class:`~agent.analytics.conversation.Conversation`.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol
from xml.sax.saxutils import escape, quoteattr

import numpy as np
from fastapi import APIRouter, Request, WebSocket
from fastapi.responses import Response
from loguru import logger

from agent.analytics.conversation import TRACK_SPEAKERS, Conversation, Speaker
from agent.analytics.store import AnalyticsCalls
from agent.calls import Call, CallLimitReached, CallRegistry
from agent.config import Settings
from agent.fastpath.media_stream_reader import MAX_MESSAGE_CHARS, RealTimeBudget
from agent.rate_limit import PerSourceLimiter
from agent.stt.client import TranscriptEvent
from agent.transports.stream_tokens import StreamTokens
from agent.transports.telephony import (
    AUDIO_BURST_S,
    BUSY_CLOSE_CODE,
    GOING_AWAY_CLOSE_CODE,
    MIN_AWAITING_START,
    POLICY_CLOSE_CODE,
    TELEPHONY_SAMPLE_RATE,
    StreamStart,
    TelephonyProvider,
    TwilioProvider,
    _close_quietly,
    authorized_start,
    bad_message_reporter,
    public_base_url,
    refuse_webhook,
    websocket_url,
)

FRAME_MS = 60
"""Each track goes to its transcriber in frames this long (three 20 ms messages)."""

MAX_ERRORS = 20


class TrackSession(Protocol):
    """One track's transcriber (:class:`pipelines.analytics.TrackTranscription`)."""

    async def start(self) -> None: ...

    async def feed(self, pcm: bytes) -> None: ...

    async def close(self, *, finish: bool) -> None: ...


TrackSessionFactory = Callable[[int, Callable[[TranscriptEvent], None]], TrackSession]
"""``make(sample_rate, on_event)``: a transcriber for one track."""


# ---------------------------------------------------------------------------- G.711


def _ulaw_table() -> np.ndarray:
    codes = ~np.arange(256, dtype=np.int32) & 0xFF
    exponent = (codes >> 4) & 7
    magnitude = (((codes & 0x0F) << 3) + 0x84) << exponent
    return np.where(codes & 0x80, 0x84 - magnitude, magnitude - 0x84).astype("<i2")


def _alaw_table() -> np.ndarray:
    codes = np.arange(256, dtype=np.int32) ^ 0x55
    exponent = (codes >> 4) & 7
    mantissa = (codes & 0x0F) << 4
    magnitude = np.where(exponent == 0, mantissa + 8, (mantissa + 0x108) << (exponent - 1))
    return np.where(codes & 0x80, magnitude, -magnitude).astype("<i2")


G711_TABLES = {"PCMU": _ulaw_table(), "PCMA": _alaw_table()}
"""G.711 byte → PCM16 sample (ITU-T G.711, as ``audioop`` decodes it)."""


def decode_g711(data: bytes, codec: str) -> bytes:
    return G711_TABLES[codec][np.frombuffer(data, np.uint8)].tobytes()


# ---------------------------------------------------------------------------- carriers


def _dial(destination: str) -> str:
    inner = (
        f"<Sip>{escape(destination)}</Sip>"
        if destination.startswith("sip:")
        else (f"<Number>{escape(destination)}</Number>")
    )
    return f"<Dial>{inner}</Dial>"


def start_stream_markup(url: str, *, token: str | None, dial: str, codec: str | None) -> str:
    """TwiML/TeXML: fork both tracks to ``url``, then connect the caller to ``dial``."""
    extra = f' codec="{codec}"' if codec else ""
    parameter = f'<Parameter name="token" value={quoteattr(token)}/>' if token else ""
    stream = f'<Stream url={quoteattr(url)} track="both_tracks"{extra}>{parameter}</Stream>'
    return (
        '<?xml version="1.0" encoding="UTF-8"?><Response>'
        f"<Start>{stream}</Start>{_dial(dial)}</Response>"
    )


def dial_only_markup(dial: str) -> str:
    return f'<?xml version="1.0" encoding="UTF-8"?><Response>{_dial(dial)}</Response>'


@dataclass
class ListenOnlyCarrier:
    """One carrier's listen-only streams: its webhook check and ``start`` (the agent's
    provider's), and tokens of the analytics purpose."""

    provider: TelephonyProvider
    tokens: StreamTokens | None
    """``None``: Twilio without ``twilio.auth_token`` (unsigned, as the agent's streams)."""
    token_in_url: bool
    codec: str | None
    """What the TeXML asks Telnyx for; Twilio's is always μ-law."""

    @property
    def name(self) -> str:
        return self.provider.name

    @property
    def ws_path(self) -> str:
        return f"/analytics/{self.name}/ws"

    def answer(self, ws_url: str, call_sid: str, dial: str) -> str:
        token = None
        if self.tokens is not None:
            token = self.tokens.issue("" if self.token_in_url else call_sid)
        if self.token_in_url and token is not None:
            ws_url, token = f"{ws_url}?token={token}", None
        return start_stream_markup(ws_url, token=token, dial=dial, codec=self.codec)

    def authorize(self, start: StreamStart) -> bool:
        if self.tokens is None:
            return True
        if self.token_in_url:
            return self.tokens.redeem(start.query.get("token", ""))
        return self.tokens.redeem(start.parameters.get("token", ""), start.call_id)

    def codec_of(self, start: StreamStart) -> str:
        return "PCMA" if start.attributes.get("codec") == "PCMA" else "PCMU"


def listen_only_carriers(settings: Settings) -> list[ListenOnlyCarrier]:
    twilio_token = settings.twilio.auth_token
    carriers = [
        ListenOnlyCarrier(
            provider=TwilioProvider(settings),
            tokens=StreamTokens(twilio_token, purpose="twilio-analytics") if twilio_token else None,
            token_in_url=False,
            codec=None,
        )
    ]
    if settings.telnyx.public_key:
        from agent.transports.telnyx import TelnyxProvider

        secret = settings.telnyx.stream_secret or secrets.token_hex(32)
        carriers.append(
            ListenOnlyCarrier(
                provider=TelnyxProvider(settings),
                tokens=StreamTokens(secret, purpose="telnyx-analytics"),
                token_in_url=True,
                codec=settings.telnyx.codec,
            )
        )
    return carriers


# ---------------------------------------------------------------------------- streams


class ListenOnlyStreams:
    """The analytics webhooks and streams of every carrier."""

    def __init__(
        self,
        *,
        settings: Settings,
        registry: CallRegistry,
        calls: AnalyticsCalls,
        transcriber: TrackSessionFactory,
        count_bad_input: Callable[[str, str], None] | None = None,
    ) -> None:
        if not settings.analytics.dial:
            raise ValueError(
                "analytics.enabled needs analytics.dial: the number or SIP URI the webhook "
                "connects callers to (set VOICE_AGENT_ANALYTICS__DIAL)"
            )
        self._dial = settings.analytics.dial
        self._settings = settings
        self._registry = registry
        self._calls = calls
        self._transcriber = transcriber
        self._count = count_bad_input
        self._awaiting_start = 0
        self._max_awaiting_start = max(MIN_AWAITING_START, registry.max_calls)
        self._open_streams: set[tuple[str, str]] = set()
        self._limiter = PerSourceLimiter(
            rate_per_s=settings.server.requests_per_source_per_s,
            burst=settings.server.request_burst_per_source,
        )
        self.router = APIRouter()
        for carrier in listen_only_carriers(settings):
            self._add_routes(carrier)

    def _add_routes(self, carrier: ListenOnlyCarrier) -> None:
        async def webhook(request: Request) -> Response:
            refusal = await refuse_webhook(
                request,
                carrier.provider,
                self._limiter,
                self._count_bad_input,
                f"{carrier.name}_analytics_webhook",
            )
            if refusal is not None:
                return refusal
            if not self._registry.has_capacity:
                logger.warning(f"{carrier.name} analytics: full or draining; call not recorded")
                return Response(dial_only_markup(self._dial), media_type="application/xml")
            form = await request.form()
            url = websocket_url(public_base_url(request, self._settings), carrier.ws_path)
            body = carrier.answer(url, str(form.get("CallSid", "")), self._dial)
            return Response(body, media_type="application/xml")

        async def stream(websocket: WebSocket) -> None:
            await self.serve_stream(websocket, carrier)

        self.router.add_api_route(f"/analytics/{carrier.name}", webhook, methods=["POST"])
        self.router.add_api_websocket_route(carrier.ws_path, stream)

    async def serve_stream(self, websocket: WebSocket, carrier: ListenOnlyCarrier) -> None:
        """One both-tracks stream, from accept to close (the guards of the agent's streams:
        a slot only after an authorized ``start``, one stream per call)."""
        await websocket.accept()
        if not self._registry.has_capacity:
            await _close_quietly(websocket, BUSY_CLOSE_CODE, "busy: call limit reached")
            return
        if self._awaiting_start >= self._max_awaiting_start:
            await _close_quietly(websocket, BUSY_CLOSE_CODE, "busy: too many streams starting")
            return
        self._awaiting_start += 1
        try:
            start = await authorized_start(
                websocket,
                carrier.provider,
                carrier.authorize,
                f"{carrier.name} analytics: stream",
                lambda: self._count_bad_input(f"{carrier.name}_analytics_start", "malformed"),
            )
        finally:
            self._awaiting_start -= 1
        if start is None:
            return
        key = (carrier.name, start.call_id)
        if key in self._open_streams:
            await _close_quietly(websocket, POLICY_CLOSE_CODE, "this call has a stream already")
            return
        try:
            call = self._registry.reserve(f"{carrier.name}-analytics")
        except CallLimitReached:
            await _close_quietly(websocket, BUSY_CLOSE_CODE, "busy: call limit reached")
            return
        call.attributes.update(start.attributes)
        self._open_streams.add(key)
        conversation = self._calls.open(call)
        try:
            await self._registry.run(
                call, self._listen(call, conversation, websocket, carrier.codec_of(start))
            )
        finally:
            self._open_streams.discard(key)
            self._calls.close(conversation)

    async def _listen(
        self, call: Call, conversation: Conversation, websocket: WebSocket, codec: str
    ) -> None:
        logger.info(f"call {call.id}: listen-only stream, both tracks ({codec})")
        tracks: dict[str, _Track] = {
            track: _Track(
                self._transcriber(
                    TELEPHONY_SAMPLE_RATE,
                    _relay(call, conversation, speaker, count_error=self._count_bad_input),
                ),
                codec,
            )
            for track, speaker in TRACK_SPEAKERS.items()
        }
        call.say_going_away = lambda: _close_quietly(
            websocket, GOING_AWAY_CLOSE_CODE, "server going away"
        )
        finished = False
        try:
            await asyncio.gather(*(track.session.start() for track in tracks.values()))
            finished = await self._read(call, websocket, tracks)
        finally:
            await _close_all(tracks, finish=finished)
            conversation.end()
            await _close_quietly(websocket, 1000, "call ended")

    async def _read(self, call: Call, websocket: WebSocket, tracks: dict[str, _Track]) -> bool:
        """Feed the tracks until the stream ends; ``True`` when it ended (not cancelled)."""
        report = self._bad_message_reporter(call)
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                call.end_because("connection lost")
                return True
            text = message.get("text")
            if text is None or len(text) > MAX_MESSAGE_CHARS:
                report("a binary or oversized message", str(message.get("bytes", b""))[:80])
                continue
            try:
                event = json.loads(text)
            except ValueError:
                report("not JSON", text)
                continue
            kind = event.get("event") if isinstance(event, dict) else None
            if kind == "stop":
                call.end_because("caller hung up")
                return True
            if kind != "media":
                continue
            media = event.get("media")
            track = tracks.get(media.get("track", "inbound")) if isinstance(media, dict) else None
            payload = media.get("payload") if isinstance(media, dict) else None
            if track is None or not isinstance(payload, str):
                report("a media message without a known track or a payload", text)
                continue
            try:
                g711 = base64.b64decode(payload, validate=True)
            except ValueError:
                report("a media payload that is not base64", text)
                continue
            if not track.budget.admit(len(g711)):
                report("audio faster than real time (dropped)", text[:80])
                continue
            await track.take(g711)

    def _count_bad_input(self, kind: str, why: str) -> None:
        if self._count is not None:
            self._count(kind, why)

    def _bad_message_reporter(self, call: Call) -> Callable[[str, str], None]:
        return bad_message_reporter(call, self._count_bad_input)


class _Track:
    """One track's pending audio and real-time budget, and its transcriber.

    A track's frame is fed in a task started eagerly (it runs at once, up to its first
    wait), so the stream's reader goes on to the other track while this one waits for the
    shared VAD's batch: both tracks' windows then go into the same batch, instead of the
    reader waiting for two batches per frame. Frames of one track stay in order: a frame
    waits for the one before it (done long since, 60 ms earlier, unless the server is late).
    """

    def __init__(self, session: TrackSession, codec: str) -> None:
        self.session = session
        self.codec = codec
        self.budget = RealTimeBudget(TELEPHONY_SAMPLE_RATE, burst_s=AUDIO_BURST_S)
        self._pending = bytearray()
        self._frame_bytes = TELEPHONY_SAMPLE_RATE * FRAME_MS // 1000
        self._feeding: asyncio.Task[None] | None = None

    async def take(self, g711: bytes) -> None:
        self._pending += g711
        if len(self._pending) >= self._frame_bytes:
            await self._feed()

    async def flush(self) -> None:
        if self._pending:
            await self._feed()
        await self.settle()

    async def settle(self, *, cancel: bool = False) -> None:
        """Wait for the frame in flight (its failure raises here), or cancel it."""
        if self._feeding is not None:
            feeding, self._feeding = self._feeding, None
            if cancel:
                feeding.cancel()
                await asyncio.gather(feeding, return_exceptions=True)
            else:
                await feeding

    async def _feed(self) -> None:
        pcm = decode_g711(bytes(self._pending), self.codec)
        self._pending.clear()
        if self._feeding is not None and self._feeding.done():
            feeding, self._feeding = self._feeding, None
            feeding.result()  # a failed frame fails the stream, as an awaited one did
        else:
            await self.settle()
        self._feeding = asyncio.Task(
            self.session.feed(pcm), loop=asyncio.get_running_loop(), eager_start=True
        )


async def _close_all(tracks: dict[str, _Track], *, finish: bool) -> None:
    async def close(track: _Track) -> None:
        try:
            if finish:
                await track.flush()
            else:
                await track.settle(cancel=True)
        finally:
            await track.session.close(finish=finish)

    results = await asyncio.gather(
        *(close(track) for track in tracks.values()), return_exceptions=True
    )
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
            logger.opt(exception=result).error("analytics: a track's transcriber failed to close")


def _relay(
    call: Call,
    conversation: Conversation,
    speaker: Speaker,
    *,
    count_error: Callable[[str, str], None],
) -> Callable[[TranscriptEvent], None]:
    """One track's transcript events, into the conversation as that speaker (STT errors into
    the call's record and ``voice_agent_errors_total{kind="analytics_stt"}``)."""

    def on_event(event: TranscriptEvent) -> None:
        if event.kind == "speech_started" and event.audio_s is not None:
            conversation.speech_started(speaker, event.audio_s)
        elif event.kind == "speech_stopped" and event.audio_s is not None:
            conversation.speech_stopped(speaker, event.audio_s)
        elif event.kind == "interim":
            conversation.interim(speaker, event.text)
        elif event.kind == "final":
            conversation.final(speaker, event.text)
        elif event.kind == "error":
            count_error("analytics_stt", "fatal" if event.fatal else "recoverable")
            if len(call.errors) < MAX_ERRORS:
                call.errors.append(
                    {"processor": f"stt ({speaker})", "fatal": event.fatal, "message": event.text}
                )

    return on_event
