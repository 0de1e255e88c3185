"""The phone tools as the model meets them: what is offered when, what is refused and why, and
what each pushes into the pipeline. (End to end on a phone call: tests/agent/transports.)"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pipecat.frames.frames import Frame, OutputDTMFFrame, TTSSpeakFrame

from agent.config import DTMFSettings, TransferSettings
from agent.llm.phone_tools import send_dtmf_tool, transfer_call_tool
from agent.transports.call_control import TransferCallFrame, TransferFailed
from pipelines.services import call_tools


class LLM:
    def __init__(self) -> None:
        self.pushed: list[Frame] = []

    async def push_frame(self, frame: Frame) -> None:
        self.pushed.append(frame)


class Params:
    """The fields of FunctionCallParams the handlers use."""

    def __init__(self, arguments: dict[str, Any]) -> None:
        self.arguments = arguments
        self.llm = LLM()
        self.results: list[tuple[Any, Any]] = []

    async def result_callback(self, result: Any, *, properties: Any = None) -> None:
        self.results.append((result, properties))


class Control:
    async def transfer(self, destination: str) -> None:
        raise AssertionError("not called here")


TRANSFER = transfer_call_tool(
    destinations=["+15550100", "sip:desk@pbx.example.com"], announcement="One moment."
)


async def test_a_destination_off_the_list_is_refused_with_the_list() -> None:
    params = Params({"destination": "+19990000"})
    await TRANSFER.handler(params)  # type: ignore[misc,arg-type]
    ((result, _props),) = params.results
    assert "+19990000 is not an allowed transfer destination" in result["error"]
    assert "+15550100, sip:desk@pbx.example.com" in result["error"]
    assert params.llm.pushed == []


async def test_an_allowed_transfer_says_its_line_then_hands_over_without_another_turn() -> None:
    params = Params({"destination": "+1 555-0100"})  # as a model may write it
    handling = asyncio.create_task(TRANSFER.handler(params))  # type: ignore[misc,arg-type]
    await asyncio.sleep(0.01)
    speak, handover = params.llm.pushed
    assert isinstance(speak, TTSSpeakFrame) and speak.text == "One moment."
    assert not speak.interruptible and not handover.interruptible
    assert isinstance(handover, TransferCallFrame) and handover.destination == "+15550100"
    assert params.results == []  # the model hears nothing until the carrier took it
    handover.outcome.set_result(None)
    await handling
    ((result, props),) = params.results
    assert result == {"transferred_to": "+15550100"} and props.run_llm is False


async def test_a_failed_transfer_is_told_to_the_model() -> None:
    params = Params({"destination": "sip:desk@pbx.example.com"})
    handling = asyncio.create_task(TRANSFER.handler(params))  # type: ignore[misc,arg-type]
    await asyncio.sleep(0.01)
    params.llm.pushed[1].outcome.set_exception(TransferFailed("Twilio answered 404"))  # type: ignore[attr-defined]
    await handling
    ((result, props),) = params.results
    assert "failed (Twilio answered 404)" in result["error"] and props is None


@pytest.mark.parametrize("digits", ["", "12a", "1" * 33, "9;"])
async def test_send_dtmf_refuses_what_is_not_a_key(digits: str) -> None:
    params = Params({"digits": digits})
    await send_dtmf_tool().handler(params)  # type: ignore[misc,arg-type]
    assert "not a key sequence" in params.results[0][0]["error"]
    assert params.llm.pushed == []


async def test_send_dtmf_pushes_the_keys_in_order() -> None:
    params = Params({"digits": "1 2#"})
    await send_dtmf_tool().handler(params)  # type: ignore[misc,arg-type]
    (frame,) = params.llm.pushed
    assert isinstance(frame, OutputDTMFFrame) and frame.to_string() == "12#"
    assert params.results[0][0] == {"sent": "12#"}


def test_transfer_is_offered_only_when_on_and_the_call_can_be_transferred() -> None:
    on = TransferSettings(enabled=True, destinations=["+15550100"])
    names = lambda tools: [t.name for t in tools]  # noqa: E731
    assert names(call_tools(on, DTMFSettings(), Control())) == ["transfer_call"]
    assert names(call_tools(on, DTMFSettings(), None)) == []  # no carrier API: not offered
    assert names(call_tools(TransferSettings(), DTMFSettings(), Control())) == []
    assert names(call_tools(on, DTMFSettings(send_tool=True), None)) == ["send_dtmf"]
