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
"""

from __future__ import annotations

import asyncio
import re
from urllib.parse import parse_qsl

from fastapi import APIRouter, Request
from fastapi.responses import Response
from loguru import logger

from agent.calls import Call, CallRegistry
from agent.config import Settings
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

    def __init__(self, *, settings: Settings, registry: CallRegistry) -> None:
        self._settings = settings
        self._registry = registry
        self._rest = twilio_rest(settings)
        self._provider = TwilioProvider(settings)
        self._pending: dict[str, tuple[Call, asyncio.TimerHandle]] = {}
        self.router = APIRouter()
        self.router.add_api_route(ANSWERED_PATH, self._answered, methods=["POST"])

    async def place(self, *, to: str, from_: str | None, base_url: str) -> Call:
        """Reserve a slot and have Twilio call ``to``; the call is returned at once (ringing).

        Raises:
            OutboundUnavailable: no Twilio credentials, no caller ID, or a bad number.
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
        call = self._registry.reserve("twilio")
        call.attributes.update({"direction": "outbound", "to": to, "from": caller_id})
        try:
            resource = await self._rest.create_call(
                to=to,
                from_=caller_id,
                url=f"{base_url}{ANSWERED_PATH}",
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
        return Response(
            twiml_stream(url, {"token": self._provider.stream_tokens.issue(call_sid)}),
            media_type="application/xml",
        )
