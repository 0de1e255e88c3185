"""Outbound phone calls: the agent calls someone, through Twilio's REST API.

:meth:`OutboundCalls.place` takes a call slot first (so ``server.max_calls`` holds however
many calls are placed at once), then asks Twilio to create the call with ``Url`` pointing at
``POST /telephony/twilio/outbound`` and ``MachineDetection`` (``twilio.machine_detection``).
When the person (or machine) answers, Twilio requests that URL with ``AnsweredBy``; the answer
is the same ``<Connect><Stream>`` as an inbound call's, and the media stream that follows
claims the reserved slot (:class:`~agent.transports.telephony.ReservedCalls`) and runs the same
pipeline. ``AnsweredBy`` (``human``, ``machine_start``, ``fax``, ``unknown`` …) lands in
``call.attributes["answered_by"]``.

A call whose stream does not arrive within ``twilio.outbound_answer_timeout_s`` (no answer,
busy, failed) gives its slot back and ends as "not answered".

An outbound call may be a party of an interpreted session (:mod:`agent.interpreter`): the
session is checked before Twilio is asked, the answer URL carries the session and the party
(Twilio signs it), and the TwiML hands both to the media stream as ``<Parameter>``s, as an
inbound call's webhook URL does.
"""

from __future__ import annotations

import asyncio
import re
from urllib.parse import parse_qsl, urlencode

from fastapi import APIRouter, Request
from fastapi.responses import Response
from loguru import logger

from agent.calls import Call, CallRegistry
from agent.config import Settings
from agent.interpreter.sessions import PARTY_PARAMETER, SESSION_PARAMETER, InterpreterSessions
from agent.transports.telephony import (
    TwilioProvider,
    public_base_url,
    twilio_rest,
    twiml_stream,
    websocket_url,
)
from agent.transports.twilio_rest import TwilioRESTError

ANSWERED_PATH = "/telephony/twilio/outbound"
"""Twilio requests the call's TwiML here once the callee answered."""

CALLABLE = re.compile(r"\+[1-9][0-9]{6,14}|sips?:\S+", re.IGNORECASE)
"""An E.164 number or a SIP URI."""


class OutboundUnavailable(RuntimeError):
    """Outbound calls are not configured, or the request lacks what they need."""


class OutboundCalls:
    """Places outbound calls and holds their slots until their media streams arrive."""

    def __init__(
        self,
        *,
        settings: Settings,
        registry: CallRegistry,
        interpreter: InterpreterSessions | None = None,
    ) -> None:
        self._settings = settings
        self._registry = registry
        self._interpreter = interpreter
        self._rest = twilio_rest(settings)
        self._provider = TwilioProvider(settings)
        self._pending: dict[str, tuple[Call, asyncio.TimerHandle]] = {}
        self.router = APIRouter()
        self.router.add_api_route(ANSWERED_PATH, self._answered, methods=["POST"])

    async def place(
        self,
        *,
        to: str,
        from_: str | None,
        base_url: str,
        interpreter_session: str | None = None,
        party: str | None = None,
    ) -> Call:
        """Reserve a slot and have Twilio call ``to``; the call is returned at once (ringing).
        With ``interpreter_session``, the callee joins that session as ``party``.

        Raises:
            OutboundUnavailable: no Twilio credentials, no caller ID, or a bad number.
            agent.interpreter.sessions.InterpreterError: the session cannot take that party.
            agent.calls.CallLimitReached: the server is at ``server.max_calls`` or draining.
            TwilioRESTError: Twilio refused the call or could not be reached.
        """
        if self._rest is None:
            raise OutboundUnavailable(
                "outbound calls need Twilio's REST API: set twilio.account_sid and "
                "twilio.auth_token (VOICE_AGENT_TWILIO__ACCOUNT_SID / __AUTH_TOKEN)"
            )
        caller_id = from_ or self._settings.twilio.from_number
        if not caller_id:
            raise OutboundUnavailable(
                "no caller ID: pass 'from' (--from) or set twilio.from_number to one of your "
                "Twilio numbers"
            )
        for role, number in (("to", to), ("from", caller_id)):
            if not CALLABLE.fullmatch(number):
                raise OutboundUnavailable(
                    f"{role} {number!r} is neither an E.164 number (+15550100) nor a SIP URI"
                )
        answer_url = f"{base_url}{ANSWERED_PATH}"
        if interpreter_session is not None or party is not None:
            if self._interpreter is None:
                raise OutboundUnavailable("this server has no interpreted sessions")
            self._interpreter.check(interpreter_session, party)
            named = {SESSION_PARAMETER: interpreter_session, PARTY_PARAMETER: party}
            answer_url += f"?{urlencode(named)}"
        call = self._registry.reserve("twilio")
        call.attributes.update({"direction": "outbound", "to": to, "from": caller_id})
        try:
            resource = await self._rest.create_call(
                to=to,
                from_=caller_id,
                url=answer_url,
                machine_detection=self._settings.twilio.machine_detection,
            )
        except TwilioRESTError:
            call.end_because("carrier refused the call")
            call.release()
            raise
        call_sid = str(resource.get("sid") or "")
        call.attributes["call_sid"] = call_sid
        timer = asyncio.get_running_loop().call_later(
            self._settings.twilio.outbound_answer_timeout_s, self._expire, call_sid
        )
        self._pending[call_sid] = (call, timer)
        logger.info(f"call {call.id}: calling {to} from {caller_id} (Twilio {call_sid})")
        return call

    def expecting(self) -> bool:
        return bool(self._pending)

    def claim(self, carrier_call_id: str) -> Call | None:
        entry = self._pending.pop(carrier_call_id, None)
        if entry is None:
            return None
        call, timer = entry
        timer.cancel()
        return call

    def _expire(self, call_sid: str) -> None:
        entry = self._pending.pop(call_sid, None)
        if entry is None:
            return
        call, _timer = entry
        logger.info(f"call {call.id}: outbound call {call_sid} was not answered in time")
        call.end_because("not answered")
        call.release()

    async def _answered(self, request: Request) -> Response:
        """Twilio's request once the callee answered: connect the call to its media stream."""
        refused = await self._provider.check_signature(request)
        if refused is not None:
            return refused
        form = dict(parse_qsl((await request.body()).decode("utf-8", "replace")))
        call_sid = form.get("CallSid", "")
        entry = self._pending.get(call_sid)
        if entry is None:
            logger.warning(f"Twilio asked for outbound call {call_sid!r}, which is not ours")
            return Response(
                '<?xml version="1.0" encoding="UTF-8"?><Response><Hangup/></Response>',
                media_type="application/xml",
            )
        call, _timer = entry
        if form.get("AnsweredBy"):
            call.attributes["answered_by"] = form["AnsweredBy"]
        url = websocket_url(public_base_url(request, self._settings), self._provider.ws_path)
        parameters = {"token": self._provider.stream_tokens.issue(call_sid)}
        for name in (SESSION_PARAMETER, PARTY_PARAMETER):  # signed with the URL by Twilio
            if name in request.query_params:
                parameters[name] = request.query_params[name]
        return Response(twiml_stream(url, parameters), media_type="application/xml")
