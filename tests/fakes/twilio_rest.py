"""A local stand-in for Twilio: the REST endpoints our server calls, and the calls they start.

REST (twilio.com/docs/voice/api/call-resource, "Create a Call resource" and "Update a Call
resource"; errors: twilio.com/docs/api/errors/20003, 20404, 21200, 21201, 21213):

- ``POST /2010-04-01/Accounts/{AccountSid}/Calls.json``, form-encoded: ``To`` and ``From``
  required (400 with codes 21201 / 21213 otherwise), and one of ``Url``, ``Twiml`` or
  ``ApplicationSid`` (400, 21200); ``MachineDetection`` is ``Enable`` or
  ``DetectMessageEnd``. Answers 201 with the call resource (``sid`` ``CA`` + 32 hex,
  ``status`` ``queued``, ``direction`` ``outbound-api`` …).
- ``POST /2010-04-01/Accounts/{AccountSid}/Calls/{CallSid}.json``, form-encoded, with ``Twiml``
  (or ``Url``, or ``Status``): 200 and the call resource; 404 (20404) for a call it does not
  know.
- ``GET`` of the same path: the call resource.
- Every request needs HTTP Basic auth ``AccountSid:AuthToken`` for the account in the path:
  401 (20003, ``Authenticate``) otherwise. Error bodies are Twilio's: ``code``, ``message``,
  ``more_info``, ``status``. Every request is kept in ``requests`` with its form.

Calls, as Twilio runs them (twilio.com/docs/voice/twiml/stream, /dial, /number, /sip):

- :meth:`TwilioStandIn.inbound_call` rings our server as a caller would: Twilio's signed
  webhook ``POST`` (``X-Twilio-Signature``), then the media stream its ``<Connect><Stream>``
  names, with the ``<Parameter>``s as ``customParameters``.
- A created call is answered after ``answer_delay_s``: its ``Url`` is requested the same way
  (``Direction=outbound-api``, and ``AnsweredBy`` = ``answered_by`` when ``MachineDetection``
  was asked for), or its ``Twiml`` is run, and a ``<Connect><Stream>`` opens the media stream.
- An update whose TwiML holds ``<Dial>`` ends the media stream as Twilio does (``stop``, then
  close) and records the ``<Number>``/``<Sip>`` as where the call went
  (:meth:`~tests.fakes.twilio_caller.TwilioCaller.hand_over`); a noun's ``url`` (the whisper)
  is requested, signed, as when the person answers, and its TwiML kept in ``whispers``.

It runs on the test's own event loop (``async with TwilioStandIn() as twilio``), so a test
drives the callers it opened directly.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import secrets
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any, Self
from urllib.parse import parse_qsl

import httpx
import uvicorn
import websockets
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agent.transports.telephony import twilio_signature
from tests.fakes.twilio_caller import TOKEN, TwilioCaller

ACCOUNT_SID = "AC" + "0" * 31 + "1"
API_VERSION = "2010-04-01"
MACHINE_DETECTION = ("Enable", "DetectMessageEnd")


@dataclass
class RESTRequest:
    """One request the stand-in received."""

    method: str
    path: str
    form: dict[str, str]
    authorized: bool


@dataclass
class StandInCall:
    """A call as the stand-in knows it."""

    sid: str
    to: str
    from_: str
    direction: str
    status: str = "queued"
    answered_by: str | None = None
    stream: TwilioCaller | None = None
    streamed: asyncio.Event = field(default_factory=asyncio.Event)
    dialed: list[str] = field(default_factory=list)
    whispers: list[str] = field(default_factory=list)

    def resource(self, account_sid: str) -> dict[str, Any]:
        now = formatdate(usegmt=True).replace("GMT", "+0000")
        uri = f"/{API_VERSION}/Accounts/{account_sid}/Calls/{self.sid}.json"
        return {
            "account_sid": account_sid,
            "annotation": None,
            "answered_by": self.answered_by,
            "api_version": API_VERSION,
            "caller_name": None,
            "date_created": now,
            "date_updated": now,
            "direction": self.direction,
            "duration": None,
            "end_time": None,
            "forwarded_from": None,
            "from": self.from_,
            "from_formatted": self.from_,
            "group_sid": None,
            "parent_call_sid": None,
            "phone_number_sid": None,
            "price": None,
            "price_unit": "USD",
            "queue_time": "0",
            "sid": self.sid,
            "start_time": None,
            "status": self.status,
            "subresource_uris": {},
            "to": self.to,
            "to_formatted": self.to,
            "trunk_sid": None,
            "uri": uri,
        }


def _error(status: int, code: int, message: str) -> JSONResponse:
    return JSONResponse(
        {
            "code": code,
            "message": message,
            "more_info": f"https://www.twilio.com/docs/errors/{code}",
            "status": status,
        },
        status_code=status,
    )


class TwilioStandIn:
    """Twilio's Calls REST API and call handling on 127.0.0.1 (see the module docstring).

    Args:
        account_sid, auth_token: The account's credentials (the token also signs webhooks).
        answered_by: What answering machine detection reports for created calls.
        answer_delay_s: Ringing time before a created call is answered.
    """

    def __init__(
        self,
        *,
        account_sid: str = ACCOUNT_SID,
        auth_token: str = TOKEN,
        answered_by: str = "human",
        answer_delay_s: float = 0.2,
    ) -> None:
        self.account_sid = account_sid
        self.auth_token = auth_token
        self.answered_by = answered_by
        self.answer_delay_s = answer_delay_s
        self.requests: list[RESTRequest] = []
        self.calls: dict[str, StandInCall] = {}
        self.port = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._sockets: list[websockets.ClientConnection] = []
        self._server: uvicorn.Server | None = None
        self._serving: asyncio.Task[None] | None = None
        app = FastAPI()
        calls = "/2010-04-01/Accounts/{account_sid}/Calls"
        app.add_api_route(calls + ".json", self._create, methods=["POST"])
        app.add_api_route(calls + "/{call_sid}.json", self._update, methods=["POST"])
        app.add_api_route(calls + "/{call_sid}.json", self._fetch, methods=["GET"])
        self.app = app

    @property
    def url(self) -> str:
        """The REST base URL (``twilio.api_base_url``)."""
        return f"http://127.0.0.1:{self.port}"

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Self:
        config = uvicorn.Config(self.app, host="127.0.0.1", port=0, log_level="warning")
        self._server = uvicorn.Server(config)
        self._serving = asyncio.create_task(self._server.serve())
        while not self._server.started:
            if self._serving.done():
                await self._serving  # raises why it could not start
            await asyncio.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for call in self.calls.values():
            if call.stream is not None:
                await call.stream.close()
        for ws in self._sockets:
            with contextlib.suppress(Exception):
                await ws.close()
        if self._server is not None and self._serving is not None:
            self._server.should_exit = True
            await self._serving

    # ------------------------------------------------------------------ calls

    async def inbound_call(
        self, webhook_url: str, *, from_: str = "+15550001", to: str = "+15550002"
    ) -> TwilioCaller:
        """Ring our server as Twilio does for a caller: the signed webhook, then the stream."""
        call = StandInCall(sid=_sid("CA"), to=to, from_=from_, direction="inbound")
        self.calls[call.sid] = call
        twiml = await self._request_twiml(webhook_url, call, status="ringing")
        await self._run_twiml(call, twiml)
        if call.stream is None:
            raise AssertionError(f"the webhook answered no <Connect><Stream>: {twiml}")
        return call.stream

    def call_in_progress(self, *, from_: str = "+15550001", to: str = "+15550002") -> str:
        """A live call Twilio knows, without a server on it; its SID."""
        call = StandInCall(
            sid=_sid("CA"), to=to, from_=from_, direction="inbound", status="in-progress"
        )
        self.calls[call.sid] = call
        return call.sid

    async def stream_of(self, call_sid: str, *, timeout_s: float = 10.0) -> TwilioCaller:
        """The media stream of a call, once Twilio (this stand-in) opened it."""
        call = self.calls[call_sid]
        await asyncio.wait_for(call.streamed.wait(), timeout_s)
        assert call.stream is not None
        return call.stream

    def last(self, method: str = "POST") -> RESTRequest:
        return [r for r in self.requests if r.method == method][-1]

    async def _answer(self, call: StandInCall, url: str | None, twiml: str | None) -> None:
        await asyncio.sleep(self.answer_delay_s)
        call.status = "in-progress"
        if url is not None:
            twiml = await self._request_twiml(url, call, status="in-progress")
        if twiml is not None:
            await self._run_twiml(call, twiml)

    async def _request_twiml(self, url: str, call: StandInCall, *, status: str) -> str:
        form = {
            "AccountSid": self.account_sid,
            "ApiVersion": API_VERSION,
            "CallSid": call.sid,
            "CallStatus": status,
            "Called": call.to,
            "Caller": call.from_,
            "Direction": call.direction,
            "From": call.from_,
            "To": call.to,
        }
        if call.answered_by is not None:
            form["AnsweredBy"] = call.answered_by
        signature = twilio_signature(url, form, self.auth_token)
        async with httpx.AsyncClient() as http:
            response = await http.post(
                url, data=form, headers={"X-Twilio-Signature": signature}, timeout=10
            )
        response.raise_for_status()
        return response.text

    async def _run_twiml(self, call: StandInCall, twiml: str) -> None:
        root = ET.fromstring(twiml)
        stream = root.find("./Connect/Stream")
        if stream is not None:
            parameters = {
                p.attrib["name"]: p.attrib["value"] for p in stream.findall("./Parameter")
            }
            ws = await websockets.connect(stream.attrib["url"])
            self._sockets.append(ws)
            caller = TwilioCaller(
                ws,
                call.sid,
                stream_sid=_sid("MZ"),
                account_sid=self.account_sid,
            )
            await caller.start(parameters=parameters)
            call.stream = caller
            call.streamed.set()
        dial = root.find("./Dial")
        if dial is not None:
            nouns = [n for n in dial if n.tag in ("Number", "Sip")]
            call.dialed.extend([n.text or "" for n in nouns] or [dial.text or ""])
            for noun in nouns:
                if "url" in noun.attrib:
                    call.whispers.append(
                        await self._request_twiml(noun.attrib["url"], call, status="in-progress")
                    )
            if call.stream is not None:  # the new TwiML replaces the stream
                await call.stream.hand_over(call.dialed[-1])

    # ------------------------------------------------------------------ REST routes

    async def _form(self, request: Request, account_sid: str) -> tuple[dict[str, str], bool]:
        body = (await request.body()).decode()
        form = dict(parse_qsl(body, keep_blank_values=True))
        authorized = account_sid == self.account_sid and _basic(request) == (
            self.account_sid,
            self.auth_token,
        )
        self.requests.append(RESTRequest(request.method, request.url.path, form, authorized))
        return form, authorized

    async def _create(self, request: Request, account_sid: str) -> JSONResponse:
        form, authorized = await self._form(request, account_sid)
        if not authorized:
            return _error(401, 20003, "Authenticate")
        if not request.headers.get("content-type", "").startswith(
            "application/x-www-form-urlencoded"
        ):
            return _error(400, 21200, "Calls must be created with a form-encoded body")
        if not form.get("To"):
            return _error(400, 21201, "No 'To' number is specified")
        if not form.get("From"):
            return _error(400, 21213, "No 'From' number is specified")
        instructions = [k for k in ("Url", "Twiml", "ApplicationSid") if form.get(k)]
        if len(instructions) != 1:
            return _error(
                400, 21200, "Exactly one of 'Url', 'Twiml' or 'ApplicationSid' is required"
            )
        detection = form.get("MachineDetection")
        if detection is not None and detection not in MACHINE_DETECTION:
            return _error(400, 21200, f"MachineDetection must be one of {MACHINE_DETECTION}")
        unknown = set(form) - {"To", "From", "Url", "Twiml", "ApplicationSid", "MachineDetection"}
        if unknown:
            return _error(400, 21200, f"parameters this stand-in does not model: {unknown}")
        call = StandInCall(
            sid=_sid("CA"), to=form["To"], from_=form["From"], direction="outbound-api"
        )
        if detection:
            call.answered_by = self.answered_by
        self.calls[call.sid] = call
        self._spawn(self._answer(call, form.get("Url"), form.get("Twiml")))
        return JSONResponse(call.resource(self.account_sid), status_code=201)

    async def _update(self, request: Request, account_sid: str, call_sid: str) -> JSONResponse:
        form, authorized = await self._form(request, account_sid)
        if not authorized:
            return _error(401, 20003, "Authenticate")
        call = self.calls.get(call_sid)
        if call is None:
            return _error(404, 20404, f"The requested resource {request.url.path} was not found")
        if not (set(form) & {"Twiml", "Url", "Status"}):
            return _error(400, 21200, "An update needs 'Twiml', 'Url' or 'Status'")
        if form.get("Twiml"):  # Twilio answers, then switches the call over
            self._spawn(self._run_twiml(call, form["Twiml"]))
        return JSONResponse(call.resource(self.account_sid))

    async def _fetch(self, request: Request, account_sid: str, call_sid: str) -> JSONResponse:
        _form, authorized = await self._form(request, account_sid)
        if not authorized:
            return _error(401, 20003, "Authenticate")
        call = self.calls.get(call_sid)
        if call is None:
            return _error(404, 20404, f"The requested resource {request.url.path} was not found")
        return JSONResponse(call.resource(self.account_sid))

    def _spawn(self, work: Any) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _sid(prefix: str) -> str:
    return prefix + secrets.token_hex(16)


def _basic(request: Request) -> tuple[str, str] | None:
    scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, _, password = base64.b64decode(encoded).decode().partition(":")
    except ValueError:
        return None
    return user, password
