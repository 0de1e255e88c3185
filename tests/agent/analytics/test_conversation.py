"""How one analytics call's transcript is put together from its two tracks' events, and what
a watcher is told (no recognizer here: the events as the transcribers report them)."""

from __future__ import annotations

import pytest

from agent.analytics.conversation import Conversation
from agent.analytics.post_call import parse_analysis, transcript_text
from agent.calls import CallRegistry


def conversation(*, redacting: bool = True) -> Conversation:
    return Conversation(CallRegistry(max_calls=1).reserve("twilio-analytics"), redacting=redacting)


def test_each_final_goes_to_its_speakers_stretch_of_speech_even_when_they_overlap() -> None:
    c = conversation()
    c.speech_started("caller", 0.5)
    c.speech_started("agent", 2.0)  # the agent starts before the caller is done
    c.speech_stopped("caller", 2.6)
    c.speech_started("caller", 3.1)  # the caller goes on before their first final came
    c.final("caller", "what is the weather")
    c.speech_stopped("agent", 4.0)
    c.final("agent", "let me check")
    c.speech_stopped("caller", 5.0)
    c.final("caller", "in paris")
    c.end()
    assert c.call.utterances == [
        {"speaker": "caller", "start_s": 0.5, "end_s": 2.6, "text": "what is the weather"},
        {"speaker": "agent", "start_s": 2.0, "end_s": 4.0, "text": "let me check"},
        {"speaker": "caller", "start_s": 3.1, "end_s": 5.0, "text": "in paris"},
    ]


def test_a_stretch_without_words_is_left_out_and_an_open_one_is_closed_at_the_end() -> None:
    c = conversation()
    c.speech_started("caller", 1.0)
    c.speech_stopped("caller", 1.4)  # a cough: no final ever comes
    c.speech_started("caller", 2.0)
    c.speech_stopped("caller", 3.0)
    c.final("caller", "hello")
    c.speech_started("agent", 4.0)  # still speaking when the stream ends
    c.final("agent", "good morning")
    c.end()
    assert [(u["start_s"], u["end_s"], u["text"]) for u in c.call.utterances] == [
        (2.0, 3.0, "hello"),
        (4.0, 4.0, "good morning"),
    ]


def test_watchers_get_redacted_interim_and_final_text_and_the_end() -> None:
    c = conversation()
    with c.watch() as events:
        c.speech_started("caller", 0.2)
        c.interim("caller", "my card is four one one")
        c.speech_stopped("caller", 3.0)
        c.final("caller", "my card is 4111 1111 1111 1111")
        c.end()
    seen = [events.get_nowait() for _ in range(events.qsize())]
    assert [e["type"] for e in seen] == ["speech", "interim", "speech", "utterance", "ended"]
    assert seen[1]["text"] == "my card is [account number]"
    assert seen[3]["text"] == "my card is [card number]"
    assert not [text for text in strings_in(c.snapshot()) if "4111" in text]
    assert c.call.attributes["redacted"] == "true"


def strings_in(value: object) -> list[str]:
    """Every string in a snapshot (its numbers are no words: a clock reading may hold 4111)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for key, item in value.items() for text in [str(key), *strings_in(item)]]
    if isinstance(value, list | tuple):
        return [text for item in value for text in strings_in(item)]
    return []


def test_with_redaction_off_the_words_are_kept_as_said() -> None:
    c = conversation(redacting=False)
    c.speech_started("agent", 0.0)
    c.speech_stopped("agent", 1.0)
    c.final("agent", "call 555 012 2345")
    assert c.call.utterances[0]["text"] == "call 555 012 2345"


def test_the_models_answer_is_checked_before_it_is_kept() -> None:
    good = (
        'Sure! {"summary": "A refund.", "reason": "refund", '
        '"sentiment": {"caller": "Negative", "agent": "neutral"}}'
    )
    assert parse_analysis(good) == {
        "summary": "A refund.",
        "reason": "refund",
        "sentiment": {"caller": "negative", "agent": "neutral"},
    }
    for bad in ("no json", '{"summary": "x"}', '{"summary": "x", "reason": "y", "sentiment": {}}'):
        with pytest.raises(ValueError):
            parse_analysis(bad)
    utterances = [{"speaker": "caller", "start_s": 1.25, "end_s": 2.0, "text": "hi"}]
    assert transcript_text(utterances) == "[1.2] caller: hi"
