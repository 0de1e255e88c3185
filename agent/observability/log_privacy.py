"""No transcript text in the server's logs unless ``observability.log_transcripts`` says so.

Our own code quotes what was said only through :func:`said`, which marks the words; every
line, whatever its logger, has marked words replaced by ``[…]`` (a test fails on a log call
that formats conversation text without it). Pipecat quotes text too: its debug lines quote
each sentence the TTS speaks (``Generating TTS [You said: …]``) and other conversation text,
and one warning quotes a sentence it could not speak (``… not speaking [text]``). Loguru's
default handler prints debug lines, so until now every bot sentence reached the server's
stderr.

``voice-agent serve`` therefore logs through :func:`install`: Pipecat's debug and trace
lines are dropped, and a Pipecat line of any level that ends in a bracketed quote has the
quote replaced by ``[…]``. With ``observability.log_transcripts = true`` (for debugging, on
a machine whose logs may hold personal data) everything is logged as before.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from loguru import logger

if TYPE_CHECKING:
    from loguru import Record

FORMAT = (
    "<green>{time:YYYY-MM-DD HH:mm:ss.SSS}</green> | <level>{level: <8}</level> | "
    "<cyan>{name}</cyan>:<cyan>{function}</cyan>:<cyan>{line}</cyan> - "
    "<level>{extra[_shown]}</level>\n{exception}"
)
"""Loguru's default format, showing the message as redacted."""

_QUOTE = re.compile(r"\[[^\[\]]*\]\s*$")
_OPEN, _CLOSE = "\u27e6", "\u27e7"  # ⟦ ⟧: around words someone said, in our own lines
_SAID = re.compile(f"{_OPEN}[^{_CLOSE}]*{_CLOSE}")
_INFO = logger.level("INFO").no


def _from_pipecat(record: Record) -> bool:
    name = record["name"] or ""
    return name == "pipecat" or name.startswith("pipecat.")


def said(text: str) -> str:
    """``text`` (what a caller or the bot said) marked for the log handler, which shows it as
    ``[text]`` with ``log_transcripts`` and as ``[…]`` without."""
    return f"{_OPEN}{text.replace(_CLOSE, '')}{_CLOSE}"


def handler_options(*, log_transcripts: bool) -> dict[str, Any]:
    """``logger.add`` keyword arguments (filter and format) for a handler that keeps
    conversation text out unless ``log_transcripts``."""

    def keep(record: Record) -> bool:
        shown = record["message"]
        if not log_transcripts and _from_pipecat(record):
            if record["level"].no < _INFO:
                return False
            shown = _QUOTE.sub("[…]", shown)
        if log_transcripts:
            shown = shown.replace(_OPEN, "[").replace(_CLOSE, "]")
        else:
            shown = _SAID.sub("[…]", shown)
        record["extra"]["_shown"] = shown
        return True

    return {"filter": keep, "format": FORMAT}


def install(*, log_transcripts: bool, sink: TextIO | Callable[[Any], None] = sys.stderr) -> int:
    """Replace loguru's handlers with one on ``sink`` (stderr) that follows the setting."""
    logger.remove()
    return logger.add(sink, level="DEBUG", **handler_options(log_transcripts=log_transcripts))
