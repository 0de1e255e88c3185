"""What the server's log handler lets through: no conversation text unless asked for.

Pipecat's own lines are made as Pipecat makes them, by logging from a record whose module
is Pipecat's (``logger.patch``); a real call's logs are checked in
``test_call_records_on_a_call.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from loguru import logger

from agent.observability.log_privacy import handler_options

if TYPE_CHECKING:
    from loguru import Logger


def pipecat_logger(module: str) -> Logger:
    return logger.patch(lambda record: record.update(name=module))


@pytest.fixture
def shown() -> Iterator[dict[bool, list[str]]]:
    lines: dict[bool, list[str]] = {False: [], True: []}
    sinks = [
        logger.add(lines[flag].append, level="TRACE", **handler_options(log_transcripts=flag))
        for flag in (False, True)
    ]
    yield lines
    for sink in sinks:
        logger.remove(sink)


def test_pipecat_debug_lines_quote_the_conversation_and_are_dropped(
    shown: dict[bool, list[str]],
) -> None:
    tts = pipecat_logger("pipecat.services.tts_service")
    tts.debug("OpenAISpeechService#0: Generating TTS [You said: my card number is 4111.]")
    assert shown[False] == []
    assert "my card number is 4111" in shown[True][0]


def test_a_pipecat_warning_keeps_its_news_without_the_quote(
    shown: dict[bool, list[str]],
) -> None:
    tts = pipecat_logger("pipecat.services.tts_service")
    tts.warning("OpenAISpeechService#0: service is no longer usable, not speaking [Hello Bob]")
    (line,) = shown[False]
    assert "not speaking […]" in line and "Bob" not in line
    assert "not speaking [Hello Bob]" in shown[True][0]


def test_our_own_lines_pass_untouched(shown: dict[bool, list[str]]) -> None:
    logger.debug("call twilio-1-ab: media stream [1 of 2] closed")
    assert "[1 of 2]" in shown[False][0]
