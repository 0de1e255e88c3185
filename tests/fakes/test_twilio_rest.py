"""The Twilio stand-in itself: a stand-in that accepted what Twilio refuses would let every
test built on it pass for nothing."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from websockets.asyncio.server import ServerConnection, serve

from agent.transports.telephony import twiml_stream
from tests.fakes.twilio_caller import TOKEN
from tests.fakes.twilio_rest import ACCOUNT_SID, TwilioStandIn

pytestmark = pytest.mark.timeout(30)

AUTH = (ACCOUNT_SID, TOKEN)


def calls_url(twilio: TwilioStandIn, account: str = ACCOUNT_SID) -> str:
    return f"{twilio.url}/2010-04-01/Accounts/{account}/Calls.json"


@pytest.mark.parametrize(
    ("form", "code"),
    [
        ({"From": "+15550199", "Url": "https://a.example/x"}, 21201),
        ({"To": "+15550123", "Url": "https://a.example/x"}, 21213),
        ({"To": "+15550123", "From": "+15550199"}, 21200),
        ({"To": "+1", "From": "+1", "Url": "https://a", "Twiml": "<Response/>"}, 21200),
        ({"To": "+1", "From": "+1", "Url": "https://a", "MachineDetection": "Yes"}, 21200),
        ({"To": "+1", "From": "+1", "Url": "https://a", "Machinedetection": "Enable"}, 21200),
    ],
)
async def test_a_create_without_twilios_fields_is_refused_with_its_code(
    form: dict[str, str], code: int
) -> None:
    async with TwilioStandIn() as twilio, httpx.AsyncClient() as http:
        response = await http.post(calls_url(twilio), data=form, auth=AUTH)
        assert response.status_code == 400
        assert response.json()["code"] == code and response.json()["status"] == 400
        assert twilio.calls == {}


@pytest.mark.parametrize(
    ("auth", "account"),
    [(None, ACCOUNT_SID), ((ACCOUNT_SID, "wrong"), ACCOUNT_SID), (AUTH, "AC" + "9" * 32)],
)
async def test_without_the_accounts_credentials_every_request_is_401(
    auth: tuple[str, str] | None, account: str
) -> None:
    async with TwilioStandIn() as twilio, httpx.AsyncClient() as http:
        response = await http.post(
            calls_url(twilio, account),
            data={"To": "+15550123", "From": "+15550199", "Url": "https://a.example/x"},
            auth=auth,
        )
        assert response.status_code == 401
        assert response.json() == {
            "code": 20003,
            "message": "Authenticate",
            "more_info": "https://www.twilio.com/docs/errors/20003",
            "status": 401,
        }
        assert twilio.calls == {}


async def test_a_created_call_with_a_stream_opens_it_and_a_dial_ends_it() -> None:
    """Twiml ``<Connect><Stream>`` → the stand-in connects with Twilio's ``connected`` and
    ``start`` (custom parameters included); ``<Dial>`` → ``stop``, then close 1000."""
    received: list[dict[str, object]] = []
    closed = asyncio.Event()
    close_code: list[int | None] = []

    async def media_server(ws: ServerConnection) -> None:
        async for message in ws:
            received.append(json.loads(message))
        close_code.append(ws.close_code)
        closed.set()

    async with serve(media_server, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        async with TwilioStandIn(answer_delay_s=0) as twilio, httpx.AsyncClient() as http:
            created = await http.post(
                calls_url(twilio),
                data={
                    "To": "+15550123",
                    "From": "+15550199",
                    "Twiml": twiml_stream(f"ws://127.0.0.1:{port}/ws", {"token": "t0k"}),
                },
                auth=AUTH,
            )
            assert created.status_code == 201
            sid = created.json()["sid"]
            stream = await twilio.stream_of(sid)
            update = await http.post(
                calls_url(twilio).removesuffix(".json") + f"/{sid}.json",
                data={"Twiml": "<Response><Dial><Number>+15550100</Number></Dial></Response>"},
                auth=AUTH,
            )
            assert update.status_code == 200 and update.json()["sid"] == sid
            await asyncio.wait_for(closed.wait(), 5)
            assert stream.transferred_to == "+15550100"
    events = [m["event"] for m in received]
    assert events[:2] == ["connected", "start"] and events[-1] == "stop"
    start = received[1]["start"]
    assert isinstance(start, dict) and start["callSid"] == sid
    assert start["customParameters"] == {"token": "t0k"}
    assert close_code == [1000]
