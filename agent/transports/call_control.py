"""Acting on a phone call from inside its pipeline: hand it over to a person.

A tool (:mod:`agent.llm.phone_tools`) pushes a :class:`TransferCallFrame` down the pipeline
right after the line the agent says first. The frame waits in the output transport's audio
queue behind that line (Pipecat's ``write_transport_frame`` hook: "after preceding audio has
been sent", and the output is paced in real time), so the caller hears the whole line before
the call is handed over. Both the line and the frame are uninterruptible: a caller who talks
over the announcement is still transferred.

The media stream's output (:class:`CallControlOutputTransport`) then asks the call's
:class:`CallControl` (Twilio: :class:`TwilioCallControl`, a REST update with ``<Dial>``) and
settles the frame's ``outcome``, which the tool awaits to tell the model how it went.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Protocol

from loguru import logger
from pipecat.frames.frames import DataFrame, Frame
from pipecat.transports.websocket.fastapi import FastAPIWebsocketOutputTransport

from agent.calls import Call
from agent.transports.twilio_rest import TwilioREST, TwilioRESTError, twiml_dial


class TransferFailed(RuntimeError):
    """The carrier did not take the transfer; the message says why."""


class CallControl(Protocol):
    """What a phone call can be asked to do by its carrier."""

    async def transfer(self, destination: str) -> None:
        """Hand the call to ``destination`` (a number or SIP URI); the media stream ends.

        Raises:
            TransferFailed: the carrier refused or could not be reached.
        """
        ...


@dataclass
class TransferCallFrame(DataFrame):
    """Hand the call to ``destination`` once the audio queued before this frame was sent."""

    destination: str = ""
    outcome: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    interruptible: bool = field(default=False, init=False)  # talking over the line changes nothing


class CallControlOutputTransport(FastAPIWebsocketOutputTransport):
    """A media stream's output that carries out :class:`TransferCallFrame`s in audio order."""

    def __init__(self, *args: Any, control: CallControl | None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._control = control

    async def write_transport_frame(self, frame: Frame) -> None:
        if isinstance(frame, TransferCallFrame):
            await carry_out(frame, self._control)
        else:
            await super().write_transport_frame(frame)


async def carry_out(frame: TransferCallFrame, control: CallControl | None) -> None:
    """Ask ``control`` for the transfer and settle ``frame.outcome`` (never raises).

    The transfer goes ahead even when nobody waits for the outcome any more (the tool's call
    was cancelled because the caller talked over the announcement)."""
    error: TransferFailed | None = None
    if control is None:
        error = TransferFailed("this call cannot be transferred")
    else:
        try:
            await control.transfer(frame.destination)
        except TransferFailed as exc:
            error = exc
        except Exception as exc:  # a bug must not end the call: the model hears it failed
            logger.exception("transfer failed")
            error = TransferFailed(f"{type(exc).__name__}: {exc}")
    if frame.outcome.done():
        return
    if error is not None:
        frame.outcome.set_exception(error)
    else:
        frame.outcome.set_result(None)


class TwilioCallControl:
    """A Twilio call's control: transfer by updating the live call with ``<Dial>``.

    Twilio then ends the media stream itself (``stop``, then close), which ends the pipeline;
    the call's end reason says where it went.
    """

    def __init__(
        self, rest: TwilioREST, *, call: Call, call_sid: str, whisper_url: str | None = None
    ) -> None:
        self._rest = rest
        self._call = call
        self._call_sid = call_sid
        self._whisper_url = whisper_url
        self._transferring: str | None = None

    async def transfer(self, destination: str) -> None:
        if self._transferring is not None:  # a model that asks twice: the call is on its way
            raise TransferFailed(f"the call is already being transferred to {self._transferring}")
        self._transferring = destination
        # Twilio may stop the stream (and so cancel this pipeline) before its answer reaches
        # us: the reason is given first, the request runs to its end whatever happens here,
        # and a refused transfer takes the reason back.
        reason = f"transferred to {destination}"
        self._call.end_because(reason)
        update = asyncio.ensure_future(
            self._rest.update_call(
                self._call_sid, twiml=twiml_dial(destination, whisper_url=self._whisper_url)
            )
        )
        update.add_done_callback(lambda done: self._settled(done, reason))
        try:
            await asyncio.shield(update)
        except TwilioRESTError as exc:
            self._transferring = None
            raise TransferFailed(str(exc)) from exc
        logger.info(f"call {self._call.id}: {reason}")

    def _settled(self, update: asyncio.Future[dict[str, Any]], reason: str) -> None:
        error = None if update.cancelled() else update.exception()
        if error is not None:
            logger.warning(f"call {self._call.id}: {reason} failed: {error}")
            if self._call.end_reason == reason:
                self._call.end_reason = None
