"""Phone calls through media-stream WebSockets (Twilio Media Streams first).

Twilio's flow: the number's voice webhook ``POST /telephony/twilio`` answers TwiML that connects
the call to ``WS /telephony/twilio/ws``; Twilio then sends ``connected``, ``start`` (stream and
call SIDs), 20 ms 8 kHz μ-law ``media`` frames, ``mark`` and finally ``stop``. Pipecat's
:class:`TwilioFrameSerializer` converts μ-law to PCM and back and sends ``clear`` on an
interruption, so Twilio drops bot audio it has queued when the caller barges in. The
transport (:class:`MediaStreamTransport`) asks the pipeline to run at the phone's 8 kHz, so
the serializer never resamples, and to leave out RTVI, which a phone does not speak.

Security: with ``twilio.auth_token`` set, the webhook checks ``X-Twilio-Signature`` (403 and
nothing started when missing or wrong) and hands Twilio a per-call token as a ``<Parameter>``;
the WebSocket accepts only a ``start`` carrying the token for its CallSid.

Another provider (Telnyx, Plivo …) is one more :class:`TelephonyProvider`: its webhook answer,
its ``start`` parsing and its Pipecat serializer; :class:`TelephonyCalls` runs the rest.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlsplit
from xml.sax.saxutils import quoteattr

from fastapi import APIRouter, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import Response
from loguru import logger
from pipecat.audio.utils import ulaw_to_pcm
from pipecat.audio.vad.vad_analyzer import VADAnalyzer
from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    Frame,
    InputAudioRawFrame,
    StartFrame,
    VADParamsUpdateFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessorSetup
from pipecat.serializers.base_serializer import FrameSerializer
from pipecat.serializers.twilio import TwilioFrameSerializer
from pipecat.transports.websocket.fastapi import (
    FastAPIWebsocketInputTransport,
    FastAPIWebsocketParams,
    FastAPIWebsocketTransport,
)

from agent.calls import Call, CallLimitReached, CallRegistry
from agent.config import Settings
from agent.transports import CallLogObserver, TaskFactory, run_pipeline
from agent.transports.inline_vad import InlineVAD

TELEPHONY_SAMPLE_RATE = 8000
"""The audio rate of a phone call's media stream (8 kHz μ-law)."""

INPUT_FRAME_MS = 60
"""Caller audio goes down the pipeline in frames this long (Twilio sends 20 ms). Every
pipeline frame costs the same Pipecat queue hops and observer events whatever its length, so
three media messages per frame cut the server's per-call CPU by about a third
(``bench/capacity.py``), for at most 40 ms of input delay. (At 16 kHz, Pipecat's SOXR
resampler in the serializer already bunched input into ~95 ms bursts.)"""

START_TIMEOUT_S = 10.0
"""How long a fresh media-stream socket may take to send its ``start`` message."""

BUSY_CLOSE_CODE = 1013  # "try again later"
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
    return hmac.compare_digest(twilio_signature(url, params, auth_token), signature)


def stream_token(call_sid: str, auth_token: str) -> str:
    """A per-call secret that ties the media stream to a webhook Twilio signed."""
    return hmac.new(auth_token.encode(), b"stream:" + call_sid.encode(), hashlib.sha256).hexdigest()


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


def twiml_reject_busy() -> str:
    return '<?xml version="1.0" encoding="UTF-8"?><Response><Reject reason="busy"/></Response>'


def public_base_url(request: Request, settings: Settings) -> str:
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


def websocket_url(base_url: str, path: str) -> str:
    """The ``wss://`` (or plain ``ws://`` for http on a loopback host) URL for ``path``."""
    parts = urlsplit(base_url)
    local = (parts.hostname or "") in {"localhost", "127.0.0.1", "::1"}
    scheme = "ws" if parts.scheme == "http" and local else "wss"
    return f"{scheme}://{parts.netloc}{parts.path.rstrip('/')}{path}"


# ---------------------------------------------------------------------------- providers


@dataclass
class StreamStart:
    """What a provider's ``start`` message tells us about the call."""

    stream_id: str
    call_id: str
    parameters: dict[str, str] = field(default_factory=dict)


class TelephonyProvider(Protocol):
    name: str

    async def answer_webhook(self, request: Request, *, busy: bool) -> Response: ...

    def parse_start(self, message: dict[str, Any]) -> StreamStart | None:
        """The call's identity from a ``start`` message; ``None`` for messages before it."""
        ...

    def authorize(self, start: StreamStart) -> bool: ...

    def serializer(self, start: StreamStart, *, on_stop: Any) -> FrameSerializer: ...


