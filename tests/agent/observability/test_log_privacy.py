"""What the server's log handler lets through: no conversation text unless asked for.

Pipecat's own lines are made as Pipecat makes them, by logging from a record whose module
is Pipecat's (``logger.patch``); a real call's logs are checked in
``test_call_records_on_a_call.py``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
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


def test_words_our_code_quotes_are_redacted_whatever_the_level(
    shown: dict[bool, list[str]],
) -> None:
    from agent.observability.log_privacy import said

    logger.warning(f"TentativeAnswerUserAggregator#0: false end: {said('my PIN is 4321')}")
    (line,) = shown[False]
    assert "false end: […]" in line and "4321" not in line
    assert "false end: [my PIN is 4321]" in shown[True][0]


LOGGING = {"trace", "debug", "info", "success", "warning", "error", "critical", "exception"}
CONVERSATION_NAMES = {
    "text", "final", "transcript", "transcription", "sentence", "words", "utterance",
    "content", "said", "announcement", "digits",
}  # fmt: skip
"""Names that hold what someone said; a log line formats them only through ``said()``."""


def _log_calls_quoting_the_conversation(tree: ast.AST) -> list[ast.Call]:
    found = []
    for call in ast.walk(tree):
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr in LOGGING
            and isinstance(call.func.value, ast.Name)
            and call.func.value.id == "logger"
        ):
            continue
        for value in (v for arg in call.args for v in ast.walk(arg)):
            if not isinstance(value, ast.FormattedValue):
                continue
            inner = value.value
            if isinstance(inner, ast.Call) and getattr(inner.func, "id", None) == "said":
                continue
            names = {n.id for n in ast.walk(inner) if isinstance(n, ast.Name)}
            names |= {n.attr for n in ast.walk(inner) if isinstance(n, ast.Attribute)}
            if names & CONVERSATION_NAMES:
                found.append(call)
    return found


def test_no_log_call_of_ours_formats_conversation_text_unmarked() -> None:
    """The promise is structural: a log call that formats a transcript, a sentence or a
    message without ``said()`` fails here, whatever its level."""
    root = Path(__file__).resolve().parents[3]
    offenders = [
        f"{path.relative_to(root)}:{call.lineno}"
        for package in ("agent", "pipelines")
        for path in sorted((root / package).rglob("*.py"))
        for call in _log_calls_quoting_the_conversation(ast.parse(path.read_text()))
    ]
    assert offenders == []


def test_the_check_finds_an_unmarked_quote() -> None:
    sample = 'logger.debug(f"{self}: false end: [{text}]")\nlogger.info(f"x {said(text)}")\n'
    assert len(_log_calls_quoting_the_conversation(ast.parse(sample))) == 1
