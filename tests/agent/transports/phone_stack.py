"""The server set up for phone calls with every carrier feature on, against real peers on
loopback: the offline ASR server, an espeak speech server, a scripted chat model
(:class:`~tests.fakes.chat_server.ChatServer`) and the Twilio stand-in
(:class:`~tests.fakes.twilio_rest.TwilioStandIn`) for the REST API."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI
from loguru import logger

from tests.agent.transports.stack import running_server, stack_settings
from tests.fakes.chat_server import ChatServer, Script
from tests.fakes.speech_server import SpeechServer
from tests.fakes.twilio_caller import TOKEN
from tests.fakes.twilio_rest import TwilioStandIn

TRANSFER_TO = "+15550100"
DESK = "sip:desk@pbx.example.com"
OPERATOR_TOKEN = "operator-secret"


@contextmanager
def phone_agent(
    asr_url: str,
    asr_model: str,
    twilio: TwilioStandIn,
    script: Script,
    *,
    max_calls: int = 2,
    credentials: bool = True,
    overrides: dict[str, dict[str, Any]] | None = None,
) -> Iterator[tuple[str, FastAPI, ChatServer]]:
    """The server, its app and its chat model; ``credentials=False`` leaves out Twilio's
    account SID (no REST API); ``overrides``: ``{section: {key: value}}`` on top."""
    with SpeechServer(voice="espeak") as tts, ChatServer(script=script) as chat:
        settings = stack_settings(
            asr_url=asr_url, asr_model=asr_model, tts_url=tts.url, max_calls=max_calls
        )
        settings.server.api_token = OPERATOR_TOKEN
        settings.llm.kind = "openai"
        settings.llm.base_url = chat.base_url
        settings.llm.model = "chat-server"
        settings.twilio.auth_token = TOKEN
        settings.twilio.account_sid = twilio.account_sid if credentials else None
        settings.twilio.api_base_url = twilio.url
        settings.twilio.from_number = "+15550199"
        settings.transfer.enabled = True
        settings.transfer.destinations = [TRANSFER_TO, DESK]
        settings.transfer.announcement = "Please hold while I transfer you."
        settings.dtmf.send_tool = True
        settings.dtmf.timeout_s = 0.5
        for section, values in (overrides or {}).items():
            for key, value in values.items():
                setattr(getattr(settings, section), key, value)
        with running_server(settings) as (url, app):
            yield url, app, chat


def last_user_text(messages: list[dict[str, Any]]) -> str:
    users = [m for m in messages if m.get("role") == "user"]
    content = users[-1].get("content", "") if users else ""
    return content if isinstance(content, str) else str(content)


def tool_results(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m.get("content", "")) for m in messages if m.get("role") == "tool"]


@contextmanager
def errors_logged() -> Iterator[list[str]]:
    """Every ERROR (or worse) the server logs inside the block, but one: Pipecat 1.14's
    websocket client logs the close it sends as an error when the carrier's own close crossed
    it on the wire (a transfer or hang-up: both sides close at once; the socket ends closed
    either way, and nothing of the call is lost)."""
    errors: list[str] = []

    def keep(message: Any) -> None:
        text = str(message)
        if not (
            "FastAPIWebsocketClient" in text and "exception while closing the websocket" in text
        ):
            errors.append(text)

    sink = logger.add(keep, level="ERROR")
    try:
        yield errors
    finally:
        logger.remove(sink)
