"""WebRTC calls over SmallWebRTC (aiortc): the offer/answer routes and one pipeline per peer.

Routes (any WebRTC client, plus the ones Pipecat's prebuilt client calls):

- ``POST /api/offer``  ``{"sdp", "type", "pc_id"?, "restart_pc"?, "request_data"?}`` → answer
  ``{"sdp", "type", "pc_id"}``. A ``pc_id`` we know renegotiates that call; otherwise a new call.
- ``PATCH /api/offer`` ``{"pc_id", "candidates": [{"candidate", "sdp_mid", "sdp_mline_index"}]}``
  trickles ICE candidates.
- ``POST /start`` → ``{"sessionId", "iceConfig"?}``; then ``POST|PATCH
  /sessions/{sessionId}/api/offer`` behave like the two routes above. ``iceConfig`` is
  ``server.ice_servers`` with TURN credentials made for this session that expire
  (:mod:`agent.transports.turn_credentials`); a static password only when configured so.

Over the call limit, offers and ``/start`` answer 503 with ``{"error": ...}`` before any peer
connection is made. A call ends when its pipeline ends, the peer closes, or the peer goes
silent (no data-channel keep-alive, or never connects); the slot and the peer connection are
released either way.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from typing import Any

from aiortc.sdp import SessionDescription
from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse
from loguru import logger
from pipecat.transports.base_transport import TransportParams
from pipecat.transports.smallwebrtc.connection import IceServer, SmallWebRTCConnection
from pipecat.transports.smallwebrtc.request_handler import (
    IceCandidate,
    SmallWebRTCPatchRequest,
    SmallWebRTCRequest,
    SmallWebRTCRequestHandler,
)
from pipecat.transports.smallwebrtc.transport import SmallWebRTCTransport

from agent.calls import Call, CallLimitReached, CallRegistry
from agent.config import Settings
from agent.fastpath.audio_jitter import release_audio_promptly
from agent.interpreter.sessions import (
    PARTY_PARAMETER,
    SESSION_PARAMETER,
    InterpreterError,
    InterpreterSessions,
)
from agent.rate_limit import PerSourceLimiter
from agent.transports.turn_credentials import ice_servers_for
from agent.worker import CallTaskFactory, run_call_pipeline

SESSION_TTL_S = 300.0
"""How long a ``/start`` session waits for its offer before it is forgotten."""

MAX_SDP_CHARS = 64 * 1024
"""Far above any real offer (a few kB); an offer is parsed before any slot is taken."""


class WebRTCCalls:
    """Owns the SmallWebRTC peers of one server and the routes that create them."""

    def __init__(
        self,
        *,
        settings: Settings,
        registry: CallRegistry,
        task_factory: CallTaskFactory,
        interpreter: InterpreterSessions | None = None,
        connect_timeout_s: float = 30.0,
        keepalive_timeout_s: float = 4.0,
    ) -> None:
        self._settings = settings
        self._registry = registry
        self._task_factory = task_factory
        self._interpreter = interpreter
        self._connect_timeout_s = connect_timeout_s
        self._keepalive_timeout_s = keepalive_timeout_s
        self._handler = SmallWebRTCRequestHandler()
        self._live: dict[str, SmallWebRTCConnection] = {}  # pc_id → a call's connection
        self._sessions: dict[str, float] = {}  # /start session id → created (monotonic)
        self._limiter = PerSourceLimiter(
            rate_per_s=settings.server.requests_per_source_per_s,
            burst=settings.server.request_burst_per_source,
        )
        self.router = APIRouter()
        self._add_routes()

    # ------------------------------------------------------------------ routes

    def _add_routes(self) -> None:
        router = self.router
        router.add_api_route("/api/offer", self._post_offer, methods=["POST"])
        router.add_api_route("/api/offer", self._patch_offer, methods=["PATCH"])
        router.add_api_route("/start", self._start, methods=["POST"])
        router.add_api_route(
            "/sessions/{session_id}/api/offer", self._post_session_offer, methods=["POST"]
        )
        router.add_api_route(
            "/sessions/{session_id}/api/offer", self._patch_session_offer, methods=["PATCH"]
        )

    def _check_rate(self, request: Request) -> None:
        source = request.client.host if request.client else "unknown"
        if not self._limiter.allow(source):
            raise HTTPException(
                status_code=429,
                detail="too many offers from this address; slow down",
                headers={"Retry-After": str(self._limiter.retry_after_s)},
            )

    async def _post_offer(self, request: Request) -> Any:
        self._check_rate(request)
        return await self.offer(_offer_request(await _json_body(request)))

    async def _patch_offer(self, request: Request) -> Any:
        await self.add_candidates(_patch_request(await _json_body(request)))
        return {"status": "success"}

    async def _start(self, request: Request) -> Any:
        self._check_rate(request)
        if not self._registry.has_capacity:
            return _busy(CallLimitReached(self._registry.max_calls))
        self._forget_old_sessions()
        session_id = str(uuid.uuid4())
        self._sessions[session_id] = time.monotonic()
        result: dict[str, Any] = {"sessionId": session_id}
        if self._settings.server.ice_servers:  # public: time-limited credentials only
            servers = ice_servers_for(
                self._settings.server.ice_servers, session_id, now=time.time()
            )
            result["iceConfig"] = {"iceServers": servers}
        return result

    async def _post_session_offer(self, session_id: str, request: Request) -> Any:
        self._check_rate(request)
        self._check_session(session_id)
        return await self.offer(_offer_request(await _json_body(request)))

    async def _patch_session_offer(self, session_id: str, request: Request) -> Any:
        self._check_session(session_id)
        await self.add_candidates(_patch_request(await _json_body(request)))
        return {"status": "success"}

    def _check_session(self, session_id: str) -> None:
        self._forget_old_sessions()
        if session_id not in self._sessions:
            raise HTTPException(
                status_code=404,
                detail=f"unknown or expired session {session_id!r}: POST /start for a new one",
            )

    def _forget_old_sessions(self) -> None:
        horizon = time.monotonic() - SESSION_TTL_S
        for session_id, created in list(self._sessions.items()):
            if created < horizon:
                del self._sessions[session_id]

    # ------------------------------------------------------------------ calls

    async def offer(self, request: SmallWebRTCRequest) -> Any:
        """Answer an SDP offer: renegotiate a known peer, or reserve a slot and start a call."""
        pc_id = request.pc_id or ""
        known = self._live.get(pc_id)
        if known is not None:
            answer = await self._handler.handle_web_request(request, _no_new_connection)
            # A restart (``restart_pc``) gives the call a new peer connection under a new
            # pc_id (the answer's), and any renegotiation may add a receiver: the next offer
            # comes under the new id, and each receiver gets its buffer before media flows.
            release_audio_promptly(known.pc)
            if self._live.pop(pc_id, None) is known:  # not ended meanwhile
                self._live[known.pc_id] = known
            return answer
        if pc_id:
            # No live call of ours has this id (it ended, or a restart replaced it): a new
            # call. Pipecat's handler still maps a replaced id to the call's connection, and
            # would renegotiate that live call with this offer.
            request = dataclasses.replace(request, pc_id=None, restart_pc=False)
        party = self._interpreted_party(request.request_data)
        try:
            call = self._registry.reserve("webrtc")
        except CallLimitReached as exc:
            return _busy(exc)
        if party is not None and self._interpreter is not None:  # checked just now, no await since
            self._interpreter.join(*party, call)
        connections: list[SmallWebRTCConnection] = []

        async def keep(connection: SmallWebRTCConnection) -> None:
            connections.append(connection)
            release_audio_promptly(connection.pc)  # the offer is set, no media yet

        # this call's own peer connection gets TURN credentials of its own, fresh ones
        self._handler.update_ice_servers(
            [
                IceServer(**server)
                for server in ice_servers_for(
                    self._settings.server.ice_servers, call.id, now=time.time()
                )
            ]
            or None
        )
        try:
            answer = await self._handler.handle_web_request(request, keep)
        except Exception as exc:
            call.end_because("offer failed")
            call.release()
            for connection in connections:
                await connection.disconnect()
            if isinstance(exc, HTTPException):
                raise
            logger.warning(f"cannot answer a WebRTC offer: {exc!r:.200}")
            raise HTTPException(
                status_code=400, detail="cannot answer this offer: its SDP could not be negotiated"
            ) from exc
        if not connections or answer is None:  # pragma: no cover - handler contract
            call.release()
            raise HTTPException(status_code=500, detail="no peer connection was created")
        connection = connections[0]
        self._live[connection.pc_id] = connection
        self._registry.spawn(call, self._run_call(call, connection))
        return answer

    def _interpreted_party(self, request_data: Any) -> tuple[str, str] | None:
        """The interpreted session and party an offer's ``request_data`` names, checked
        before any slot is taken (a 4xx with the reason when it cannot join); ``None`` for
        a call of its own."""
        if not isinstance(request_data, dict) or SESSION_PARAMETER not in request_data:
            return None
        session_id, role = request_data.get(SESSION_PARAMETER), request_data.get(PARTY_PARAMETER)
        if self._interpreter is None:
            raise HTTPException(404, "this server has no interpreted sessions")
        try:
            party = self._interpreter.check(session_id, role)
        except InterpreterError as exc:
            raise HTTPException(exc.status, str(exc)) from None
        return party.session.id, party.role

    async def add_candidates(self, request: SmallWebRTCPatchRequest) -> None:
        await self._handler.handle_patch_request(request)

    async def _run_call(self, call: Call, connection: SmallWebRTCConnection) -> None:
        transport = SmallWebRTCTransport(
            webrtc_connection=connection,
            params=TransportParams(audio_in_enabled=True, audio_out_enabled=True),
        )
        task = self._task_factory(transport, call)

        @transport.event_handler("on_client_disconnected")
        async def _left(_transport: Any, _client: Any) -> None:
            logger.info(f"call {call.id}: WebRTC peer left")
            call.end_because("caller hung up")
            await task.cancel(reason="peer left")

        watchdog = asyncio.create_task(self._watch(call, connection, task), name=f"watch:{call.id}")
        try:
            await run_call_pipeline(task)
        finally:
            watchdog.cancel()
            await asyncio.gather(watchdog, return_exceptions=True)
            for pc_id in [key for key, live in self._live.items() if live is connection]:
                del self._live[pc_id]
            await connection.disconnect()

    async def _watch(self, call: Call, connection: SmallWebRTCConnection, task: Any) -> None:
        """End the call when the peer never connects or stops answering.

        aiortc reports a vanished peer only after ICE consent fails (~30 s); clients that send
        data-channel keep-alives (``ping`` every second, as Pipecat's clients and our
        playground do) are noticed within ``keepalive_timeout_s``.
        """
        started = time.monotonic()
        seen_connected = False
        lost_since: float | None = None
        while True:
            await asyncio.sleep(0.5)
            now = time.monotonic()
            if connection.is_connected():
                seen_connected = True
                lost_since = None
                continue
            if not seen_connected:
                if now - started > self._connect_timeout_s:
                    logger.warning(f"call {call.id}: peer never connected; ending the call")
                    call.end_because("never connected")
                    await task.cancel(reason="peer never connected")
                    return
                continue
            lost_since = lost_since or now
            if now - lost_since > self._keepalive_timeout_s:
                logger.warning(f"call {call.id}: peer went silent; ending the call")
                call.end_because("connection lost")
                await task.cancel(reason="peer went silent")
                return

    async def close(self) -> None:
        """Close every peer connection (after the registry has cancelled the calls)."""
        await self._handler.close()
        self._live.clear()
        self._sessions.clear()


async def _no_new_connection(connection: SmallWebRTCConnection) -> None:  # pragma: no cover
    raise RuntimeError("renegotiation must not create a connection")


def _busy(exc: CallLimitReached) -> JSONResponse:
    return JSONResponse(status_code=503, content={"error": str(exc)}, headers={"Retry-After": "5"})


async def _json_body(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise HTTPException(status_code=400, detail="the body must be a JSON object")
    return body


def _offer_request(body: dict[str, Any]) -> SmallWebRTCRequest:
    sdp, kind = body.get("sdp"), body.get("type")
    if not isinstance(sdp, str) or not sdp or kind != "offer":
        raise HTTPException(
            status_code=400,
            detail='an offer needs {"sdp": "<SDP text>", "type": "offer"} (optional "pc_id")',
        )
    problem = sdp_problem(sdp)
    if problem:
        raise HTTPException(status_code=400, detail=f"unusable offer: {problem}")
    request_data = body.get("request_data", body.get("requestData"))
    pc_id = body.get("pc_id")
    return SmallWebRTCRequest(
        sdp=sdp,
        type=kind,
        pc_id=pc_id if isinstance(pc_id, str) and pc_id else None,
        restart_pc=bool(body.get("restart_pc")),
        request_data=request_data,
    )


def _patch_request(body: dict[str, Any]) -> SmallWebRTCPatchRequest:
    pc_id, candidates = body.get("pc_id"), body.get("candidates", [])
    if not isinstance(pc_id, str) or not isinstance(candidates, list):
        raise HTTPException(
            status_code=400,
            detail='an ICE patch needs {"pc_id": "...", "candidates": [{"candidate", "sdp_mid", '
            '"sdp_mline_index"}]}',
        )
    try:
        parsed = [
            IceCandidate(
                candidate=str(c.get("candidate") or ""),
                sdp_mid=c.get("sdp_mid", c.get("sdpMid")),
                sdp_mline_index=int(c.get("sdp_mline_index", c.get("sdpMLineIndex")) or 0),
            )
            for c in candidates
        ]
    except (AttributeError, TypeError, ValueError) as exc:
        raise HTTPException(
            status_code=400,
            detail='malformed ICE candidate: each needs {"candidate": "candidate:…", '
            '"sdp_mid": "0", "sdp_mline_index": 0}',
        ) from exc
    return SmallWebRTCPatchRequest(pc_id=pc_id, candidates=parsed)


def sdp_problem(sdp: str) -> str | None:
    """Why an offer cannot make a voice call, or ``None``: checked before any slot is taken.

    A call needs an audio section with at least one codec, ICE credentials and a DTLS
    fingerprint; aiortc's parser accepts almost any text, so these are checked here.
    """
    if len(sdp) > MAX_SDP_CHARS:
        return f"the SDP is over {MAX_SDP_CHARS} characters"
    if not sdp.lstrip().startswith("v=0"):
        return "the SDP must start with v=0"
    try:
        description = SessionDescription.parse(sdp)
    except Exception:  # aiortc raises whatever its line parsers hit
        return "the SDP could not be parsed"
    audio = [m for m in description.media if m.kind == "audio"]
    if not audio:
        return "the SDP has no audio section (m=audio); add an audio transceiver"
    media = audio[0]
    if not media.rtp.codecs:
        return "the audio section offers no codec"
    if not (media.ice and media.ice.usernameFragment and media.ice.password):
        return "the audio section has no ICE credentials (a=ice-ufrag, a=ice-pwd)"
    if not (media.dtls and media.dtls.fingerprints):
        return "the audio section has no DTLS fingerprint (a=fingerprint)"
    return None
