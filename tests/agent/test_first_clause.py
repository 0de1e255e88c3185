"""The first-clause text aggregator: an answer's first clause is spoken on its own, the rest
in whole sentences, as Pipecat's sentence aggregator would."""

from __future__ import annotations

import re

import pytest
from pipecat.services.tts_service import TextAggregationMode

from agent.first_clause import FirstClauseTextAggregator, RealTimeFactor


def tokens(text: str) -> list[str]:
    """Word-sized pieces with their leading spaces, the way an LLM streams."""
    return re.findall(r"\s*\S+", text)


async def spoken(aggregator: FirstClauseTextAggregator, answer: str) -> list[str]:
    pieces = []
    for token in tokens(answer):
        pieces += [a.text async for a in aggregator.aggregate(token)]
    rest = await aggregator.flush()
    return pieces + ([rest.text] if rest else [])


def aggregator(min_words: int = 2) -> FirstClauseTextAggregator:
    return FirstClauseTextAggregator(
        min_words=min_words, aggregation_type=TextAggregationMode.SENTENCE
    )


@pytest.mark.parametrize(
    ("answer", "pieces"),
    [
        (
            "You said: turn on the lights in the kitchen.",
            ["You said:", "turn on the lights in the kitchen."],
        ),
        (
            "In Paris today, it is sunny. Later, it may rain; take a coat.",
            ["In Paris today,", "it is sunny.", "Later, it may rain; take a coat."],
        ),
        ("Sure, I can do that. Anything else?", ["Sure, I can do that.", "Anything else?"]),
        ("It costs 3,000 dollars, or so.", ["It costs 3,000 dollars,", "or so."]),
        ("Hello there. How are you, then?", ["Hello there.", "How are you, then?"]),
        ("No punctuation at all", ["No punctuation at all"]),
    ],
)
async def test_the_first_clause_goes_alone_then_whole_sentences(
    answer: str, pieces: list[str]
) -> None:
    assert await spoken(aggregator(), answer) == pieces


async def test_every_answer_starts_with_its_own_first_clause() -> None:
    clauses = aggregator()
    assert await spoken(clauses, "You said: hello.") == ["You said:", "hello."]
    assert await spoken(clauses, "You said: goodbye.") == ["You said:", "goodbye."]


async def test_an_interrupted_answer_leaves_nothing_behind() -> None:
    clauses = aggregator()
    assert [a.text async for a in clauses.aggregate("You said: hel")] == ["You said:"]
    await clauses.handle_interruption()
    assert await spoken(clauses, "Right then, go.") == ["Right then,", "go."]


async def test_a_longer_minimum_keeps_short_clauses_in_their_sentence() -> None:
    assert await spoken(aggregator(min_words=3), "You said: hi there.") == ["You said: hi there."]


def test_a_minimum_below_one_word_is_refused() -> None:
    with pytest.raises(ValueError, match="min_words"):
        aggregator(min_words=0)


async def test_a_slow_engine_gets_whole_sentences_so_the_audio_has_no_gap() -> None:
    pace = RealTimeFactor(limit=0.25)
    clauses = FirstClauseTextAggregator(
        split_allowed=pace.fast_enough, aggregation_type=TextAggregationMode.SENTENCE
    )
    assert await spoken(clauses, "You said: hello.") == ["You said:", "hello."]  # not measured
    pace.add(synthesis_s=0.09, audio_s=3.0)  # Piper on idle cores
    assert await spoken(clauses, "You said: hello.") == ["You said:", "hello."]
    for _ in range(5):
        pace.add(synthesis_s=1.0, audio_s=3.0)  # a busy machine
    assert not pace.fast_enough()
    assert await spoken(clauses, "You said: hello.") == ["You said: hello."]