class _TwilioSerializer(TwilioFrameSerializer):
    """Twilio's serializer, plus a callback when Twilio says the stream stopped, and caller
    audio handed on in ``INPUT_FRAME_MS`` frames instead of Twilio's 20 ms ones."""

    def __init__(self, start: StreamStart, on_stop: Any) -> None:
        super().__init__(
            start.stream_id,
            start.call_id,
            params=TwilioFrameSerializer.InputParams(auto_hang_up=False),
        )
        self._on_stop = on_stop
        self._pending = bytearray()  # μ-law not yet handed to the pipeline
        self._frame_bytes = TELEPHONY_SAMPLE_RATE * INPUT_FRAME_MS // 1000

    async def deserialize(self, data: str | bytes) -> Frame | None:
        try:
            message = json.loads(data)
        except ValueError:
            return await super().deserialize(data)  # logs what it could not read
        if not isinstance(message, dict):  # valid JSON, but no Twilio message: Pipecat's
            logger.warning(f"ignoring a media-stream message that is not an object: {data!r:.80}")
            return None  # serializer would raise on it and end the call
        event = message.get("event")
        if event == "media":
            payload = (message.get("media") or {}).get("payload")
            if not payload:
                return None
            self._pending += base64.b64decode(payload)
            if len(self._pending) < self._frame_bytes:
                return None
            ulaw = bytes(self._pending)
            self._pending.clear()
            pcm = await ulaw_to_pcm(
                ulaw, self._twilio_sample_rate, self._sample_rate, self._input_resampler
            )
            if not pcm:
                return None
            return InputAudioRawFrame(audio=pcm, num_channels=1, sample_rate=self._sample_rate)
        if event == "stop":
            self._on_stop()
            return None
        return await super().deserialize(data)


class TwilioProvider:
    name = "twilio"
    ws_path = "/telephony/twilio/ws"

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    @property
    def _auth_token(self) -> str | None:
        return self._settings.twilio.auth_token

    async def answer_webhook(self, request: Request, *, busy: bool) -> Response:
        body = (await request.body()).decode("utf-8", errors="replace")
        form = dict(parse_qsl(body, keep_blank_values=True))
        token = self._auth_token
        if token:
            signed_url = self._signed_url(request)
            signature = request.headers.get("x-twilio-signature")
            if not valid_twilio_signature(signed_url, form, token, signature):
                logger.warning(f"Twilio webhook refused: bad or missing signature for {signed_url}")
                return Response(
                    "invalid or missing X-Twilio-Signature (check twilio.auth_token and "
                    "server.public_url: the signature covers the exact public URL)\n",
                    status_code=403,
                    media_type="text/plain",
                )
        if busy:
            return Response(twiml_reject_busy(), media_type="application/xml")
        url = websocket_url(public_base_url(request, self._settings), self.ws_path)
        parameters: dict[str, str] = {}
        call_sid = form.get("CallSid", "")
        if token:
            parameters["token"] = stream_token(call_sid, token)
        return Response(twiml_stream(url, parameters), media_type="application/xml")

    def _signed_url(self, request: Request) -> str:
        if not self._settings.server.public_url:
            return str(request.url)
        query = f"?{request.url.query}" if request.url.query else ""
        return self._settings.server.public_url.rstrip("/") + request.url.path + query

    def parse_start(self, message: dict[str, Any]) -> StreamStart | None:
        if message.get("event") != "start":
            return None
        start = message.get("start") or {}
        stream_sid = message.get("streamSid") or start.get("streamSid")
        if not isinstance(stream_sid, str) or not stream_sid:
            raise ValueError("Twilio 'start' message has no streamSid")
        custom = start.get("customParameters") or {}
        return StreamStart(
            stream_id=stream_sid,
            call_id=str(start.get("callSid") or ""),
            parameters={str(k): str(v) for k, v in custom.items()},
        )

    def authorize(self, start: StreamStart) -> bool:
        token = self._auth_token
        if not token:
            return True
        given = start.parameters.get("token", "")
        return hmac.compare_digest(given, stream_token(start.call_id, token))

    def serializer(self, start: StreamStart, *, on_stop: Any) -> FrameSerializer:
        return _TwilioSerializer(start, on_stop)


# ---------------------------------------------------------------------------- calls


