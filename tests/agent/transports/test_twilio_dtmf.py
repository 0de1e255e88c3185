"""Keypresses on a phone call: the caller's reach the model as one sentence per sequence and
change its answer, a keypress interrupts the bot as speech does, and the model's own key
presses reach the line as tones an IVR hears."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.agent.transports.phone_stack import last_user_text, phone_agent
from tests.agent.transports.stack import async_wait_for
from tests.conftest import quoted_in, requires_espeak
from tests.fakes.chat_server import ToolCall
from tests.fakes.twilio_caller import heard_keys
from tests.fakes.twilio_rest import TwilioStandIn

pytestmark = [requires_espeak, pytest.mark.timeout(120)]

LONG = (
    "Welcome to sales. Our opening hours are nine to five on weekdays, and ten to two on "
    "Saturdays. Our offices are closed on public holidays, and our team will be glad to help."
)


def menu(messages: list[dict[str, Any]]) -> str | ToolCall:
    """An IVR-minded model: it acts on what the caller pressed."""
    said = last_user_text(messages)
    if messages[-1].get("role") == "tool":
        return "Done."
    if said == "The caller pressed 42.":
        return "You entered forty two."
    if said == "The caller pressed 1.":
        return LONG
    if said == "The caller pressed 2.":
        return "You chose support."
    if said == "The caller pressed 9.":
        return ToolCall("send_dtmf", {"digits": "3#"})
    return "Press 1 for sales or 2 for support."


def user_messages(chat: Any) -> list[str]:
    return [last_user_text(r["messages"]) for r in chat.requests]


async def test_a_keypress_sequence_reaches_the_model_once_and_changes_its_answer(
    asr_server_url: str, asr_model_name: str, redacted_log: list[str]
) -> None:
    async with TwilioStandIn() as twilio:
        with phone_agent(asr_server_url, asr_model_name, twilio, menu) as (url, app, chat):
            caller = await twilio.inbound_call(url + "/telephony/twilio")
            async with caller.quiet():
                await asyncio.sleep(0.3)
                await caller.press("4")
                await asyncio.sleep(0.15)
                await caller.press("2")
                await async_wait_for(
                    lambda: (
                        "You entered forty two."
                        in " ".join(app.state.registry.calls()[0].bot_transcript)
                    ),
                    timeout_s=20,
                    what="the answer to the keys",
                )
            assert user_messages(chat) == ["The caller pressed 42."]  # one message, debounced
            await caller.stop()
            await asyncio.wait_for(caller.closed.wait(), 10)
    assert quoted_in(redacted_log, "pressed 42", "forty two") == []


async def test_a_keypress_interrupts_the_bot_like_speech(
    asr_server_url: str, asr_model_name: str
) -> None:
    async with TwilioStandIn() as twilio:
        with phone_agent(asr_server_url, asr_model_name, twilio, menu) as (url, app, chat):
            caller = await twilio.inbound_call(url + "/telephony/twilio")
            call = None
            async with caller.quiet():
                await asyncio.sleep(0.3)
                await caller.press("1")
                await async_wait_for(
                    lambda: caller.count("media") >= 25, timeout_s=20, what="bot audio"
                )
                clears = caller.count("clear")
                await caller.press("2")
                await async_wait_for(
                    lambda: caller.count("clear") > clears, timeout_s=5, what="a clear on the key"
                )
                assert caller.media_at_clear[-1] < 300  # LONG is ~10 s: cut short
                call = app.state.registry.calls()[0]
                await async_wait_for(
                    lambda: "You chose support." in " ".join(call.bot_transcript),
                    timeout_s=20,
                    what="the answer to the second key",
                )
            assert user_messages(chat)[-1] == "The caller pressed 2."
            await caller.stop()
            await asyncio.wait_for(caller.closed.wait(), 10)


async def test_the_model_presses_keys_as_tones_on_the_line(
    asr_server_url: str, asr_model_name: str
) -> None:
    async with TwilioStandIn() as twilio:
        with phone_agent(asr_server_url, asr_model_name, twilio, menu) as (url, _app, chat):
            caller = await twilio.inbound_call(url + "/telephony/twilio")
            async with caller.quiet():
                await asyncio.sleep(0.3)
                await caller.press("9")
                await async_wait_for(
                    lambda: "3#" in heard_keys(caller.audio), timeout_s=20, what="the tones"
                )
                await async_wait_for(
                    lambda: any(r["messages"][-1].get("role") == "tool" for r in chat.requests),
                    timeout_s=10,
                    what="the tool's result to reach the model",
                )
            assert heard_keys(caller.audio) == "3#"
            await caller.stop()
            await asyncio.wait_for(caller.closed.wait(), 10)
