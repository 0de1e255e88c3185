"""The text model's veto on a real phone call: a request that goes on after its pause is not
answered at the pause.

"Can you tell me... the opening hours": at the pause the recognizer writes "Can you tell me."
(a full stop closes what it heard before the silence), a question by its words, and Smart Turn
calls the pause complete (0.97 on the phone line), so without the model the bot answers at the
pause. The local LLM (the offline profile's SmolLM2, ``turn.text_model`` on) all but rules out
an end after "can you tell me" (p 0.000, under ``turn.text_unfinished_p``, 0.02), so the turn
waits and ends once "the opening hours" has been said. The words come from the Voxtral
stand-in, written as the turn-taking bench's reference recognizer writes them; the model and
its server are real. So with a German start of two words, "Ich möchte... einen Kaffee
bestellen": Smart Turn calls its pause complete, the words rule reads "Ich möchte." as a short
command, and the model reads p 0.000.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI

from agent.config import LLMSettings
from tests.agent.transports.stack import phone_server
from tests.agent.turns.test_short_wait_on_a_call import ANSWER_WITHIN_S, call
from tests.conftest import requires_espeak, requires_local_llm
from tests.fakes.paused_speech import Utterance, extended
from tests.fakes.realtime_peer import RealtimePeer
from tests.fakes.reference_words import ReferenceWords
from tests.fakes.twilio_caller import TwilioCaller

pytestmark = [requires_espeak, requires_local_llm, pytest.mark.timeout(120)]

MODEL_TIMEOUT_S = 1.0
"""How long the turn waits for the model here: the time it takes is the bench's to measure
(191 ms on average, warm), not a loaded test machine's to decide."""


async def call_with_the_model(
    local_llm: LLMSettings, utterance: Utterance, call_sid: str, **turn: Any
) -> tuple[TwilioCaller, float, FastAPI]:
    """A phone call to the real server with the local model on (and ``turn`` settings), in
    which the caller says ``utterance`` and the Voxtral stand-in writes its words; returns the
    caller, when its speech ended (``time.monotonic``) and the server's app."""
    speech, _ = utterance.audio(8000)
    words = ReferenceWords()
    voxtral = RealtimePeer(model="voxtral-test", transcribe=words.transcribe)
    settings = {
        "text_model": True,
        "text_model_url": local_llm.base_url,
        "text_timeout_s": MODEL_TIMEOUT_S,
        **turn,
    }
    async with voxtral:
        with phone_server(voxtral.url, "voxtral-test", max_calls=2, turn=settings) as (url, app):
            caller, ended = await call(
                url, app, call_sid, speech, speaking=lambda at: words.play(utterance, at)
            )
    return caller, ended, app


@pytest.mark.parametrize(
    ("start", "transcript"),
    [
        ("can you tell me", ["Can you tell me.", "The opening hours."]),
        # two words, which the words rule alone reads as a command: the model reads them too
        ("ich möchte", ["Ich möchte.", "Einen kaffee bestellen."]),
    ],
)
async def test_a_request_that_goes_on_after_its_pause_is_answered_after_its_end(
    local_llm: LLMSettings, redacted_log: list[str], start: str, transcript: list[str]
) -> None:
    utterance = next(u for u in extended() if u.phrases[0] == start)
    caller, ended, app = await call_with_the_model(local_llm, utterance, "CATELLME")
    began = ended - utterance.audio(8000)[1]
    answered = caller.first_loud(began)
    assert answered is not None, f"no answer within {ANSWER_WITHIN_S} s of the end of speech"
    assert answered > ended, f"answered at the pause, {answered - began:.2f} s into the turn"
    ends = [line for line in redacted_log if "turn ends" in line]
    assert len(ends) == 1, f"expected one turn: {ends}"
    assert app.state.registry.recent()[-1].user_transcript == transcript


@pytest.mark.parametrize(
    ("threshold", "at_the_pause"),
    [(0.001, False), (0.0, True)],
    ids=["the offline profile's threshold: after its end", "the question mark decides: at it"],
)
async def test_a_fragment_tiny_en_closes_with_a_question_mark_is_read_by_the_model(
    local_llm: LLMSettings,
    asr_server_url: str,
    asr_model_name: str,
    threshold: float,
    at_the_pause: bool,
) -> None:
    """The offline profile's recognizer, tiny.en, writes the pause in "can you tell me... the
    opening hours" as "Can you tell me?", a question, and Smart Turn hears a finished question
    in the voice. The model reads the words going on (p(end) 0.000): under the offline
    profile's ``turn.text_question_unfinished_p`` the turn waits the model's wait, which the
    0.68 s pause does not outlast. Without it the question mark decides, and the bot answers at
    the pause (the bench's false end), which is what makes this a test of the setting and not
    of whatever punctuation tiny.en writes on this machine."""
    utterance = next(u for u in extended() if u.phrases[0] == "can you tell me")
    speech, _ = utterance.audio(8000)
    turn = {
        "text_model": True,
        "text_model_url": local_llm.base_url,
        "text_timeout_s": MODEL_TIMEOUT_S,
        "text_question_unfinished_p": threshold,
    }
    with phone_server(asr_server_url, asr_model_name, max_calls=2, turn=turn) as (url, app):
        caller, ended = await call(url, app, "CAQUESTION", speech)
    transcript = app.state.registry.recent()[-1].user_transcript
    assert transcript[0] == "Can you tell me?", "tiny.en wrote the pause otherwise"
    began = ended - utterance.audio(8000)[1]
    answered = caller.first_loud(began)
    assert answered is not None, f"no answer within {ANSWER_WITHIN_S} s of the end of speech"
    assert (answered < ended) == at_the_pause, f"answered {answered - began:.2f} s into the turn"
