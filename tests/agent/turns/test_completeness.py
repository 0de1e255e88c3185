"""Which transcripts read as a complete question: the one thing the words are trusted to say."""

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
    ],
)
def test_questions_are_complete(text: str) -> None:
    assert looks_like_complete_question(text)


@pytest.mark.parametrize(
    "text",
    [
        "I would like to book a table.",  # a full stop on every fragment is no evidence
        "when you get a moment.",  # a wh-word opening a clause is not a question
        "So. I was wondering.",
        "My number is five.",
        "Is it the one with the?",
        "Can you",
        "",
        "...",
    ],
)
def test_statements_and_fragments_are_not(text: str) -> None:
    assert not looks_like_complete_question(text)


def test_the_last_sentence_is_judged() -> None:
    assert last_sentence("What time is it? I need apples.") == "I need apples."
    assert not looks_like_complete_question("What time is it? I need apples.")
