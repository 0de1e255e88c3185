# ruff: noqa: RUF001, RUF002 (the point of this module is other scripts' marks)
"""What the transcript so far says about the end of the turn: the tie-breaker beside Smart
Turn's audio verdict (:mod:`agent.turns.adaptive_stop`), never the decision on its own.

People pause 300-900 ms inside sentences, and a recognizer (Whisper tiny.en offline) ends
every fragment it hears with a full stop: "I would like to book a table." is a whole sentence
to it even when "for two people" follows. A full stop is therefore no evidence. Three things the
words can say are trusted:

- :func:`ends_unfinished`: the last word is one a sentence does not end on (a conjunction, an
  article, a filler: "can you tell me the", "ich möchte einen"), in English, German, French,
  Spanish, Italian, Portuguese, Dutch, Korean, Russian, Arabic or Hindi, a Chinese or Japanese
  conjunction or particle ("咖啡和", "コーヒーを", Japanese か as "or": "コーヒーか") or
  hesitation alone ("那个", "あの"), Korean "-니까" as "because" ("비가 오니까"), and no
  question mark closes it. Such a turn is not over, whatever the audio says.
- :func:`a_clause_alone`: the words since the caller's last pause end in a subordinate clause
  whose main clause has not begun ("When I got there.", "Quand je suis arrivé.":
  :mod:`agent.turns.subordinate_clauses`). Such a turn does not end on the text model's wait.
- :func:`asks_for_answer`: the turn asks for an answer, as it is written in any language:

  - a question mark from the recognizer, in any script (``?``, full-width ``？``, Arabic
    ``؟``, Greek ``;``, Armenian ``՞``, Ethiopic ``፧``), which wins over the last word
    ("Where are you from?", "Wann fängt der Film an?");
  - a short command or answer: the whole turn is one or two words, closed by the recognizer
    ("Stop.", "Cancel it.", "Yes.", "Nein."), not a greeting ("Hello there.": people go on)
    nor a call for attention ("Excuse me.", "Entschuldigung.": :data:`CALLS_FOR_ATTENTION`);
  - where the recognizer dropped the question mark, the question's form, after any filler
    ("ok", "um") or call for attention ("sorry, can you..."): in English its word order ("is
    the store open today.", "where are you from.": an auxiliary first, or a wh-word then an
    auxiliary), in twelve more languages its interrogative, particle or ending
    (:mod:`agent.turns.question_forms`: "Où est la pharmacie.", "你们明天开门吗。",
    "내일 문을 엽니까.");
  - a request of three words or more, by its form (:mod:`agent.turns.request_forms`): please or
    an imperative first in English ("turn on the lights in the kitchen"), a word of politeness
    anywhere in seven languages, the imperative's forms in German, Dutch, French, Portuguese
    and Spanish ("Rufen Sie mich morgen zurück", "Rappelez moi demain matin", "Llámame").

A statement asks for nothing: no rule on the words tells "I would like to book a table." from
a clause that goes on, so with ``text_check="asks"`` (the default) it waits for the upper
bound, and with ``"unfinished"`` Smart Turn alone decides it (``bench/turn_taking.py``
measures both).
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

import budoux

from agent.turns.question_forms import (
    AUXILIARIES,
    is_question,
    japanese_or,
    korean_because,
    opens_a_clause,
)
from agent.turns.request_forms import is_request
from agent.turns.subordinate_clauses import only_a_subordinate_clause

WH_WORDS = frozenset("what where when who whom whose which why how".split())
"""Words that open a wh-question when an auxiliary follows ("where are you from")."""

WH_CONTRACTIONS = frozenset(
    "what's where's when's who's how's why's what're where're who're how're".split()
)
"""A wh-word and its auxiliary in one ("what's this for")."""

PREPOSITIONS = frozenset("to of for with from in on at about by".split())
"""Words an English question may end on ("where are you from") but a statement rarely does."""

CONNECTIVES = frozenset(
    # English: conjunctions, fillers, articles, possessives, relatives
    "and or but so because um uh er erm hmm like the a an my your our their if then that "
    "which who when while "
    # German
    "und oder aber weil dass denn der die das den dem des ein eine einen einem einer äh ähm "
    # French
    "et ou mais parce que qui le la les un une des du au aux euh "
    # Spanish
    "y o pero porque el los las una del eh "
    # Italian
    "e ma perché gli della ehm allora cioè "
    # Portuguese
    "ou mas os um uma então "
    # Dutch
    "maar omdat een de nou dus ehm "
    # Korean (written with spaces): fillers and conjunctions
    "음 어 저기 그리고 그런데 근데 그래서 그러니까 "
    # Russian, Arabic, Hindi: conjunctions and fillers
    "и а но или потому ну э эм ээ "
    "و أو لكن لأن يعني "
    "और लेकिन क्योंकि या तो मतलब कि".split()
)
"""Conjunctions, fillers and articles: no turn ends on one, not even a turn of one word. In
the languages the benches speak (Italian, Portuguese and Dutch in ``bench.turn_taking --set
languages``), leaving out words a sentence may end on in another of them or in its own
(Italian "il" is French "il": "Quelle heure est-il"; Dutch "en" is French "en", Portuguese "do"
English "do"; "Quiero uno.", "Ik weet het.")."""

CJK_FILLERS = frozenset(
    {"嗯", "呃", "那个", "あの", "あのー", "えーと", "えっと", "まあ"}
    # Japanese conjunctions that open a sentence: "and then", "and", "after that", "so", "but"
    | {"それで", "そして", "それから", "だから", "でも"}
)
"""Chinese and Japanese hesitations ("那个…", "あの…") and Japanese conjunctions that open a
sentence ("それで…"): a turn that is only one is not over, as "Um." and "So." are not (each is
one word, so "那个。" would otherwise be a closed one-word turn, a short command). "那个。" may
also be "That one."; that answer waits, a hesitation answered at once would be talked over.
Not "就是。" ("Exactly.") nor "这个。" ("This one."); the conjunctions only alone, not as the
end of a sentence ("コーヒーでも。", "Coffee or so."; "雨だから。", "Because it rains.")."""

CJK_TRAILING = (
    # Chinese conjunctions: "and", "with", "then", "but", "because", "so", "or", "also", "if",
    # "although"
    "和", "跟", "然后", "但是", "因为", "所以", "或者", "而且", "还有", "那么", "如果", "虽然",
    "不过", "可是",
    # Japanese particles no sentence ends on: object, subject, topic, "and", "'s" ("コーヒーを…",
    # "コーヒーと…", "あしたの…")
    "を", "が", "は", "と", "や", "の",
)  # fmt: skip
"""Endings of a Chinese or Japanese sentence that goes on. Not particles a finished answer
ends on ("カードで。" "By card.", "八時に。" "At eight.", "是的。" "Yes.", "好的。" "Okay."; so
not Chinese "的": :data:`CHINESE_ANSWERS_ON_DE`). Japanese "の" also closes a casual question
("どうしたの", which Voxtral writes with "？"), "と" a few adverbs ("もっと。" "More."): such a
turn waits, as a start answered at once would be talked over."""

CHINESE_ANSWERS_ON_DE = frozenset({"好的", "是的", "对的", "真的"})
"""Short Chinese answers that end on 的 ("Okay.", "Yes.", "Right.", "Really."). Any other short
turn that does is no command: "明天的。" ("Tomorrow's.") goes on ("…会议取消了"), and was
answered at its pause where Smart Turn agreed. A longer sentence on 的 may be finished ("我是昨天
来的。", "I came yesterday."): it is left to the models."""

TRAILING_WORDS = (
    CONNECTIVES | PREPOSITIONS | frozenset("zu mit für von bei pour avec para con".split())
)
"""Words a finished sentence does not end on, in the languages the bench speaks; only a
question mark overrides them. A preposition alone is another matter: Spanish "Para." is
"Stop.", German "Zu!" is "Shut!" (:func:`_trails`)."""

FILLERS = frozenset("ok okay um uh er so hey hi hello well oh äh ähm euh eh ehm".split())
"""Words skipped before judging how a sentence opens (English, German, French, Spanish,
Italian)."""

OPENERS = FILLERS | frozenset(
    "hallo servus bonjour salut allô hola oye bueno "
    "ciao buongiorno buonasera salve "  # Italian
    "olá oi alô bom boa "  # Portuguese: "bom dia", "boa tarde"
    "hoi goedemorgen goedemiddag goedenavond".split()  # Dutch
)
"""Greetings and fillers: a short turn that opens with one ("Hello there.", "Okay.",
"Buongiorno.", "Bom dia.") is how people start, often before a pause and the question; it is
no command. It only ever keeps a turn from the short wait."""

CALLS_FOR_ATTENTION = (
    ("excuse", "me"),
    ("pardon", "me"),
    ("sorry",),  # English, Dutch
    ("pardon",),  # French, German, Dutch
    ("entschuldigung",),
    ("entschuldigen", "sie"),
    ("verzeihung",),
    ("excusez", "moi"),
    ("excuse", "moi"),
    ("perdón",),
    ("perdone",),
    ("perdona",),
    ("disculpe",),
    ("disculpa",),
    ("oiga",),
    ("mi", "scusi"),
    ("scusi",),
    ("scusa",),
    ("com", "licença"),
    ("desculpe",),
    ("desculpa",),
    ("excuseer", "me"),
)
"""How people ask for attention before they say what they want ("Excuse me... where is the
station?", "Entschuldigung, wo ist..."), in the languages the benches speak. A turn that is
only that is no command ("Excuse me." is not "Stop."), and a sentence is read after it, as
after a filler ("Sorry, can you say that again." asks). With a question mark ("Sorry?",
"Pardon?") it asks, as any question does. It only ever keeps a turn from the short wait or
lets the words after it speak."""

QUESTION_MARKS = frozenset("?\uff1f\u061f\u037e\u055e\u1367\u2e2e")
"""``?``, full-width ``？``, Arabic ``؟``, Greek ``;`` (U+037E), Armenian ``՞``, Ethiopic ``፧``,
reversed ``⸮``. A plain ``;`` counts in Greek text only (NFC turns U+037E into it)."""

SENTENCE_ENDS = ".!?;\u3002\uff01\uff1f\u061f\u037e\u055e\u1367\u0964\u06d4\u2e2e"
"""Marks that close a sentence: Latin, CJK (``。！？``), Arabic, Greek, Armenian, Ethiopic,
Devanagari (``।``), Urdu (``۔``)."""

SHORT_TURN_WORDS = 2
"""A turn of at most this many words, closed by the recognizer, is a command or an answer."""

_SENTENCE_END = re.compile(rf"(?<=[{re.escape(SENTENCE_ENDS)}])\s*")


def _combining_marks() -> str:
    """The combining marks words are written with, as a character class's contents: Indic
    vowel signs (Devanagari "तो", "कॉफ़ी"), Arabic and Hebrew points, Thai vowels, Latin
    diacritics NFC leaves uncomposed. Python's ``\\w`` has none of them, so "मुझे कॉफ़ी और"
    read as five words ("म", "झ", "क", "फ", "और") and "तो" as "त"."""
    blocks = (range(0x0300, 0x1E00), range(0x20D0, 0x2100), range(0xFE20, 0xFE30))
    return "".join(
        re.escape(chr(c)) for b in blocks for c in b if unicodedata.category(chr(c))[0] == "M"
    )


_LETTER = rf"(?:[^\W_]|[{_combining_marks()}])"
_WORD = re.compile(rf"{_LETTER}+(?:['’]{_LETTER}+)*")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff]")
_KANA = re.compile(r"[\u3040-\u30ff]")
_JAPANESE = budoux.load_default_japanese_parser()
_CHINESE = budoux.load_default_simplified_chinese_parser()
_GREEK = re.compile(r"[\u0370-\u03ff\u1f00-\u1fff]")
_CLOSING = " \t\"'’”»)]}…"


