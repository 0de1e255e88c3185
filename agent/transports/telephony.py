"""Phone calls through media-stream WebSockets (Twilio Media Streams first).

Twilio's flow: the number's voice webhook ``POST /telephony/twilio`` answers TwiML that connects
the call to ``WS /telephony/twilio/ws``; Twilio then sends ``connected``, ``start`` (stream and
call SIDs), 20 ms 8 kHz μ-law ``media`` frames, ``mark`` and finally ``stop``. Pipecat's
:class:`TwilioFrameSerializer` converts μ-law to PCM and back and sends ``clear`` on an
interruption, so Twilio drops bot audio it has queued when the caller barges in (ours,
:mod:`agent.fastpath.twilio_serializer`, hands caller audio on in 60 ms frames). The
transport (:class:`MediaStreamTransport`) asks the pipeline to run at the phone's 8 kHz, so
the serializer never resamples, and to leave out RTVI, which a phone does not speak.

Security: with ``twilio.auth_token`` set, the webhook checks ``X-Twilio-Signature`` (403 and
nothing started when missing or wrong) and hands Twilio a per-call token as a ``<Parameter>``;
the WebSocket accepts only a ``start`` carrying the token for its CallSid. The signature is
checked before the per-source limit, and only requests without a valid one count against it:
behind a proxy, strangers flooding the webhook from "the same address" as the carrier cannot
get the carrier's calls refused (429).

Call control (Twilio, with ``twilio.account_sid`` and ``twilio.auth_token``): a call's
transport carries a :class:`~agent.transports.call_control.TwilioCallControl`, so the model's
``transfer_call`` tool can hand the call over (REST update with ``<Dial>``; the whisper for the
person who answers is served at ``POST /telephony/twilio/whisper``). Outbound calls
(:mod:`agent.transports.outbound`) hold their slot from the moment they are placed; their
stream claims it here.

Another provider is one more :class:`TelephonyProvider`: its webhook answer, its ``start``
parsing and its Pipecat serializer; :class:`TelephonyCalls` runs the rest. Telnyx is the
second (:mod:`agent.transports.telnyx`).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable
from urllib.parse import parse_qsl, urlsplit
from xml.sax.saxutils import escape, quoteattr

from fastapi import APIRouter, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import Response
from loguru import logger
from pipecat.serializers.base_serializer import FrameSerializer
from pipecat.transports.websocket.fastapi import FastAPIWebsocketParams
from starlette.requests import HTTPConnection

from agent.calls import Call, CallLimitReached, CallRegistry
from agent.config import Settings
from agent.credentials import same_secret
from agent.fastpath.media_stream_reader import RealTimeBudget
from agent.fastpath.twilio_serializer import BatchingTwilioSerializer
from agent.fastpath.vad_hosting_transport import VADHostingWebsocketTransport
from agent.interpreter.sessions import (
    PARTY_PARAMETER,
    SESSION_PARAMETER,
    InterpreterError,
    InterpreterSessions,
)
from agent.rate_limit import PerSourceLimiter
from agent.transports.call_control import CallControl, CallControlOutputTransport, TwilioCallControl
from agent.transports.stream_tokens import StreamTokens
from agent.transports.twilio_rest import TwilioREST, twiml_say
from agent.worker import CallTaskFactory, run_call_pipeline

TELEPHONY_SAMPLE_RATE = 8000
"""The audio rate of a phone call's media stream (8 kHz μ-law)."""

INPUT_FRAME_MS = 60
"""Caller audio goes down the pipeline in frames this long (Twilio sends 20 ms): a third of
the per-call CPU for at most 40 ms of input delay (see :mod:`agent.fastpath.twilio_serializer`)."""

AUDIO_BURST_S = 2.0
"""Caller audio may run this far ahead of real time (network jitter, a catching-up client);
beyond it, audio is dropped and counted."""

START_TIMEOUT_S = 5.0
"""How long a fresh media-stream socket may take to send its ``start`` message (Twilio sends it
at once); until then it holds no call slot."""

MIN_AWAITING_START = 20
"""Sockets that may wait for their ``start`` at once: ``server.max_calls``, at least this."""

