"""A request is told by its form, in the languages the end of turn knows: please in any of
seven, and the imperative's own shapes in German, Dutch, French, Portuguese and Spanish. What
only a word list could tell stays a statement."""

from __future__ import annotations

import pytest

from agent.turns.completeness import words
from agent.turns.request_forms import is_request


def request(sentence: str) -> bool:
    return is_request(words(sentence), sentence)


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
