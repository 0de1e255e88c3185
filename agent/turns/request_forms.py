"""How a request is written, in the languages whose words the end of turn knows: the forms that
make a sentence a request whatever its vocabulary, so that a request in German, French or
Spanish ends on the short wait as an English one does (with Smart Turn's agreement: these are
the tie-breaker of :mod:`agent.turns.completeness`, never the decision).

Only forms that make a request (or a question) whatever the verb:

- a word of politeness anywhere in the sentence: "please", "bitte", "s'il vous plaît", "por
  favor", "per favore", "alstublieft" ("Einen Kaffee bitte.", "Un café por favor.");
- a verb first with the polite "you" after it, which in German and Dutch only an imperative or
  a yes/no question has (statements put the verb second): "Rufen Sie mich morgen zurück",
  "Belt u mij terug";
- in French, a first word in the imperative's ``-ez`` without "vous" before it, then a
  pronoun, an article or a preposition ("Rappelez moi demain matin", "Envoyez la facture"),
  or a verb hyphenated to its pronoun, which is an imperative or an inverted question in
  French and Portuguese ("Rappelle-moi", "Pouvez-vous", "Ligue-me");
- in Spanish, an imperative with its pronoun joined to it, which takes a written accent
  ("Llámame", "Dígame", "Envíenos").

A sentence that needs a word list to tell ("Mi richiami domani", "Bel me terug", "Ich hätte
gern einen Kaffee") asks for nothing here; it ends on the text model's wait if the model reads
it finished. English requests open with please or an imperative (:data:`IMPERATIVES`).
"""

from __future__ import annotations

import re

IMPERATIVES = frozenset(
    "please turn switch call book cancel tell give show send check find play stop start open "
    "close set remind read help put repeat transfer connect text email order change schedule "
    "add remove".split()
)
"""Words that open an English request when they come first."""

POLITE_WORDS = frozenset("please bitte alstublieft alsjeblieft".split())
""""Please" in one word: English, German, Dutch."""

POLITE_PHRASES = (
    ("s'il", "vous", "plaît"),
    ("s'il", "te", "plaît"),
    ("por", "favor"),  # Spanish, Portuguese
    ("por", "gentileza"),
    ("per", "favore"),
    ("per", "piacere"),
    ("per", "cortesia"),
)
""""Please" in more than one word: French, Spanish, Portuguese, Italian."""

VERB_FIRST_YOU = {"sie": "en", "u": "t"}
"""The polite "you" (German "Sie", Dutch "u") as the second word, and how the verb before it
ends (German "rufen Sie", Dutch "belt u"): the verb first, so an imperative or a question."""

NOT_VERBS = frozenset(
    # German prepositions and adverbs in -en
    "gegen wegen neben zwischen entgegen oben unten eben morgen guten "
    # Dutch conjunctions, prepositions and words in -t: "dat u", "met u", "mocht u"
    "dat omdat zodat totdat nadat wat met want niet mocht dank".split()
)
"""Words with a verb's ending that put the polite "you" second in a statement or a clause
("Gegen Sie habe ich nichts", "Dat u belt", "Dank u wel")."""

FRENCH_IMPERATIVES = frozenset({"dites", "faites"})
"""French imperatives of "vous" that do not end in ``-ez``."""

NOT_FRENCH_IMPERATIVES = frozenset({"chez", "assez", "nez", "rez"})
"""French words in ``-ez`` that are no verb."""

AFTER_FRENCH_IMPERATIVE = frozenset(
    "moi nous le la les lui leur en y un une des du de d l mon ma mes votre vos ce cette ces "
    "à au aux pour avec dans sur ici vite plus".split()
)
"""What follows a French imperative (a pronoun, an article, a preposition: "rappelez moi",
"annulez ma réservation"); after a surname in ``-ez`` comes a verb ("Martinez called")."""

HYPHENED_PRONOUNS = frozenset(
    "moi toi nous vous le la les lui leur en y il elle ils elles "  # French
    "me te nos lhe lhes o a os as se".split()  # Portuguese
)
"""Pronouns hyphenated after a verb: an imperative ("Rappelle-moi", "Ligue-me") or an
inverted question ("Pouvez-vous", "Peut-il"). Not French "on", which English hyphenates too
("Hands-on training is...")."""

SPANISH_JOINED_PRONOUNS = ("nos", "los", "las", "les", "me", "te", "se", "lo", "la", "le")
"""Pronouns joined to the end of a Spanish imperative ("llámame", "dígalo")."""

NOT_SPANISH_IMPERATIVES = ("mente", "ula", "ulo", "ulas", "ulos")
"""Accented Spanish words with such an ending that are no verb: adverbs ("rápidamente"),
nouns ("película", "artículo")."""

NOT_SPANISH_IMPERATIVE_WORDS = frozenset({"sólo", "éste", "ése", "até"})
"""Accented words with such an ending that are no verb either ("Sólo quiero...", Portuguese
"Até amanhã")."""

_ACUTE = re.compile(r"[áéíóú]")
_HYPHENED = re.compile(r"(?<![^\W\d_])[^\W\d_]++(?:-[^\W\d_]++)+")
"""Words hyphened together ("rappelle-moi"), looked for from a word's start only, its letters
never given back: tried at every letter, a run of Chinese read each of its letters to its end
(2,000 characters took 95 ms)."""


def is_request(found: list[str], sentence: str) -> bool:
    """Whether the sentence, ``found`` its lower-cased words after any filler, is a request (or
    a verb-first question) by its form; ``sentence`` normalized as its words are
    (:func:`agent.turns.completeness.normalized`), for its hyphens."""
    if not found:
        return False
    first = found[0]
    return (
        first in IMPERATIVES
        or _polite(found)
        or _verb_before_polite_you(found)
        or _french_imperative(found)
        or _spanish_imperative(first)
        or _hyphened_to_a_pronoun(sentence, first)
    )


def _polite(found: list[str]) -> bool:
    if POLITE_WORDS.intersection(found):
        return True
    return any(
        tuple(found[i : i + len(phrase)]) == phrase
        for phrase in POLITE_PHRASES
        for i in range(len(found) - len(phrase) + 1)
    )


def _verb_before_polite_you(found: list[str]) -> bool:
    if len(found) < 2 or found[1] not in VERB_FIRST_YOU:
        return False
    return found[0].endswith(VERB_FIRST_YOU[found[1]]) and found[0] not in NOT_VERBS


def _french_imperative(found: list[str]) -> bool:
    first = found[0]
    return (
        (
            first in FRENCH_IMPERATIVES
            or (first.endswith("ez") and first not in NOT_FRENCH_IMPERATIVES)
        )
        and len(found) > 1
        and found[1] in AFTER_FRENCH_IMPERATIVE
    )


def _spanish_imperative(first: str) -> bool:
    return (
        bool(_ACUTE.search(first))
        and first.endswith(SPANISH_JOINED_PRONOUNS)
        and not first.endswith(NOT_SPANISH_IMPERATIVES)
        and first not in NOT_SPANISH_IMPERATIVE_WORDS
    )


def _hyphened_to_a_pronoun(sentence: str, first: str) -> bool:
    """Whether the sentence's first word (``first``, after any filler) is a verb hyphenated to
    a pronoun, as written ("Rappelle-moi", "Pouvez-vous", "Est-ce que")."""
    for token in _HYPHENED.findall(sentence):
        parts = token.split("-")
        if parts[0] == first:
            return parts[-1] in HYPHENED_PRONOUNS or token == "est-ce"
    return False
