# ruff: noqa: RUF001 (other scripts' letters are the point)
"""A question the recognizer wrote without its question mark is still read as a question by
its form, in the languages the end of turn knows; a clause that only looks like one is not."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.turns.completeness import asks_for_answer, ends_unfinished, normalized
from agent.turns.question_forms import is_question, japanese_or, korean_because

UNMARKED_QUESTIONS = [
    "Wo ist die nächste Apotheke.",
    "Ist das der Zug nach Berlin.",
    "Où est la pharmacie la plus proche.",
    "Est-ce que vous êtes ouverts demain.",
    "Est-ce qu'il reste des places.",  # "qu'il" is one word
    "Dónde está la farmacia más cercana.",
    "¿Tienen mesa para dos esta noche.",  # the opening mark alone says it
    "Dov'è la farmacia più vicina.",
    "A che ora apre il negozio.",
    "Onde fica a farmácia mais próxima.",
    "A que horas abre a loja.",
    "Waar is de dichtstbijzijnde apotheek.",
    "Hoeveel kost een kaartje.",
    "Где ближайшая аптека.",
    "Можно ли заказать столик.",
    "Во сколько вы открываетесь.",
    "أين أقرب صيدلية.",
    "هل أنتم مفتوحون غدا.",
    "सबसे नज़दीकी दवाखाना कहाँ है।",
    "क्या आप कल खुले हैं।",
    "最近的药店在哪里。",
    "你们明天开门吗。",
    "你们有没有素食的菜。",
    "いちばん ちかい やっきょくは どこですか。",
    "この電車は東京に行きますか。",
    "가장 가까운 약국이 어디예요.",
    "내일 문을 엽니까.",
    "같이 점심 먹을까요.",
]


@pytest.mark.parametrize("text", UNMARKED_QUESTIONS)
def test_a_question_without_its_mark_asks_for_an_answer(text: str) -> None:
    """Each ended on the text model's wait or the bound, as a statement
    (``bench/results/turn_taking_unmarked_questions.md``)."""
    assert asks_for_answer(text)
    assert not ends_unfinished(text)


@pytest.mark.parametrize(
    "start",
    [
        "Where I live.",  # a relative clause: the English word-order rule wants an auxiliary
        "Was ich sagen wollte.",  # German "was" then its subject: a clause (and no English one)
        "Wat ik wilde zeggen.",
        "Quand je suis arrivé.",  # interrogatives that also open a clause are not read alone
        "Cuando llegué al hotel.",  # no accent: the relative, not "cuándo"
        "Quando sono arrivato.",
        "Quando eu cheguei.",
        "Когда я пришёл.",
        "عندما وصلت إلى الفندق.",
        "जब मैं होटल पहुँचा।",  # Hindi's relatives are the "j" words
        "Tienen mesa para dos esta noche.",  # a yes/no question with a statement's order
        "我们什么都可以。",  # "We're fine with anything": 什么 asks nothing
        "没什么问题了。",
        "언제나 고마워요 정말.",  # "always": 언제 asks nothing there
        "그냥 집에 가요.",  # polite, but no interrogative: a statement
    ],
)
def test_a_clause_or_a_statement_that_looks_like_a_question_does_not_ask(start: str) -> None:
    assert not asks_for_answer(start)


@pytest.mark.parametrize(
    "start",
    [
        "ホットの コーヒーか。",  # "Hot coffee or..." (こうちゃを ください, "tea, please")
        "コーヒーか。",
        "비가 오니까.",  # "As it rains..." (우산을 가져가세요, "take an umbrella")
    ],
)
def test_an_or_or_a_because_that_ends_like_a_question_goes_on(start: str) -> None:
    """Japanese か is also "or", Korean "-니까" also "because": a turn that stops on them goes
    on, unlike the polite question's "ですか" and the formal "-ㅂ니까"."""
    assert ends_unfinished(start)
    assert not asks_for_answer(start)


def test_the_polite_endings_are_told_from_or_and_because() -> None:
    assert not japanese_or("ありますか") and not japanese_or("でしょうか")
    assert japanese_or("コーヒーか") and not japanese_or("か")
    assert korean_because("오니까") and korean_because("바쁘니까")
    assert not korean_because("엽니까") and not korean_because("있습니까")


def test_a_question_mark_still_decides_alone() -> None:
    """The forms only add questions: a marked one asks whatever its words."""
    assert asks_for_answer("Quand est-ce que vous ouvrez ?")
    assert asks_for_answer("Cuando llegué al hotel?")


@given(st.lists(st.sampled_from(["wo", "ist", "qué", "ли", "吗", "ですか", "요", "kunt", "a"])))
def test_a_germanic_interrogative_with_its_subject_next_is_never_a_question(
    rest: list[str],
) -> None:
    """ "Was ich...", "Wo du...": whatever follows, a clause, not a question by its form."""
    for opening in (["was", "ich"], ["wo", "du"], ["wat", "ik"]):
        found = opening + rest
        assert not is_question(found, normalized(" ".join(found)))
