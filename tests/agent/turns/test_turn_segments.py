"""A turn's segments say whether the caller hesitated before the last words, read a segment at
a time as the finals come, and read the same as the whole turn at once."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.turns.turn_segments import TurnSegments


def read(texts: list[str]) -> TurnSegments:
    turn = TurnSegments()
    for text in texts:
        turn.append(text)
    return turn


def test_a_pause_after_a_hesitation_is_one() -> None:
    assert read(["Um.", "What time is it?"]).hesitated_before_last_words()
    assert read(["I would like to.", "book a table."]).hesitated_before_last_words()


def test_a_segment_with_no_words_before_the_last_words_is_one() -> None:
    assert read(["", "What time is it?"]).hesitated_before_last_words()


def test_a_pause_after_a_finished_sentence_is_none() -> None:
    assert not read(
        ["Hello there.", "Can you tell me when you open?"]
    ).hesitated_before_last_words()


def test_a_sound_after_the_last_words_is_none() -> None:
    assert not read(["Oui.", ""]).hesitated_before_last_words()


SEGMENT = st.sampled_from(
    ["", "Um.", "So.", "Hello there.", "I would like to.", "book it.", "那个。"]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(SEGMENT, max_size=8))
def test_read_as_the_finals_come_it_says_what_the_whole_turn_says(texts: list[str]) -> None:
    """Asked after every final, as the stop strategy asks, and asked once at the end of the
    same turn: the same answer each time."""
    growing = TurnSegments()
    for count, text in enumerate(texts, start=1):
        growing.append(text)
        assert growing.hesitated_before_last_words() == (
            read(texts[:count]).hesitated_before_last_words()
        )
