"""Creating interpreted sessions (the operator API), and calls that name a session they
cannot join, over real sockets: each is refused with the reason, before it takes a slot."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlencode

import httpx
import pytest

from agent.config import Settings
from agent.transports.telephony import twilio_signature
from tests.agent.transports.carriers import Carrier
from tests.agent.transports.stack import WebRTCClient, running_server, stack_settings
from tests.fakes.twilio_caller import TOKEN

OPERATOR = {"Authorization": "Bearer operator-token"}


@pytest.fixture
def settings(asr_server_url: str, asr_model_name: str) -> Iterator[Settings]:
    """The server with an operator token, an LLM to translate with, and Twilio auth on (the
    LLM and TTS are never reached: no call here gets as far as speaking)."""
    settings = stack_settings(
        asr_url=asr_server_url,
        asr_model=asr_model_name,
        tts_url="http://127.0.0.1:9",
        api_token="operator-token",
    )
    settings.llm = settings.llm.model_copy(
        update={"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "translator"}
    )
    settings.twilio.auth_token = TOKEN
    yield settings


async def create(url: str, headers: dict[str, str] | None = None, **body: str) -> httpx.Response:
    async with httpx.AsyncClient() as http:
        return await http.post(f"{url}/interpreter/sessions", json=body, headers=headers)


async def test_an_operator_creates_a_session_and_gets_how_each_party_joins(
    settings: Settings,
) -> None:
    with running_server(settings) as (url, _app):
        response = await create(url, OPERATOR, caller_language="Spanish")
        assert response.status_code == 201, response.text
        session = response.json()
        sid = session["session_id"]
        assert session["parties"]["caller"]["language"] == "Spanish"
        assert session["parties"]["agent"]["language"] == "French"  # translation.target_language
        caller = session["join"]["caller"]
        assert caller["twilio_webhook"] == f"{url}/telephony/twilio?" + urlencode(
            {"interpreter_session": sid, "party": "caller"}
        )
        assert session["join"]["agent"]["webrtc_request_data"] == {
            "interpreter_session": sid,
            "party": "agent",
        }
        async with httpx.AsyncClient() as http:
            shown = await http.get(f"{url}/interpreter/sessions/{sid}", headers=OPERATOR)
        assert shown.status_code == 200 and shown.json()["parties"]["agent"]["joined"] is False


async def test_only_the_operator_creates_sessions(settings: Settings) -> None:
    with running_server(settings) as (url, _app):
        assert (await create(url)).status_code == 401
        assert (await create(url, {"Authorization": "Bearer wrong"})).status_code == 401
        refused = await create(url, OPERATOR, caller_language="x" * 41)
        assert refused.status_code == 400 and "a language's name" in refused.text
    settings.server.api_token = None
    with running_server(settings) as (url, _app):
        off = await create(url, OPERATOR)
        assert off.status_code == 404 and "set server.api_token" in off.text


async def test_a_session_needs_an_llm_to_translate_with(settings: Settings) -> None:
    settings.llm = settings.llm.model_copy(update={"kind": "echo", "base_url": None})
    with running_server(settings) as (url, _app):
        refused = await create(url, OPERATOR)
    assert refused.status_code == 400 and "set llm.base_url" in refused.text


async def test_a_webrtc_offer_naming_a_bad_session_is_refused_with_the_reason(
    settings: Settings,
) -> None:
    with running_server(settings) as (url, app):
        sid = (await create(url, OPERATOR)).json()["session_id"]
        cases = [
            ({"interpreter_session": "nope", "party": "agent"}, 404, "unknown or expired"),
            ({"interpreter_session": sid, "party": "boss"}, 400, "'caller' or 'agent'"),
            ({"interpreter_session": 7, "party": "agent"}, 400, "must be the session_id"),
        ]
        for request_data, status, reason in cases:
            client = WebRTCClient()
            try:
                response = await client.connect(url, request_data=request_data)
            finally:
                await client.close()
            assert response.status_code == status, (request_data, response.text)
            assert reason in response.json()["detail"]
        assert app.state.registry.stats.started == 0  # refused before any slot was taken

        first = WebRTCClient()
        second = WebRTCClient()
        try:
            joined = await first.connect(
                url, request_data={"interpreter_session": sid, "party": "agent"}
            )
            assert joined.status_code == 200, joined.text
            taken = await second.connect(
                url, request_data={"interpreter_session": sid, "party": "agent"}
            )
        finally:
            await first.close()
            await second.close()
        assert taken.status_code == 409 and "has joined already" in taken.json()["detail"]


async def test_a_phone_call_naming_a_bad_session_hears_why_and_is_hung_up(
    settings: Settings,
) -> None:
    with running_server(settings) as (url, app):
        sid = (await create(url, OPERATOR)).json()["session_id"]

        async def webhook(query: dict[str, str]) -> httpx.Response:
            form = {"CallSid": "CA0001", "AccountSid": "AC0001", "From": "+15550001"}
            hook = f"{url}/telephony/twilio?{urlencode(query)}"
            headers = {"X-Twilio-Signature": twilio_signature(hook, form, TOKEN)}
            async with httpx.AsyncClient() as http:
                return await http.post(hook, data=form, headers=headers)

        good = await webhook({"interpreter_session": sid, "party": "caller"})
        assert good.status_code == 200
        assert f'<Parameter name="interpreter_session" value="{sid}"/>' in good.text
        assert '<Parameter name="party" value="caller"/>' in good.text

        bad = await webhook({"interpreter_session": "nope", "party": "caller"})
        assert bad.status_code == 200
        assert "<Say>unknown or expired interpreted session" in bad.text
        assert bad.text.endswith("<Hangup/></Response>")

        # A stream that names an unknown session anyway is closed with the reason.
        async with Carrier("twilio").call(url) as caller:
            await caller.start(
                parameters={
                    "token": caller.stream_token(),
                    "interpreter_session": "nope",
                    "party": "caller",
                }
            )
            await caller.closed.wait()
        assert caller.ws.close_code == 1008
        assert "unknown or expired interpreted session" in (caller.ws.close_reason or "")
        assert app.state.registry.stats.started == 0
