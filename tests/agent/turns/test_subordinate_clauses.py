# ruff: noqa: RUF001 (other scripts' letters are the point)
"""A subordinate clause alone is not the end of a turn, in the languages the end of turn knows;
a question, an answer or a whole sentence that opens with the same words is."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.turns.completeness import a_clause_alone, asks_for_answer
from agent.turns.subordinate_clauses import LONGEST

CLAUSES_ALONE = [
    "When I got there.",
    "Where I live.",
    "If the card is declined again.",
    "Because my card was declined.",
    "Um, when I got there.",  # a filler's comma is not the clause's
    "Sorry, if I cancel now.",
    "Wenn Sie morgen Zeit haben.",
    "Weil ich morgen nicht kann.",
    "Was ich sagen wollte.",
    "Als ich angekommen bin.",
    "Wat ik wilde zeggen.",
    "Omdat ik morgen niet kan.",
    "Quand je suis arrivé.",
    "Lorsqu'il est arrivé.",
    "Parce que je suis malade.",
    "Si je ne peux pas venir demain.",
    "Cuando llegué al hotel.",
    "Porque no funciona la tarjeta.",
    "Quando eu cheguei.",
    "Mentre aspettavo il treno.",
    "Если вы можете перезвонить.",
    "Потому что карта не работает.",
    "عندما وصلت إلى الفندق.",
    "जब मैं होटल पहुँचा।",
    "如果你们明天有时间。",
]


@pytest.mark.parametrize("text", CLAUSES_ALONE)
def test_a_subordinate_clause_alone_goes_on(text: str) -> None:
    """Each would end on the text model's wait where it reads the clause finished ("Quand je
    suis arrivé." did, at a 0.87 s pause: ``bench/results/turn_taking_unmarked_questions.md``)."""
    assert a_clause_alone(text)
    assert not asks_for_answer(text)


@pytest.mark.parametrize(
    "text",
    [
        # the main clause has begun: a comma, a question's inversion, Hindi's "तो"
        "When I got there, the door was locked.",
        "Quand je suis arrivé, il n'y avait personne.",
        "如果你们明天有时间，请给我打电话。",
        "When you get a moment could you check my last order.",
        "जब मैं होटल पहुँचा तो वहाँ कोई नहीं था।",
        # too long to be a clause alone: the recognizer dropped the comma
        "If you could send me the receipt by email that would be great.",
        # questions that open with the same words
        "When does the store open.",
        "Where is the nearest pharmacy.",
        "When I got there?",
        "Quando apre il negozio.",
        "Когда вы открываетесь.",
        "Porque é que a loja fecha.",
        # polite requests: "if" with the person asked and a modal
        "If you could help me with my bill.",
        "Si vous pouvez me rappeler.",
        "Wenn Sie mich morgen zurückrufen könnten.",
        # answers and whole sentences
        "If possible.",
        "Wenn möglich.",
        "After lunch tomorrow.",
        "What I need is a taxi.",
        "So that's all.",
        "S'il vous plaît.",
        "Se me olvidó la cartera.",
        "Si puo pagare con carta.",
        "I would like to book a table.",
    ],
)
def test_a_main_clause_question_or_answer_is_no_clause_alone(text: str) -> None:
    assert not a_clause_alone(text)


def test_only_the_last_sentence_counts() -> None:
    assert a_clause_alone("Hello there. When I got there.")
    assert not a_clause_alone("When I got there. The door was locked.")


_WORDS = st.sampled_from(
    "when if because quand wenn cuando si i je ich yo there got arrivé hotel is you the".split()
)


@given(st.lists(_WORDS, min_size=1, max_size=6), st.lists(_WORDS, min_size=1, max_size=6))
def test_a_comma_after_the_clause_always_begins_its_main_clause(
    clause: list[str], main_clause: list[str]
) -> None:
    assert not a_clause_alone(f"{' '.join(clause)}, {' '.join(main_clause)}.")


@given(st.lists(_WORDS, min_size=LONGEST + 1, max_size=LONGEST + 6))
def test_a_sentence_longer_than_a_clause_is_never_one_alone(found: list[str]) -> None:
    assert not a_clause_alone(f"{' '.join(found)}.")