class MediaStreamInputTransport(FastAPIWebsocketInputTransport):
    """The media stream's input, able to host the call's VAD (:mod:`agent.transports.inline_vad`).

    With a VAD in use, caller audio goes on from the receive task that decoded it, straight
    into the next stage's queue, and is analysed right after; Pipecat's own audio queue and
    task are not created. Without one it behaves exactly as Pipecat's input transport.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._vad: InlineVAD | None = None

    def use_vad(self, analyzer: VADAnalyzer) -> None:
        self._vad = InlineVAD(self, analyzer)

    async def setup(self, setup: FrameProcessorSetup) -> None:  # type: ignore[override]
        await super().setup(setup)
        if self._vad:
            await self._vad.setup(setup)

    async def cleanup(self) -> None:
        await super().cleanup()
        if self._vad:
            await self._vad.cleanup()

    async def start(self, frame: StartFrame) -> None:
        if self._vad:  # before the receive task starts, so the params precede any audio
            await self._vad.start()
        await super().start(frame)

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if self._vad is None:
            return
        if isinstance(frame, (EndFrame, CancelFrame)):
            await self._vad.stop()
        elif isinstance(frame, VADParamsUpdateFrame):
            await self._vad.process_frame(frame)

    async def push_audio_frame(self, frame: InputAudioRawFrame) -> None:
        if self._vad is None:
            await super().push_audio_frame(frame)
            return
        if not self._params.audio_in_enabled or self._paused:
            return
        if self._params.audio_in_filter:
            frame.audio = await self._params.audio_in_filter.filter(frame.audio)
            if not frame.audio:
                return
        if self._params.audio_in_passthrough:
            await self.push_frame(frame)
        await self._vad.process_frame(frame)

    def _create_audio_task(self) -> None:
        # Pipecat's per-call audio queue and task; push_audio_frame does their job inline.
        if self._vad is None:
            super()._create_audio_task()


class MediaStreamTransport(FastAPIWebsocketTransport):
    """A phone call's media-stream WebSocket, with what the pipeline should know about it
    (see :mod:`agent.transports`): its audio is 8 kHz, its client speaks no RTVI, and its
    input can host the VAD (:class:`~agent.transports.inline_vad.HostsVAD`)."""

    pipeline_sample_rate = TELEPHONY_SAMPLE_RATE
    speaks_rtvi = False

    def __init__(self, websocket: WebSocket, params: FastAPIWebsocketParams) -> None:
        super().__init__(websocket, params)
        self._input = MediaStreamInputTransport(
            self, self._client, self._params, name=self._input_name
        )

    def input(self) -> MediaStreamInputTransport:
        return self._input  # type: ignore[return-value]  # set in __init__ above


class TelephonyCalls:
    """The webhook and media-stream routes of each provider, running one pipeline per call."""

    def __init__(
        self,
        *,
        settings: Settings,
        registry: CallRegistry,
        task_factory: TaskFactory,
        providers: list[TwilioProvider] | None = None,
    ) -> None:
        self._settings = settings
        self._registry = registry
        self._task_factory = task_factory
        self.router = APIRouter()
        for provider in providers or [TwilioProvider(settings)]:
            self._add_routes(provider)

    def _add_routes(self, provider: TwilioProvider) -> None:
        async def webhook(request: Request) -> Response:
            return await provider.answer_webhook(request, busy=not self._registry.has_capacity)

        async def media(websocket: WebSocket) -> None:
            await self.serve_stream(websocket, provider)

        self.router.add_api_route(f"/telephony/{provider.name}", webhook, methods=["POST"])
        self.router.add_api_websocket_route(provider.ws_path, media)

    async def serve_stream(self, websocket: WebSocket, provider: TwilioProvider) -> None:
        """One media stream, from accept to close; the slot is taken before anything else."""
        try:
            call = self._registry.reserve(provider.name)
        except CallLimitReached:
            await websocket.accept()
            await websocket.close(code=BUSY_CLOSE_CODE, reason="busy: call limit reached")
            return
        await self._registry.run(call, self._stream(call, websocket, provider))

    async def _stream(self, call: Call, websocket: WebSocket, provider: TwilioProvider) -> None:
        await websocket.accept()
        try:
            start = await asyncio.wait_for(_read_start(websocket, provider), START_TIMEOUT_S)
        except (TimeoutError, ValueError, WebSocketDisconnect) as exc:
            logger.warning(f"call {call.id}: no valid 'start' on the media stream ({exc!r})")
            await _close_quietly(websocket, POLICY_CLOSE_CODE, "expected a 'start' message")
            return
        if not provider.authorize(start):
            logger.warning(f"call {call.id}: media stream token missing or wrong; closing")
            await _close_quietly(websocket, POLICY_CLOSE_CODE, "unauthorized stream")
            return
        logger.info(
            f"call {call.id}: {provider.name} call {start.call_id} stream {start.stream_id}"
        )

        stop_tasks: list[asyncio.Task[Any]] = []
        task_holder: list[Any] = []

        def on_stop() -> None:
            logger.info(f"call {call.id}: {provider.name} sent stop")
            if task_holder and not stop_tasks:
                stop_tasks.append(asyncio.create_task(task_holder[0].cancel(reason="stream stop")))

        transport = MediaStreamTransport(
            websocket=websocket,
            params=FastAPIWebsocketParams(
                audio_in_enabled=True,
                audio_out_enabled=True,
                add_wav_header=False,
                serializer=provider.serializer(start, on_stop=on_stop),
            ),
        )
        task = self._task_factory(
            transport, self._settings, call_id=call.id, observers=[CallLogObserver(call)]
        )
        task_holder.append(task)

        @transport.event_handler("on_client_disconnected")
        async def _hung_up(_transport: Any, _ws: Any) -> None:
            logger.info(f"call {call.id}: media stream closed by the caller")
            await task.cancel(reason="caller hung up")

        try:
            await run_pipeline(task)
        finally:
            if stop_tasks:
                await asyncio.gather(*stop_tasks, return_exceptions=True)
            await _close_quietly(websocket, 1000, "call ended")


async def _read_start(websocket: WebSocket, provider: TwilioProvider) -> StreamStart:
    while True:
        text = await websocket.receive_text()
        try:
            message = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"not JSON: {text[:80]!r}") from exc
        if not isinstance(message, dict):
            raise ValueError("expected a JSON object")
        start = provider.parse_start(message)
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