def normalized(text: str) -> str:
    """``text`` as the rules read it: composed accents (NFC), lower case, one apostrophe."""
    return unicodedata.normalize("NFC", text).lower().replace("’", "'")


def words(text: str) -> list[str]:
    """The words of ``text``, lower-cased; Chinese and Japanese, written without spaces, in
    the words :func:`cjk_words` finds."""
    found: list[str] = []
    for word in _WORD.findall(normalized(text)):
        found.extend(cjk_words(word) if _CJK.search(word) else (word,))
    return found


@lru_cache(maxsize=1024)
def cjk_words(run: str) -> tuple[str, ...]:
    """A run of Chinese or Japanese as words, by BudouX's phrase model (Google's, shipped
    inside its package): in Japanese a phrase is a word with its particles ("コーヒーを",
    "やめて", "キャンセルしてください": one each), in Chinese about a word, its particles
    apart ("不用了" is "不用", "了"; "我想订" three). Counted a character each, every command of
    three characters or more ("不用了。", "やめて。", "いいえ。") was too long to be a short
    command. Kept for the runs last read: each final transcript reads the turn's words so far,
    which hold the earlier finals' runs again."""
    parser = _JAPANESE if _KANA.search(run) else _CHINESE
    return tuple(phrase for phrase in parser.parse(run) if phrase)


