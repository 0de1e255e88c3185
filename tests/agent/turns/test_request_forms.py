"""A request is told by its form, in the languages the end of turn knows: please in any of
seven, and the imperative's own shapes in German, Dutch, French, Portuguese and Spanish. What
only a word list could tell stays a statement."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.turns.completeness import asks_for_answer, normalized, words
from agent.turns.request_forms import is_request


def request(sentence: str) -> bool:
    return is_request(words(sentence), normalized(sentence))


@pytest.mark.parametrize(
    "sentence",
    [
        "Turn on the lights in the kitchen.",  # English: an imperative first
        "I would like a coffee please.",  # please anywhere, in seven languages
        "Einen Kaffee bitte.",
        "Een koffie alstublieft.",
        "Je veux un café s'il vous plaît.",
        "Un café por favor.",
        "Um café por favor.",
        "Un caffè per favore.",
        "Rufen Sie mich morgen zurück.",  # German: the verb first, then "Sie"
        "Können Sie mir helfen.",
        "Belt u mij morgen terug.",  # Dutch: the verb first, then "u"
        "Kunt u mij helpen.",
        "Rappelez moi demain matin.",  # French: the imperative in -ez, then its object
        "Annulez ma réservation.",
        "Dites moi l'heure.",
        "Rappelle-moi demain matin.",  # a verb hyphenated to its pronoun
        "Pouvez-vous m'aider.",
        "Est-ce que vous êtes ouverts.",
        "Ligue-me amanhã de manhã.",  # Portuguese
        "Llámame mañana por la mañana.",  # Spanish: the pronoun joined, the accent written
        "Dígame la hora.",
        "Envíenos la factura.",
    ],
)
def test_requests_by_their_form(sentence: str) -> None:
    assert request(sentence)


@pytest.mark.parametrize(
    "sentence",
    [
        "I would like to book a table for two people.",  # statements ask for nothing
        "I need apples.",
        "Ich möchte einen Tisch für zwei Personen reservieren.",
        "Je voudrais réserver une table pour deux personnes.",
        "Quisiera reservar una mesa para dos personas.",
        "Gegen Sie habe ich nichts.",  # a preposition in -en before "Sie"
        "Morgen Sie.",
        "Dank u wel voor alles.",  # "thank you", no verb
        "Dat u belt is fijn.",  # a clause: the verb comes last
        "Chez moi il fait froid.",  # -ez, but no verb
        "Martinez called me yesterday.",  # -ez, then a verb: a surname
        "Película de terror esta noche.",  # an accent and -la, but a noun
        "Rápidamente se fue.",  # an adverb
        "Sólo quiero un café.",
        "Até amanhã.",
        "Peut-être demain.",  # hyphenated, but to no pronoun
        "Hands-on training is what I need.",  # French "on", but English hyphenates it too
        "Mi richiami domani mattina.",  # requests only a word list would tell: not here
        "Bel me morgenochtend terug.",
        "",
    ],
)
def test_statements_and_what_needs_a_word_list_are_not(sentence: str) -> None:
    assert not request(sentence)


LETTERS_AND_MARKS = (
    "abcdefghijklmnopqrstuvwxyzáéíóúüçœßÄ今的了のてカー?.,;!-' \t…¿¡«»\uff1f\u3002\u2019\u037e"
    "तको\u0301\u0964吗까니요か"
)
"""What a recognizer may write: letters with and without accents, Chinese and Japanese (which
BudouX's model splits into words), hyphens, apostrophes, any script's marks (full-width and
Greek question marks, the CJK and Devanagari full stops among them), combining marks (a
Devanagari vowel sign, an acute accent NFC may not compose), and the endings of questions and
clauses in Chinese, Korean and Japanese."""

FORM_WORDS = (
    "please bitte por favor s'il vous plaît rufen Sie belt u rappelez moi rappelle-moi "
    "llámame can you the and I need apples um wo was ich est-ce que ли dónde क्या 吗 ですか "
    "엽니까 오니까 어디예요"
).split()
"""Words the forms and the rest of the rule read, so that generated text holds requests and
questions by their form."""

RECOGNIZER_TEXT = st.one_of(
    st.text(alphabet=st.sampled_from(LETTERS_AND_MARKS), max_size=60),
    st.lists(
        st.one_of(st.sampled_from(FORM_WORDS), st.sampled_from(list(".,?!-… "))), max_size=12
    ).map(" ".join),
)
"""A transcript: any letters and marks, or words the rule reads among marks."""

WORD = st.one_of(
    st.sampled_from(FORM_WORDS),
    st.text(alphabet=st.sampled_from("abcdefghijklmnopqrstuvwxyzáéíóúüçœßÄ"), min_size=1),
)
LAST_SENTENCE = st.lists(WORD, min_size=3, max_size=8).map(" ".join)
"""A sentence of three words or more: the ones no short-command rule reads."""


@settings(max_examples=500, deadline=None)
@given(RECOGNIZER_TEXT, LAST_SENTENCE)
def test_any_text_is_read_and_the_last_sentence_decides(earlier: str, last: str) -> None:
    """No text makes the words rule fail (it runs on every transcript of every call), and what
    was said before a full stop does not make a sentence of three words or more ask, or keep
    it from asking."""
    sentence = last + "."
    assert asks_for_answer(f"{earlier}. {sentence}") == asks_for_answer(sentence)
