"""The text end-of-turn signal on a real phone call: the local LLM's p(end) beside Smart Turn.

Each case is one Twilio call to the real server (the adaptive end of turn, Smart Turn v3 on the
call's audio), with the text model on (the packaged SmolLM2 behind llama.cpp's server,
``local_llm``) and, as the control, off: the same call must end the other way without it, so
what decides is the text signal. The words are what Voxtral writes (the strict realtime peer
stands in for it); the strategy says in the log what Smart Turn said, what the model said and
which wait ended the turn ("complete": the short one, "waited": the upper bound).
"""

from __future__ import annotations

from typing import Any

import pytest

from agent.config import LLMSettings
from tests.agent.transports.stack import phone_server
from tests.agent.turns.test_short_wait_on_a_call import call, trimmed
from tests.conftest import requires_espeak, requires_local_llm
from tests.fakes.realtime_peer import RealtimePeer
from tests.fakes.speech import speech_at

pytestmark = [
    requires_espeak,
    requires_local_llm,
    pytest.mark.conversation,
    pytest.mark.timeout(180),
]


async def turn_ends(
    log: list[str], transcript: str, speech: bytes, turn: dict[str, Any], sid: str
) -> list[str]:
    """How the call's turns ended, and what Smart Turn and the model said, from the log."""
    start = len(log)
    voxtral = RealtimePeer(model="voxtral-test", transcript=transcript)
    async with voxtral:
        with phone_server(voxtral.url, "voxtral-test", max_calls=2, turn=turn) as (url, app):
            await call(url, app, sid, speech)
    return [
        line
        for line in log[start:]
        if "turn ends" in line or "Smart Turn says" in line or "p(end)=" in line
    ]


def ended(lines: list[str]) -> list[str]:
    return [line.rsplit("turn ends ", 1)[1].strip() for line in lines if "turn ends" in line]


async def test_a_sentence_smart_turn_calls_complete_still_waits_when_the_model_hears_it_go_on(
    local_llm: LLMSettings, redacted_log: list[str]
) -> None:
    """ "Book a table" at a pause ("... for two"): Smart Turn calls it complete and the words
    read a request, so without the model it ends at once; the model expects more."""
    transcript = "Book a table."
    speech = trimmed(speech_at("book a table", 8000))
    text = {"text_model": True, "text_model_url": local_llm.base_url, "text_unfinished_p": 0.1}

    with_model = await turn_ends(redacted_log, transcript, speech, text, "CAUNFINISHED1")
    assert any("Smart Turn says complete" in line for line in with_model), with_model
    assert ended(with_model) == ["(waited)"], with_model

    without = await turn_ends(redacted_log, transcript, speech, {"text_model": False}, "CAUN2")
    assert ended(without) == ["(complete)"], without
