"""Tools for a phone call: hand the caller to a person, press keys on another system's menu.

Unlike the tools in :mod:`agent.llm.tools`, these act on one call, so they are built per call
(``pipelines.services.call_tools``) and only for calls that can do what they offer.

``transfer_call(destination)``: the destination must be on the allow-list, else the model is
told why and which are allowed. Allowed, the agent says its announcement, then the call's
carrier hands the call over (:mod:`agent.transports.call_control`); the model gets no turn
after a transfer, or is told the transfer failed so it can say so.

``send_dtmf(digits)``: tones for the digits go out on the call's own audio, in order with the
speech around them. A media stream has no DTMF message, and Twilio's other route (updating the
call with ``<Play digits>``) replaces the TwiML the call runs, which ends the media stream and
with it this conversation; in-band tones are what a person's keypad sends on an analogue line,
and IVRs detect them.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence

from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.frames.frames import FunctionCallResultProperties, OutputDTMFFrame, TTSSpeakFrame
from pipecat.services.llm_service import FunctionCallParams

from agent.transports.call_control import TransferCallFrame, TransferFailed

DTMF_DIGITS = re.compile(r"^[0-9*#]{1,32}$")


def normalize_destination(destination: str) -> str:
    """A number without spaces, dashes, dots or brackets; a SIP URI as it is (trimmed)."""
    destination = destination.strip()
    if destination.lower().startswith(("sip:", "sips:")):
        return destination
    return re.sub(r"[\s\-.()]", "", destination)


def transfer_call_tool(*, destinations: Sequence[str], announcement: str) -> FunctionSchema:
    """The ``transfer_call`` tool, allowed to hand calls to ``destinations`` only."""
    allowed = {normalize_destination(d): d for d in destinations}
    listed = ", ".join(destinations)

    async def transfer_call(params: FunctionCallParams) -> None:
        asked = str(params.arguments.get("destination") or "")
        destination = allowed.get(normalize_destination(asked))
        if destination is None:
            await params.result_callback(
                {
                    "error": f"{asked or 'an empty destination'} is not an allowed transfer "
                    f"destination; allowed: {listed}. Do not transfer elsewhere."
                }
            )
            return
        speak = TTSSpeakFrame(announcement)
        speak.interruptible = False  # the caller hears why the line changes, whatever they say
        handover = TransferCallFrame(destination=destination)
        await params.llm.push_frame(speak)
        await params.llm.push_frame(handover)
        try:
            # Shielded: a cancelled tool call (the caller talked over the announcement) must
            # not cancel the outcome, or the hand-over would think nobody wants it.
            await asyncio.shield(handover.outcome)
        except TransferFailed as exc:
            await params.result_callback(
                {"error": f"the transfer to {destination} failed ({exc}); tell the caller"}
            )
            return
        await params.result_callback(
            {"transferred_to": destination},
            properties=FunctionCallResultProperties(run_llm=False),
        )

    return FunctionSchema(
        name="transfer_call",
        description="Transfer the caller to a person. Use it when the caller asks for a "
        "human, an agent or a colleague, or when you cannot help. Allowed destinations: "
        f"{listed}.",
        properties={
            "destination": {
                "type": "string",
                "enum": list(destinations),
                "description": "Where to transfer the call: one of the allowed destinations.",
            }
        },
        required=["destination"],
        handler=transfer_call,
    )


def send_dtmf_tool() -> FunctionSchema:
    """The ``send_dtmf`` tool: key tones on the call, for an automated menu at the other end."""

    async def send_dtmf(params: FunctionCallParams) -> None:
        digits = str(params.arguments.get("digits") or "").replace(" ", "")
        if not DTMF_DIGITS.match(digits):
            await params.result_callback(
                {"error": f"{digits!r} is not a key sequence; use 1-32 of 0-9, * and #"}
            )
            return
        await params.llm.push_frame(OutputDTMFFrame.from_string(digits))
        await params.result_callback({"sent": digits})

    return FunctionSchema(
        name="send_dtmf",
        description="Press keys on the phone keypad, e.g. to choose an option in an automated "
        "menu on the other end of the call ('press 1 for sales').",
        properties={
            "digits": {
                "type": "string",
                "description": "The keys to press, in order: digits 0-9, * and #.",
            }
        },
        required=["digits"],
        handler=send_dtmf,
    )