def last_sentence(text: str) -> str:
    """The last sentence of ``text`` that has words (the recognizer's punctuation decides)."""
    for sentence in reversed(_SENTENCE_END.split(text.strip())):
        if _WORD.search(sentence):
            return sentence.strip()
    return ""


def ends_with_question_mark(sentence: str) -> bool:
    """Whether the recognizer closed ``sentence`` with a question mark, in any script."""
    stripped = sentence.rstrip(_CLOSING)
    if not stripped:
        return False
    mark = stripped[-1]
    return mark in QUESTION_MARKS or (mark == ";" and bool(_GREEK.search(stripped)))


def _closed(sentence: str) -> bool:
    stripped = sentence.rstrip(_CLOSING)
    return bool(stripped) and stripped[-1] in SENTENCE_ENDS


def _trails(found: list[str], sentence: str) -> bool:
    """Whether ``found``, the last sentence's words, stop where no sentence ends: on a
    connective, or on a preposition after other words (alone and closed, it is a command); in
    Chinese and Japanese, on a conjunction or particle, or a hesitation alone."""
    if _CJK.search(found[-1]):
        written = "".join(found)
        return written in CJK_FILLERS or written.endswith(CJK_TRAILING) or japanese_or(found[-1])
    if len(found) == 1 and _closed(sentence):
        return found[0] in CONNECTIVES
    return found[-1] in TRAILING_WORDS or korean_because(found[-1])


