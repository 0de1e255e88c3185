"""Our Twilio REST client against the stand-in: the exact requests, and Twilio's refusals turned
into errors that say what to fix. And the TwiML a transfer sends."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from agent.transports.twilio_rest import TwilioREST, TwilioRESTError, twiml_dial, twiml_say
from tests.fakes.serving import free_port
from tests.fakes.twilio_caller import TOKEN
from tests.fakes.twilio_rest import ACCOUNT_SID, TwilioStandIn

pytestmark = pytest.mark.timeout(30)


def client(twilio: TwilioStandIn, *, token: str = TOKEN) -> TwilioREST:
    return TwilioREST(account_sid=ACCOUNT_SID, auth_token=token, base_url=twilio.url)


async def test_create_posts_the_documented_form_and_returns_the_call_resource() -> None:
    async with TwilioStandIn(answer_delay_s=60) as twilio:
        resource = await client(twilio).create_call(
            to="+15550123",
            from_="+15550199",
            url="https://agent.example.com/telephony/twilio/outbound",
            machine_detection="Enable",
        )
        request = twilio.last()
        assert request.path == f"/2010-04-01/Accounts/{ACCOUNT_SID}/Calls.json"
        assert request.authorized
        assert request.form == {
            "To": "+15550123",
            "From": "+15550199",
            "Url": "https://agent.example.com/telephony/twilio/outbound",
            "MachineDetection": "Enable",
        }
        assert resource["sid"].startswith("CA") and len(resource["sid"]) == 34
        assert resource["status"] == "queued" and resource["direction"] == "outbound-api"


async def test_machine_detection_none_is_left_out() -> None:
    async with TwilioStandIn(answer_delay_s=60) as twilio:
        await client(twilio).create_call(
            to="+15550123", from_="+15550199", twiml="<Response/>", machine_detection="none"
        )
        assert "MachineDetection" not in twilio.last().form


async def test_a_wrong_token_is_a_401_that_names_the_settings() -> None:
    async with TwilioStandIn() as twilio:
        with pytest.raises(TwilioRESTError, match=r"twilio\.auth_token") as raised:
            await client(twilio, token="stale").update_call("CA" + "0" * 32, twiml="<Response/>")
        assert raised.value.status == 401 and raised.value.code == 20003


async def test_updating_a_call_twilio_does_not_know_is_a_404() -> None:
    async with TwilioStandIn() as twilio:
        with pytest.raises(TwilioRESTError) as raised:
            await client(twilio).update_call("CA" + "f" * 32, twiml="<Response/>")
        assert raised.value.status == 404 and raised.value.code == 20404


async def test_an_unreachable_api_says_which_setting_to_check() -> None:
    rest = TwilioREST(
        account_sid=ACCOUNT_SID, auth_token=TOKEN, base_url=f"http://127.0.0.1:{free_port()}"
    )
    with pytest.raises(TwilioRESTError, match=r"twilio\.api_base_url"):
        await rest.update_call("CA" + "0" * 32, twiml="<Response/>")


def test_dial_twiml_for_a_number_and_for_a_sip_uri_with_a_whisper() -> None:
    number = ET.fromstring(twiml_dial("+15550100"))
    assert [(e.tag, e.text, e.attrib) for e in number.find("Dial")] == [  # type: ignore[union-attr]
        ("Number", "+15550100", {})
    ]
    sip = ET.fromstring(
        twiml_dial("sip:desk@pbx.example.com", whisper_url="https://a.example/w?x=1&y=2")
    )
    (noun,) = sip.find("Dial")  # type: ignore[union-attr]
    assert noun.tag == "Sip" and noun.text == "sip:desk@pbx.example.com"
    assert noun.attrib == {"url": "https://a.example/w?x=1&y=2"}
    assert ET.fromstring(twiml_say("a <b> & c")).find("Say").text == "a <b> & c"  # type: ignore[union-attr]