WHISPER_PATH = "/telephony/twilio/whisper"

MAX_WEBHOOK_BYTES = 64 * 1024
"""A carrier's webhook is a form of a few hundred bytes; a larger body is refused: before it is
read when its Content-Length says so, as soon as it passes the cap when it comes chunked."""

BUSY_CLOSE_CODE = 1013  # "try again later"
GOING_AWAY_CLOSE_CODE = 1001  # the server is draining
POLICY_CLOSE_CODE = 1008


# ---------------------------------------------------------------------------- Twilio helpers


def twilio_signature(url: str, params: dict[str, str], auth_token: str) -> str:
    """Twilio's request signature: base64(HMAC-SHA1(token, url + each key+value, keys sorted))."""
    payload = url + "".join(key + params[key] for key in sorted(params))
    digest = hmac.new(auth_token.encode(), payload.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def valid_twilio_signature(
    url: str, params: dict[str, str], auth_token: str, signature: str | None
) -> bool:
    if not signature:
        return False
    return same_secret(signature, twilio_signature(url, params, auth_token))


def twilio_stream_tokens(auth_token: str) -> StreamTokens:
    """The tokens that tie a media stream to a webhook Twilio signed: keyed on the account's
    auth token, so every replica can check them; each opens one stream of its call."""
    return StreamTokens(auth_token, purpose="twilio-stream")


def twiml_stream(url: str, parameters: dict[str, str] | None = None) -> str:
    params = "".join(
        f"<Parameter name={quoteattr(k)} value={quoteattr(v)}/>"
        for k, v in (parameters or {}).items()
    )
    stream = (
        f"<Stream url={quoteattr(url)}>{params}</Stream>"
        if params
        else (f"<Stream url={quoteattr(url)}/>")
    )
    return f'<?xml version="1.0" encoding="UTF-8"?><Response><Connect>{stream}</Connect></Response>'


def twiml_say_and_hang_up(text: str) -> str:
    """TwiML that tells the caller ``text`` and ends the call."""
    return (
        '<?xml version="1.0" encoding="UTF-8"?><Response>'
        f"<Say>{escape(text)}</Say><Hangup/></Response>"
    )


def twiml_reject_busy() -> str:
    return '<?xml version="1.0" encoding="UTF-8"?><Response><Reject reason="busy"/></Response>'


def public_base_url(request: HTTPConnection, settings: Settings) -> str:
    """``scheme://host`` as the outside world reaches this server.

    ``server.public_url`` wins; otherwise the request's Host and scheme (``X-Forwarded-Proto``
    when a proxy sets it).
    """
    if settings.server.public_url:
        return settings.server.public_url.rstrip("/")
    scheme = request.headers.get("x-forwarded-proto", request.url.scheme).split(",")[0].strip()
    host = (
        request.headers.get("x-forwarded-host")
        or request.headers.get("host")
        or (request.url.netloc)
    )
    return f"{scheme}://{host}"


def http_base_url(connection: HTTPConnection, settings: Settings) -> str:
    """:func:`public_base_url` as ``http(s)://`` (from a WebSocket too)."""
    base = public_base_url(connection, settings)
    return base.replace("ws://", "http://", 1).replace("wss://", "https://", 1)


def twilio_rest(settings: Settings) -> TwilioREST | None:
    """The REST client for ``twilio.*``, or ``None`` without both credentials."""
    twilio = settings.twilio
    if not (twilio.account_sid and twilio.auth_token):
        return None
    return TwilioREST(
        account_sid=twilio.account_sid,
        auth_token=twilio.auth_token,
        base_url=twilio.api_base_url,
    )


def websocket_url(base_url: str, path: str) -> str:
    """The ``wss://`` (or plain ``ws://`` for http on a loopback host) URL for ``path``."""
    parts = urlsplit(base_url)
    local = (parts.hostname or "") in {"localhost", "127.0.0.1", "::1"}
    scheme = "ws" if parts.scheme == "http" and local else "wss"
    return f"{scheme}://{parts.netloc}{parts.path.rstrip('/')}{path}"


def _declared_length(request: Request) -> int:
    """The request's Content-Length (0 when absent or not a number)."""
    value = request.headers.get("content-length", "0")
    return int(value) if value.isdigit() else 0


async def _body_within_cap(request: Request) -> bool:
    """Read the body, stopping once it passes :data:`MAX_WEBHOOK_BYTES` (``False``): a chunked
    body declares no length, and the signature check would otherwise read all of it into
    memory. What was read is kept where Starlette's ``body()`` and ``form()`` look first."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_WEBHOOK_BYTES:
            return False
        chunks.append(chunk)
    request._body = b"".join(chunks)  # Starlette's own cache of the body
    return True


async def refuse_webhook(
    request: Request,
    provider: TelephonyProvider,
    limiter: PerSourceLimiter,
    count_bad_input: Callable[[str, str], None],
    kind: str,
) -> Response | None:
    """The answer to a carrier webhook that must not be served (too large, unsigned past the
    source's limit, badly signed), or ``None``. The signature is checked first: a carrier's
    signed webhook never waits in a stranger's bucket (``kind`` names the counter)."""
    if _declared_length(request) > MAX_WEBHOOK_BYTES or not await _body_within_cap(request):
        return Response("webhook body too large\n", 413, media_type="text/plain")
    check = await provider.verify_webhook(request)
    if check.signed:
        return None
    source = request.client.host if request.client else "unknown"
    if not limiter.allow(source):
        count_bad_input(kind, "rate limited")
        return Response(
            "too many webhook requests from this address; slow down\n",
            status_code=429,
            media_type="text/plain",
            headers={"Retry-After": str(limiter.retry_after_s)},
        )
    if check.refusal is not None:
        logger.warning(check.reason)
        return check.refusal
    return None


# ---------------------------------------------------------------------------- providers


@dataclass
class StreamStart:
    """What a provider's ``start`` message tells us about the call."""

    stream_id: str
    call_id: str
    parameters: dict[str, str] = field(default_factory=dict)
    query: dict[str, str] = field(default_factory=dict)
    """The media-stream URL's query parameters (a carrier without custom ``start`` parameters
    gets its stream token there); :meth:`TelephonyCalls.serve_stream` fills it in."""
    attributes: dict[str, str] = field(default_factory=dict)
    """Carrier facts for ``Call.attributes`` (call SID, codec, numbers …)."""


@dataclass(frozen=True)
class WebhookCheck:
    """What the carrier's signature says about a webhook request."""

    signed: bool
    """The signature holds: the carrier sent it, and it skips the per-source limit."""
    refusal: Response | None = None
    """The 403 for a missing or wrong signature; ``None`` when signed or when no key is set
    to check one with (then the request is neither trusted nor refused)."""
    reason: str = ""
    """Why it was refused, for the log line (written only when the 403 is sent: a flood
    that is answered 429 does not flood the log too)."""


UNCHECKED = WebhookCheck(signed=False)


class TelephonyProvider(Protocol):
    """One carrier's media streams: its webhook answer, its ``start``, its serializer."""

    name: str
    ws_path: str

    async def verify_webhook(self, request: Request) -> WebhookCheck:
        """The webhook's signature, checked (cheap: one HMAC or Ed25519 verification)."""
        ...

    async def answer_webhook(self, request: Request, *, busy: bool) -> Response:
        """The answer to a webhook :meth:`verify_webhook` did not refuse."""
        ...

    def parse_start(self, message: dict[str, Any]) -> StreamStart | None:
        """The call's identity from a ``start`` message; ``None`` for messages before it."""
        ...

    def authorize(self, start: StreamStart) -> bool: ...

    def serializer(
        self,
        start: StreamStart,
        *,
        on_stop: Callable[[], None],
        on_bad_message: Callable[[str, str], None],
    ) -> FrameSerializer:
        """The call's serializer; it reports a malformed message (why, and the message cut
        short) to ``on_bad_message`` and ignores it, and Twilio's ``stop`` to ``on_stop``."""
        ...


@runtime_checkable
class ControlsCalls(Protocol):
    """A provider whose calls can be acted on (transferred) through its API."""

    def call_control(
        self, call: Call, start: StreamStart, *, base_url: str
    ) -> CallControl | None: ...


class ReservedCalls(Protocol):
    """Calls that hold a slot before their media stream arrives (outbound calls)."""

    def expecting(self) -> bool:
        """Whether any reserved call still waits for its stream."""
        ...

    def claim(self, carrier_call_id: str) -> Call | None:
        """The call reserved for this carrier call id, handed over once; else ``None``."""
        ...


class TwilioProvider:
    name = "twilio"
    ws_path = "/telephony/twilio/ws"

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._tokens: StreamTokens | None = None

    @property
    def _auth_token(self) -> str | None:
        return self._settings.twilio.auth_token

    @property
    def stream_tokens(self) -> StreamTokens:
        """This replica's stream tokens (their use is remembered here); with auth on only."""
        if self._tokens is None:
            self._tokens = twilio_stream_tokens(self._auth_token or "")
        return self._tokens

    async def verify_webhook(self, request: Request) -> WebhookCheck:
        token = self._auth_token
        if not token:
            return UNCHECKED
        body = (await request.body()).decode("utf-8", errors="replace")
        form = dict(parse_qsl(body, keep_blank_values=True))
        signed_url = self._signed_url(request)
        if valid_twilio_signature(
            signed_url, form, token, request.headers.get("x-twilio-signature")
        ):
            return WebhookCheck(signed=True)
        return WebhookCheck(
            signed=False,
            refusal=Response(
                "invalid or missing X-Twilio-Signature (check twilio.auth_token and "
                "server.public_url: the signature covers the exact public URL)\n",
                status_code=403,
                media_type="text/plain",
            ),
            reason=f"Twilio request refused: bad or missing signature for {signed_url}",
        )

    async def answer_webhook(self, request: Request, *, busy: bool) -> Response:
        body = (await request.body()).decode("utf-8", errors="replace")
        form = dict(parse_qsl(body, keep_blank_values=True))
        token = self._auth_token
        if busy:
            return Response(twiml_reject_busy(), media_type="application/xml")
        url = websocket_url(public_base_url(request, self._settings), self.ws_path)
        parameters: dict[str, str] = {}
        call_sid = form.get("CallSid", "")
        if token:
            parameters["token"] = self.stream_tokens.issue(call_sid)
        for name in (SESSION_PARAMETER, PARTY_PARAMETER):  # an interpreted session's party
            if name in request.query_params:
                parameters[name] = request.query_params[name]
        return Response(twiml_stream(url, parameters), media_type="application/xml")

    def call_control(self, call: Call, start: StreamStart, *, base_url: str) -> CallControl | None:
        rest = twilio_rest(self._settings)
        if rest is None:
            return None
        whisper = f"{base_url}{WHISPER_PATH}" if self._settings.transfer.whisper else None
        return TwilioCallControl(rest, call=call, call_sid=start.call_id, whisper_url=whisper)

    async def answer_whisper(self, request: Request) -> Response:
        """TwiML for the person a transfer reaches, before the caller is connected."""
        refused = await self.check_signature(request)
        if refused is not None:
            return refused
        return Response(
            twiml_say(self._settings.transfer.whisper or ""), media_type="application/xml"
        )

    async def check_signature(self, request: Request) -> Response | None:
        """A 403 for a request Twilio did not sign (``twilio.auth_token`` set), else ``None``."""
        check = await self.verify_webhook(request)
        if check.refusal is not None:
            logger.warning(check.reason)
        return check.refusal

    def _signed_url(self, request: Request) -> str:
        if not self._settings.server.public_url:
            return str(request.url)
        query = f"?{request.url.query}" if request.url.query else ""
        return self._settings.server.public_url.rstrip("/") + request.url.path + query

    def parse_start(self, message: dict[str, Any]) -> StreamStart | None:
        if message.get("event") != "start":
            return None
        start = message.get("start") or {}
        if not isinstance(start, dict):
            raise ValueError("Twilio 'start' must be an object")
        stream_sid = message.get("streamSid") or start.get("streamSid")
        if not isinstance(stream_sid, str) or not stream_sid:
            raise ValueError("Twilio 'start' message has no streamSid")
        call_sid = start.get("callSid") or ""
        custom = start.get("customParameters") or {}
        if not isinstance(call_sid, str) or not isinstance(custom, dict):
            raise ValueError("Twilio 'start' has a malformed callSid or customParameters")
        return StreamStart(
            stream_id=stream_sid,
            call_id=call_sid,
            parameters={str(k): str(v) for k, v in custom.items()},
            attributes={"call_sid": call_sid, "stream_sid": stream_sid},
        )

    def authorize(self, start: StreamStart) -> bool:
        token = self._auth_token
        if not token:
            return True
        return self.stream_tokens.redeem(start.parameters.get("token", ""), start.call_id)

    def serializer(
        self,
        start: StreamStart,
        *,
        on_stop: Callable[[], None],
        on_bad_message: Callable[[str, str], None],
    ) -> FrameSerializer:
        return BatchingTwilioSerializer(
            start.stream_id,
            start.call_id,
            on_stop=on_stop,
            on_bad_message=on_bad_message,
            frame_ms=INPUT_FRAME_MS,
            budget=RealTimeBudget(
                TELEPHONY_SAMPLE_RATE, burst_s=AUDIO_BURST_S
            ),  # μ-law: 1 B/sample
        )


# ---------------------------------------------------------------------------- calls


class MediaStreamTransport(VADHostingWebsocketTransport):
    """A phone call's media-stream WebSocket. Its traits (:mod:`agent.transports.traits`):
    its audio is 8 kHz, its client speaks no RTVI, its input can host the VAD, and it carries a
    phone call (keypresses; ``call_control`` when the carrier's API is configured)."""

    pipeline_sample_rate = TELEPHONY_SAMPLE_RATE
    speaks_rtvi = False

    def __init__(
        self,
        websocket: WebSocket,
        params: FastAPIWebsocketParams,
        *,
        call_control: CallControl | None = None,
    ) -> None:
        super().__init__(websocket, params)
        self._call_control = call_control
        self._output = CallControlOutputTransport(
            self, self._client, self._params, name=self._output_name, control=call_control
        )

    @property
    def call_control(self) -> CallControl | None:
        return self._call_control


class TelephonyCalls:
    """The webhook and media-stream routes of each provider, running one pipeline per call."""

    def __init__(
        self,
        *,
        settings: Settings,
        registry: CallRegistry,
        task_factory: CallTaskFactory,
        providers: list[TelephonyProvider] | None = None,
        count_bad_input: Callable[[str, str], None] | None = None,
        reserved: ReservedCalls | None = None,
        interpreter: InterpreterSessions | None = None,
    ) -> None:
        self._settings = settings
        self._reserved = reserved
        self._interpreter = interpreter
        self._registry = registry
        self._task_factory = task_factory
        self._count = count_bad_input
        self._awaiting_start = 0
        self._open_streams: set[tuple[str, str]] = set()  # (carrier, call id) streaming now
        self._limiter = PerSourceLimiter(
            rate_per_s=settings.server.requests_per_source_per_s,
            burst=settings.server.request_burst_per_source,
        )
        self._max_awaiting_start = max(MIN_AWAITING_START, registry.max_calls)
        self.router = APIRouter()
        default: list[TelephonyProvider] = [TwilioProvider(settings)]
        if settings.telnyx.public_key:
            from agent.transports.telnyx import TelnyxProvider  # it builds on this module

            default.append(TelnyxProvider(settings))
        for provider in providers or default:
            self._add_routes(provider)
            if isinstance(provider, TwilioProvider) and settings.transfer.whisper:
                self.router.add_api_route(WHISPER_PATH, provider.answer_whisper, methods=["POST"])

    def _add_routes(self, provider: TelephonyProvider) -> None:
        async def webhook(request: Request) -> Response:
            refusal = await refuse_webhook(
                request, provider, self._limiter, self._count_bad_input, f"{provider.name}_webhook"
            )
            if refusal is not None:
                return refusal
            if SESSION_PARAMETER in request.query_params:
                why = self._cannot_join(
                    request.query_params.get(SESSION_PARAMETER),
                    request.query_params.get(PARTY_PARAMETER),
                )
                if why is not None:  # the caller hears why, instead of a dead line
                    logger.warning(f"{provider.name}: interpreted call refused: {why}")
                    return Response(twiml_say_and_hang_up(why), media_type="application/xml")
            return await provider.answer_webhook(request, busy=not self._registry.has_capacity)

        async def media(websocket: WebSocket) -> None:
            await self.serve_stream(websocket, provider)

        self.router.add_api_route(f"/telephony/{provider.name}", webhook, methods=["POST"])
        self.router.add_api_websocket_route(provider.ws_path, media)

    async def serve_stream(self, websocket: WebSocket, provider: TelephonyProvider) -> None:
        """One media stream, from accept to close.

        A call slot is taken only after a valid (and, with auth on, authorized) ``start``:
        sockets still waiting for theirs have their own short timeout and cap, so strangers
        that connect and say nothing cannot take the slots real callers need.
        """
        await websocket.accept()
        expecting = self._reserved is not None and self._reserved.expecting()
        if not self._registry.has_capacity and not expecting:
            await _close_quietly(websocket, BUSY_CLOSE_CODE, "busy: call limit reached")
            return
        if self._awaiting_start >= self._max_awaiting_start:
            logger.warning(f"{provider.name}: {self._awaiting_start} streams wait for 'start'")
            await _close_quietly(websocket, BUSY_CLOSE_CODE, "busy: too many streams starting")
            return
        self._awaiting_start += 1
        try:
            start = await authorized_start(
                websocket,
                provider,
                provider.authorize,
                f"{provider.name}: media stream",
                lambda: self._count_bad_input(f"{provider.name}_start"),
            )
        finally:
            self._awaiting_start -= 1
        if start is None:
            return
        named = start.parameters if SESSION_PARAMETER in start.parameters else start.query
        session_id, role = named.get(SESSION_PARAMETER), named.get(PARTY_PARAMETER)
        interpreted = session_id is not None
        if interpreted:
            why = self._cannot_join(session_id, role)
            if why is not None:
                logger.warning(f"{provider.name}: interpreted stream refused: {why}")
                await _close_quietly(websocket, POLICY_CLOSE_CODE, why[:120])
                return
        carrier_call = (provider.name, start.call_id)
        if carrier_call in self._open_streams:
            # One stream per call: a second one (a replayed token) would also get the call's
            # controls (transfer) and its audio.
            logger.warning(f"{provider.name}: a second media stream for one call refused")
            await _close_quietly(websocket, POLICY_CLOSE_CODE, "this call has a stream already")
            return
        reserved = self._reserved.claim(start.call_id) if self._reserved else None
        try:
            call = reserved or self._registry.reserve(provider.name)
        except CallLimitReached:
            await _close_quietly(websocket, BUSY_CLOSE_CODE, "busy: call limit reached")
            return
        call.attributes.update(start.attributes)
        if interpreted and self._interpreter is not None:  # checked above, no await since
            self._interpreter.join(session_id, role, call)
        self._open_streams.add(carrier_call)
        try:
            await self._registry.run(call, self._stream(call, websocket, provider, start))
        finally:
            self._open_streams.discard(carrier_call)

    async def _stream(
        self, call: Call, websocket: WebSocket, provider: TelephonyProvider, start: StreamStart
    ) -> None:
        logger.info(
            f"call {call.id}: {provider.name} call {start.call_id} stream {start.stream_id}"
        )
        control = (
            provider.call_control(call, start, base_url=http_base_url(websocket, self._settings))
            if isinstance(provider, ControlsCalls)
            else None
        )

        stop_tasks: list[asyncio.Task[Any]] = []
        task_holder: list[Any] = []

        def on_stop() -> None:
            logger.info(f"call {call.id}: {provider.name} sent stop")
            call.end_because("caller hung up")  # unless a transfer said otherwise first
            if task_holder and not stop_tasks:
                stop_tasks.append(asyncio.create_task(task_holder[0].cancel(reason="stream stop")))

        transport = MediaStreamTransport(
            websocket=websocket,
            params=FastAPIWebsocketParams(
                audio_in_enabled=True,
                audio_out_enabled=True,
                add_wav_header=False,
                serializer=provider.serializer(
                    start, on_stop=on_stop, on_bad_message=self._bad_message_reporter(call)
                ),
            ),
            call_control=control,
        )
        task = self._task_factory(transport, call)
        call.say_going_away = lambda: _close_quietly(
            websocket, GOING_AWAY_CLOSE_CODE, "server going away"
        )
        task_holder.append(task)

        @transport.event_handler("on_client_disconnected")
        async def _hung_up(_transport: Any, _ws: Any) -> None:
            logger.info(f"call {call.id}: media stream closed by the caller")
            call.end_because("connection lost")  # closed without a 'stop'
            await task.cancel(reason="caller hung up")

        try:
            await run_call_pipeline(task)
        finally:
            if stop_tasks:
                await asyncio.gather(*stop_tasks, return_exceptions=True)
            await _close_quietly(websocket, 1000, "call ended")  # no-op if already closed

    def _cannot_join(self, session_id: str | None, role: str | None) -> str | None:
        """Why a call cannot be that party of an interpreted session, or ``None``."""
        if self._interpreter is None:
            return "this server has no interpreted sessions"
        try:
            self._interpreter.check(session_id, role)
        except InterpreterError as exc:
            return str(exc)
        return None

    def _count_bad_input(self, kind: str, why: str = "malformed") -> None:
        if self._count is not None:
            self._count(kind, why)

    def _bad_message_reporter(self, call: Call) -> Callable[[str, str], None]:
        return bad_message_reporter(call, self._count_bad_input)


async def authorized_start(
    websocket: WebSocket,
    provider: TelephonyProvider,
    authorize: Callable[[StreamStart], bool],
    what: str,
    count_malformed: Callable[[], None],
) -> StreamStart | None:
    """The stream's ``start``, read within :data:`START_TIMEOUT_S` and passed by ``authorize``
    (its token); ``None`` once the socket is closed with the reason, logged as ``what``, when
    it is not."""
    try:
        start = await asyncio.wait_for(_read_start(websocket, provider), START_TIMEOUT_S)
    except (TimeoutError, ValueError, WebSocketDisconnect) as exc:
        why = "no 'start' in time" if isinstance(exc, TimeoutError) else str(exc)[:200]
        logger.warning(f"{what} refused: {why or type(exc).__name__}")
        count_malformed()
        await _close_quietly(websocket, POLICY_CLOSE_CODE, f"expected a 'start': {why}"[:120])
        return None
    start.query = dict(websocket.query_params)
    if not authorize(start):
        logger.warning(f"{what} token missing or wrong; closing")
        await _close_quietly(websocket, POLICY_CLOSE_CODE, "unauthorized stream")
        return None
    return start


async def _read_start(websocket: WebSocket, provider: TelephonyProvider) -> StreamStart:
    """Read messages until ``start``; anything malformed before it raises ``ValueError``."""
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(message.get("code", 1000))
        text = message.get("text")
        if text is None:
            raise ValueError("a binary frame; media-stream messages are JSON text")
        try:
            event = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"not JSON: {text[:80]!r}") from exc
        if not isinstance(event, dict):
            raise ValueError("expected a JSON object")
        start = provider.parse_start(event)
        if start is not None:
            return start


async def _close_quietly(websocket: WebSocket, code: int, reason: str) -> None:
    from starlette.websockets import WebSocketState

    if websocket.application_state == WebSocketState.DISCONNECTED:
        return
    try:
        await websocket.close(code=code, reason=reason)
    except (RuntimeError, OSError, WebSocketDisconnect):
        pass  # the caller hung up first: nothing left to close


def bad_message_reporter(
    call: Call, count_bad_input: Callable[[str, str], None]
) -> Callable[[str, str], None]:
    """A stream's report of a malformed message: every one is counted (as
    ``<call kind>_message``), only the first is logged, cut short: a broken or hostile peer
    cannot flood the log."""
    logged = False

    def report(why: str, sample: str) -> None:
        nonlocal logged
        count_bad_input(f"{call.kind}_message", why)
        if not logged:
            logged = True
            logger.warning(
                f"call {call.id}: ignoring media-stream input ({why}): "
                f"{sample[:200]!r} (further ones are only counted)"
            )

    return report
