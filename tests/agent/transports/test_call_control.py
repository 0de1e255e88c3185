"""Transfer to a person: a caller asks for one, the model calls ``transfer_call``, the agent says
its line and Twilio (the stand-in) is asked to ``<Dial>`` the person; the media stream ends as
Twilio ends it, and the call says where it went."""

from __future__ import annotations

import asyncio
import subprocess
from typing import Any

import httpx
import pytest

from agent.calls import CallRegistry
from agent.transports.call_control import (
    TransferCallFrame,
    TransferFailed,
    TwilioCallControl,
    carry_out,
)
from agent.transports.twilio_rest import TwilioREST
from tests.agent.transports.phone_stack import (
    DESK,
    TRANSFER_TO,
    errors_logged,
    last_user_text,
    phone_agent,
    tool_results,
)
from tests.agent.transports.stack import async_wait_for, server_tasks
from tests.conftest import quoted_in, requires_espeak
from tests.fakes.chat_server import ToolCall
from tests.fakes.speech_server import ESPEAK_RATE
from tests.fakes.twilio_caller import TOKEN, ulaw_speech
from tests.fakes.twilio_rest import ACCOUNT_SID, TwilioStandIn

pytestmark = [requires_espeak, pytest.mark.timeout(120)]

DIAL = (
    '<?xml version="1.0" encoding="UTF-8"?><Response><Dial>'
    f"<Number>{TRANSFER_TO}</Number></Dial></Response>"
)


def spoken_seconds(text: str) -> float:
    """How long the test's speech server (espeak-ng at 170 words a minute) speaks ``text``."""
    wav = subprocess.run(
        ["espeak-ng", "-s", "170", "--stdout", text], check=True, capture_output=True
    ).stdout
    return (len(wav) - 44) / 2 / ESPEAK_RATE


def transfers_to(destination: str):  # type: ignore[no-untyped-def]
    """A model that transfers whoever mentions a person, and reads back the first clause of a
    tool's result (the whole result, destinations listed, took the line 10 s to speak)."""

    def script(messages: list[dict[str, Any]]) -> str | ToolCall:
        results = tool_results(messages)
        if results and messages[-1].get("role") == "tool":
            return f"The transfer tool said: {results[-1].split(';')[0]}."
        if "person" in last_user_text(messages).lower():
            return ToolCall("transfer_call", {"destination": destination})
        return "How can I help?"

    return script


async def test_a_caller_who_asks_for_a_person_is_transferred(
    asr_server_url: str, asr_model_name: str, redacted_log: list[str]
) -> None:
    async with TwilioStandIn() as twilio:
        with phone_agent(asr_server_url, asr_model_name, twilio, transfers_to(TRANSFER_TO)) as (
            url,
            app,
            chat,
        ):
            registry = app.state.registry
            with errors_logged() as errors:
                caller = await twilio.inbound_call(url + "/telephony/twilio")
                await caller.silence(0.3)
                await caller.speak(ulaw_speech("i would like to speak to a person please"))
                async with caller.quiet():
                    await asyncio.wait_for(caller.closed.wait(), 40)
                await async_wait_for(lambda: registry.stats.active == 0, timeout_s=10, what="end")
            assert errors == []  # a transfer is a normal end

            update = twilio.last()
            assert update.path == f"/2010-04-01/Accounts/{ACCOUNT_SID}/Calls/{caller.call_sid}.json"
            assert update.form == {"Twiml": DIAL} and update.authorized
            assert caller.transferred_to == TRANSFER_TO
            assert caller.ws.close_code == 1000  # Twilio closed it, after its stop
            # The whole announcement went down the line before Twilio was asked to hand over.
            announcement_s = spoken_seconds("Please hold while I transfer you.")
            assert caller.media_bytes_at_hand_over >= 0.9 * announcement_s * 8000

            await async_wait_for(lambda: registry.stats.active == 0, timeout_s=10, what="end")
            (call,) = registry.recent()
            assert call.end_reason == f"transferred to {TRANSFER_TO}"
            assert call.attributes["call_sid"] == caller.call_sid
            assert "Please hold while I transfer you." in " ".join(call.bot_transcript)
            advertised = [t["function"]["name"] for t in chat.requests[0]["tools"]]
            assert "transfer_call" in advertised
            assert server_tasks(app) == []
    assert quoted_in(redacted_log, "transfer you", "speak to a person") == []


async def test_a_destination_off_the_list_is_refused_to_the_model(
    asr_server_url: str, asr_model_name: str
) -> None:
    async with TwilioStandIn() as twilio:
        with phone_agent(asr_server_url, asr_model_name, twilio, transfers_to("+19990000")) as (
            url,
            app,
            chat,
        ):
            caller = await twilio.inbound_call(url + "/telephony/twilio")
            await caller.silence(0.3)
            await caller.speak(ulaw_speech("i would like to speak to a person please"))
            async with caller.quiet():
                await async_wait_for(
                    lambda: any(tool_results(r["messages"]) for r in chat.requests),
                    timeout_s=30,
                    what="the tool's answer to reach the model",
                )
                await async_wait_for(
                    lambda: (
                        "not an allowed" in " ".join(app.state.registry.calls()[0].bot_transcript)
                    ),
                    timeout_s=20,
                    what="the model to say why",
                )
            (result,) = [t for r in chat.requests for t in tool_results(r["messages"])][:1]
            assert "+19990000 is not an allowed transfer destination" in result
            assert TRANSFER_TO in result  # the model learns where it may transfer
            assert [r.method for r in twilio.requests] == []  # Twilio was never asked
            assert not caller.closed.is_set()
            await caller.stop()
            await asyncio.wait_for(caller.closed.wait(), 10)


