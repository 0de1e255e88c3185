"""A statement both models call finished is answered after the text model's wait, not the
bound, on a real phone call.

"Ich möchte einen Tisch für zwei Personen reservieren." asks for nothing by its words (no
question mark, and the words rule knows English requests only), so before the text model's
wait (``turn.text_end_p``, ``turn.text_end_wait_s``) it waited for the 1.3 s bound. Smart Turn
calls it complete on the phone line (0.89) and the local LLM reads p(end) 0.52 after the
greeting, over ``text_end_p`` (0.1): the turn ends after ``text_end_wait_s`` (0.8 s). The
words come from the Voxtral stand-in; the model, its server and the call are real. Which wait
ended the turn is read from the strategy's log ("turn ends (finished)"), not from a loaded
machine's clock.
"""

from __future__ import annotations

import pytest

from agent.config import LLMSettings
from tests.agent.transports.stack import phone_server
from tests.agent.turns.test_short_wait_on_a_call import ANSWER_WITHIN_S, call
from tests.agent.turns.test_text_veto_on_a_call import MODEL_TIMEOUT_S
from tests.conftest import requires_espeak, requires_local_llm
from tests.fakes.paused_speech import extended
from tests.fakes.realtime_peer import RealtimePeer
from tests.fakes.reference_words import ReferenceWords

pytestmark = [requires_espeak, requires_local_llm, pytest.mark.timeout(120)]


async def test_a_german_statement_is_answered_on_the_models_wait(
    local_llm: LLMSettings, redacted_log: list[str]
) -> None:
    utterance = next(u for u in extended() if u.language == "de" and u.kind == "statement")
    speech, _ = utterance.audio(8000)
    words = ReferenceWords()
    voxtral = RealtimePeer(model="voxtral-test", transcribe=words.transcribe)
    turn = {
        "text_model": True,
        "text_model_url": local_llm.base_url,
        "text_timeout_s": MODEL_TIMEOUT_S,
    }
    async with voxtral:
        with phone_server(voxtral.url, "voxtral-test", max_calls=2, turn=turn) as (url, app):
            caller, ended = await call(
                url, app, "CASTATEMENT", speech, speaking=lambda at: words.play(utterance, at)
            )
    assert caller.first_loud(ended) is not None, f"no answer within {ANSWER_WITHIN_S} s"
    ends = [line for line in redacted_log if "turn ends" in line]
    assert len(ends) == 1 and "turn ends (finished)" in ends[0], ends