def _attributive(found: list[str]) -> bool:
    """Whether a short Chinese turn ends on 的 and is no answer that does ("明天的。")."""
    written = "".join(found)
    return written.endswith("的") and written not in CHINESE_ANSWERS_ON_DE


def _after_openers(found: list[str]) -> list[str]:
    """The words of a sentence after the fillers and calls for attention it opens with ("um,
    excuse me, where is..." → "where is..."); empty when it is nothing else."""
    while found:
        if found[0] in FILLERS:
            found = found[1:]
            continue
        call = next((c for c in CALLS_FOR_ATTENTION if tuple(found[: len(c)]) == c), None)
        if call is None:
            break
        found = found[len(call) :]
    return found


def ends_unfinished(text: str) -> bool:
    """Whether the words so far stop on a word a sentence does not end on ("I would like to",
    "book a table for"), with no question mark to say otherwise."""
    sentence = last_sentence(text)
    found = words(sentence)
    if not found:
        return True
    return not ends_with_question_mark(sentence) and _trails(found, sentence)


def a_clause_alone(latest: str) -> bool:
    """Whether ``latest``, the words the caller said since their last pause (one VAD
    segment's), end in a subordinate clause whose main clause is still to come ("When I got
    there.": :mod:`agent.turns.subordinate_clauses`), with no question mark to say otherwise.
    Read on those words alone, not the turn's: a recognizer that leaves the clause unclosed
    before the pause makes one sentence of it and the main clause that came after it."""
    sentence = last_sentence(latest)
    return not ends_with_question_mark(sentence) and only_a_subordinate_clause(
        _after_openers(words(sentence)), normalized(sentence)
    )


def asks_for_answer(text: str) -> bool:
    """Whether the words so far end with a question, a request or a short command the bot
    should answer at once (in any language where the recognizer writes a question mark)."""
    sentence = last_sentence(text)
    found = words(sentence)
    if not found:
        return False
    if ends_with_question_mark(sentence):
        return True
    said = _after_openers(found)
    if len(words(text)) <= SHORT_TURN_WORDS and _closed(sentence):
        # "Stop.", "Cancel it.", "Para.", but not "Um.", "Hello there." nor "Excuse me."
        return (
            not _trails(found, sentence)
            and found[0] not in OPENERS
            and bool(said)
            and not _attributive(found)
        )
    if not said:
        return False
    found = said
    question = not opens_a_clause(found) and (
        found[0] in AUXILIARIES
        or found[0] in WH_CONTRACTIONS
        or (found[0] in WH_WORDS and len(found) > 1 and found[1] in AUXILIARIES)
    )
    last = found[-1]
    if last in TRAILING_WORDS and not (question and last in PREPOSITIONS):
        return False
    if len(found) < 3:
        return False
    written = normalized(sentence)
    return question or is_question(found, written) or is_request(found, written)