async def test_without_twilio_credentials_the_tool_is_not_offered(
    asr_server_url: str, asr_model_name: str
) -> None:
    async with TwilioStandIn() as twilio:
        with phone_agent(
            asr_server_url, asr_model_name, twilio, lambda _m: "Hello.", credentials=False
        ) as (url, _app, chat):
            caller = await twilio.inbound_call(url + "/telephony/twilio")
            await caller.silence(0.3)
            await caller.speak(ulaw_speech("i would like to speak to a person please"))
            async with caller.quiet():
                await async_wait_for(lambda: chat.requests, timeout_s=30, what="a model turn")
            offered = [t["function"]["name"] for t in chat.requests[0].get("tools", [])]
            assert "transfer_call" not in offered and "send_dtmf" in offered
            await caller.stop()
            await asyncio.wait_for(caller.closed.wait(), 10)


async def test_a_transfer_to_a_sip_desk_whispers_to_the_person_who_answers(
    asr_server_url: str, asr_model_name: str
) -> None:
    whisper = "A caller from the voice agent, about billing."
    async with TwilioStandIn() as twilio:
        with phone_agent(
            asr_server_url,
            asr_model_name,
            twilio,
            transfers_to(DESK),
            overrides={"transfer": {"whisper": whisper}},
        ) as (url, _app, _chat):
            caller = await twilio.inbound_call(url + "/telephony/twilio")
            await caller.silence(0.3)
            await caller.speak(ulaw_speech("i would like to speak to a person please"))
            async with caller.quiet():
                await asyncio.wait_for(caller.closed.wait(), 40)
            assert twilio.last().form == {
                "Twiml": '<?xml version="1.0" encoding="UTF-8"?><Response><Dial>'
                f'<Sip url="{url}/telephony/twilio/whisper">{DESK}</Sip></Dial></Response>'
            }
            assert caller.transferred_to == DESK
            (said,) = twilio.calls[caller.call_sid].whispers  # fetched, signed, as Twilio does
            assert f"<Say>{whisper}</Say>" in said


async def test_the_whisper_is_served_only_to_twilio(
    asr_server_url: str, asr_model_name: str
) -> None:
    async with TwilioStandIn() as twilio:
        with phone_agent(
            asr_server_url,
            asr_model_name,
            twilio,
            transfers_to(DESK),
            overrides={"transfer": {"whisper": "hello"}},
        ) as (url, _app, _chat):
            async with httpx.AsyncClient() as http:
                response = await http.post(
                    f"{url}/telephony/twilio/whisper", data={"CallSid": "CA1"}
                )
            assert response.status_code == 403 and "<Say>" not in response.text


async def test_a_refused_transfer_takes_its_end_reason_back_and_a_call_is_handed_over_once() -> (
    None
):
    async with TwilioStandIn() as twilio:
        call = CallRegistry(max_calls=1).reserve("twilio")
        rest = TwilioREST(account_sid=ACCOUNT_SID, auth_token=TOKEN, base_url=twilio.url)
        control = TwilioCallControl(rest, call=call, call_sid="CA" + "f" * 32)  # not a live call
        with pytest.raises(TransferFailed, match="404"):
            await control.transfer(TRANSFER_TO)
        assert call.end_reason is None  # the call goes on; it was not transferred
        live = twilio.call_in_progress()
        control = TwilioCallControl(rest, call=call, call_sid=live)
        await control.transfer(TRANSFER_TO)
        with pytest.raises(TransferFailed, match="already being transferred"):
            await control.transfer(DESK)
        assert [r.form["Twiml"].count("<Dial>") for r in twilio.requests[1:]] == [1]
        frame = TransferCallFrame(destination=TRANSFER_TO)
        await carry_out(frame, None)  # a call without call control
        with pytest.raises(TransferFailed, match="cannot be transferred"):
            await frame.outcome


async def test_talking_over_the_announcement_does_not_stop_the_transfer(
    asr_server_url: str, asr_model_name: str
) -> None:
    async with TwilioStandIn() as twilio:
        with phone_agent(asr_server_url, asr_model_name, twilio, transfers_to(TRANSFER_TO)) as (
            url,
            app,
            _chat,
        ):
            caller = await twilio.inbound_call(url + "/telephony/twilio")
            await caller.silence(0.3)
            await caller.speak(ulaw_speech("i would like to speak to a person please"))
            async with caller.quiet():
                await async_wait_for(lambda: bool(caller.loud_at), timeout_s=30, what="the line")
            talking = asyncio.create_task(caller.speak(ulaw_speech("hello are you still there")))
            await asyncio.wait_for(caller.closed.wait(), 30)
            talking.cancel()
            await asyncio.gather(talking, return_exceptions=True)
            assert caller.transferred_to == TRANSFER_TO
            announcement_s = spoken_seconds("Please hold while I transfer you.")
            assert caller.media_bytes_at_hand_over >= 0.9 * announcement_s * 8000
            await async_wait_for(
                lambda: app.state.registry.stats.active == 0, timeout_s=10, what="end"
            )
            assert app.state.registry.recent()[0].end_reason == f"transferred to {TRANSFER_TO}"
