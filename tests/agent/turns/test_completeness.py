"""Which transcripts read as a complete question or request: the one thing the words are
trusted to say."""

from __future__ import annotations

import pytest

from agent.turns.completeness import last_sentence, looks_like_complete_question


@pytest.mark.parametrize(
    "text",
    [
        "What time is it?",
        "is the store open today.",  # tiny.en drops the question mark: the word order says it
        "when you get a moment. Could you check my last order?",
        "Um... What was it?",  # the words can't hear hesitation; Smart Turn can
        "Turn on the lights in the kitchen.",
        "Okay, please call me back tomorrow morning.",
    ],
)
def test_questions_and_requests_are_complete(text: str) -> None:
    assert looks_like_complete_question(text)


@pytest.mark.parametrize(
    "text",
    [
        "I would like to book a table.",  # a full stop on every fragment is no evidence
        "when you get a moment.",  # a wh-word opening a clause is not a question
        "So. I was wondering.",
        "My number is five.",
        "I would like to book a table for two people.",  # a statement: it may go on
        "Call me.",  # too short to tell
        "Is it the one with the?",
        "Can you",
        "",
        "...",
    ],
)
def test_statements_and_fragments_are_not(text: str) -> None:
    assert not looks_like_complete_question(text)


def test_no_fragment_of_the_paused_speech_set_reads_as_complete_before_its_end() -> None:
    """Each phrase but the last, as tiny.en wrote it (offline probe), with what came before."""
    heard = [
        "I would like to book a table. for two people.",
        "when you get a moment.",
        "So. I was wondering.",
        "I need apples. Brad. No.",
        "My number is five. Bye. Bye. 1 2.",
        "Yesterday, after work. when I finally got home. after picking up the kit.",
        "I noticed that the heating was off.",
    ]
    assert [t for t in heard if looks_like_complete_question(t)] == []


def test_the_last_sentence_is_judged() -> None:
    assert last_sentence("What time is it? I need apples.") == "I need apples."
    assert not looks_like_complete_question("What time is it? I need apples.")
