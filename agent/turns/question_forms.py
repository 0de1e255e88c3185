"""How a question is written when the recognizer left off its question mark, in the languages
the end of turn knows: the tie-breaker of :mod:`agent.turns.completeness` beside Smart Turn and
the text model, never the decision.

A recognizer usually writes the mark (any script's: :func:`~agent.turns.completeness.
ends_with_question_mark`), but not always: a fragment closed before silence gets a full stop,
and a question spoken without a rise may too. "Where is the nearest pharmacy." was already a
question by its English word order; "最近的药店在哪里。", "Où est la pharmacie la plus proche.",
"क्या आप कल खुले हैं।" asked for nothing, so they ended on the text model's 0.8 s wait or the
1.3 s bound. Only forms that make a question whatever the sentence's other words:

- a question's closing particle (Chinese 吗, 呢; Japanese polite か: "ですか", "ますか"; Korean
  "-ㅂ니까", "-까요", "-나요", "-ㄴ가요"), or a Chinese A-not-A ("有没有", "是不是");
- an interrogative word where the language's questions put it and its relative or subordinate
  words differ in form: first in Spanish with its written accent ("dónde", not "donde"), in
  French, Italian, Portuguese and Russian only the words no subordinate clause opens with (not
  "quand", "quando", "когда": "Quand je suis arrivé..." goes on), in German and Dutch first
  with no subject pronoun after it ("Wo ist...", not "Was ich sagen wollte..."), in Arabic
  first, in Hindi, Chinese and Korean anywhere (their interrogatives stay in place; Hindi's
  relatives are other words: "जब", not "कब");
- a yes/no marker: Arabic "هل" and Hindi "क्या" first, Russian "ли" second, French "est-ce
  que", a German or Dutch auxiliary or modal first ("Können Sie...", "Kunt u..."), Spanish's
  opening "¿" anywhere (the recognizer heard the question start).

Japanese and Korean interrogatives are not read alone: "どこ" and "어디" also mean "somewhere".
A yes/no question with a statement's word order ("Tienen mesa para dos.", "Vous êtes ouverts
demain.") has no form: it is left to the models.
"""

from __future__ import annotations

import re

AUXILIARIES = frozenset(
    "is are was were am do does did can could will would shall should may might must "
    "have has had isn't aren't wasn't weren't don't doesn't didn't can't couldn't won't "
    "wouldn't shouldn't haven't hasn't".split()
)
"""Words that open a yes/no question when they come first."""

SPANISH = frozenset(
    "qué dónde adónde cuándo cómo quién quiénes cuál cuáles cuánto cuánta cuántos cuántas".split()
)
"""Spanish interrogatives: the accent tells them from the relatives ("donde", "cuando")."""

FRENCH = frozenset("où pourquoi comment combien quel quelle quels quelles".split())
ITALIAN = frozenset("dove dov'è quanto quanta quanti quante quale quali chi cosa".split())
PORTUGUESE = frozenset("onde aonde quanto quanta quantos quantas qual quais quem".split())
RUSSIAN = frozenset("где куда откуда почему зачем сколько кто какой какая какое какие".split())
"""Interrogatives that open a question and no subordinate clause (not "quand", "quando",
"como", "когда", "что", "как": "Quando sono arrivato..." goes on)."""

OPENING_PHRASES = re.compile(
    r"(?:est ce (?:que\b|qu')|qu'est ce\b|a che ora\b|che cosa\b|a que horas\b|por que\b"
    r"|во сколько\b)"
)
"""Questions that open with a phrase, matched on the words joined by spaces: French "est-ce
que" (and "est-ce qu'il", whose "qu'il" is one word), "qu'est-ce", Italian "a che ora", "che
cosa", Portuguese "a que horas", "por que", Russian "во сколько" (not Portuguese "o que": "O
que eu queria dizer..." goes on)."""

GERMANIC = frozenset(
    # German
    "wo wann was wer wen wem wie warum wieso weshalb woher wohin womit wofür welche welcher "
    "welches welchen welchem "
    # Dutch
    "waar wanneer wat wie waarom hoe welke welk hoeveel".split()
)
"""German and Dutch interrogatives: a question puts the verb after them, a subordinate clause
its subject (:data:`SUBJECT_PRONOUNS`)."""

SUBJECT_PRONOUNS = frozenset(
    "ich du er sie es wir ihr man ik je jij u hij zij ze het we wij jullie men".split()
)

GERMANIC_VERBS_FIRST = frozenset(
    # German
    "ist sind bist seid waren hast habt hatte hatten kann kannst können könnt könnte "
    "könnten könntest darf darfst dürfen dürfte muss musst müssen soll sollen sollte will "
    "willst wollen möchten möchtest wird wirst werden würde würden würdest gibt weißt "
    # Dutch
    "kunt kun kan kunnen heeft hebt heb hebben bent zijn wil wilt willen mag mogen moet "
    "moeten zou zouden weet weten".split()
)
"""German and Dutch auxiliaries and modals: first in the sentence, a yes/no question ("Ist das
der Zug nach Berlin", "Kunt u dat herhalen"); a statement puts its verb second. ("Is", "was"
and "will" are English too, whose own rule reads them the same way.)"""

ARABIC = frozenset("هل أين متى كيف لماذا ماذا كم".split())
"""Arabic: the yes/no particle and interrogatives that open a question (not "ما", "من": also
"what" as a relative and "from")."""

HINDI = frozenset("कहाँ कहां कब कौन कौनसा कैसे कैसा कैसी क्यों कितना कितने कितनी".split())
"""Hindi interrogatives (the "k" words), anywhere in the sentence; its relatives are the "j"
words ("जब", "जहाँ"). "क्या" only first: elsewhere it may be "what" in a statement."""

CHINESE = ("什么", "哪", "谁", "怎么", "为什么", "几点", "几号", "多少")
CHINESE_NOT_ASKING = ("没什么", "什么都", "谁都", "哪儿都", "哪里都", "不怎么")
"""Chinese interrogatives (in place, anywhere), less the phrases where they ask nothing
("没什么", "It's nothing"; "什么都可以", "Anything is fine")."""

CHINESE_PARTICLES = ("吗", "呢")
JAPANESE_ENDINGS = tuple(
    "ですか ますか ませんか ましたか でしたか でしょうか のですか んですか".split()
)
KOREAN = tuple("뭐 무엇 무슨 어디 언제 누구 누가 왜 어떻게 몇 얼마 어느".split())
KOREAN_NOT_ASKING = ("왜냐", "언제나", "누구나", "어디나", "뭐든", "무엇이든", "얼마나")
"""Korean interrogatives, which take their endings ("어디예요", "Where is it"), read only in a
sentence that ends as a polite one ("-요"); not in the words where they ask nothing ("언제나",
"always"; "왜냐하면", "because")."""

FIRST_WORDS = (
    SPANISH | FRENCH | ITALIAN | PORTUGUESE | RUSSIAN | ARABIC | GERMANIC | GERMANIC_VERBS_FIRST
) | {"क्या"}
"""Words that make a question when they open the sentence."""

_A_NOT_A = re.compile(r"(\w)[不没]\1")
_HANGUL_BASE = 0xAC00
_HANGUL_LAST = 0xD7A3
_FINAL_N = 4
_FINAL_B = 17
"""A Hangul syllable's final consonant index of ㄴ (인가요) and ㅂ (습, 입, 합: "-ㅂ니까" asks)."""


def is_question(found: list[str], sentence: str) -> bool:
    """Whether ``found``, the words of the last sentence (lower-cased, after any openers),
    make a question by their form; ``sentence`` is that sentence as written, normalized."""
    if not found or opens_a_clause(found):
        return False
    return (
        found[0] in FIRST_WORDS
        or any(word in HINDI for word in found)
        or "¿" in sentence
        or bool(OPENING_PHRASES.match(" ".join(found)))
        or (len(found) > 2 and found[1] == "ли")
        or _asks_in_east_asian_form(found, sentence)
    )


def opens_a_clause(found: list[str]) -> bool:
    """Whether a German or Dutch interrogative opens a subordinate clause here, its subject
    next ("Was ich sagen wollte...", "Wat ik wilde zeggen..."): no question, and no English
    one either ("was" is both)."""
    return len(found) > 1 and found[0] in GERMANIC and found[1] in SUBJECT_PRONOUNS


def _asks_in_east_asian_form(found: list[str], sentence: str) -> bool:
    """Chinese, Japanese and Korean: a closing particle or ending, a Chinese A-not-A or
    interrogative, a Korean interrogative in a polite sentence."""
    last = found[-1]
    if last.endswith(CHINESE_PARTICLES) or last.endswith(JAPANESE_ENDINGS):
        return True
    if _A_NOT_A.search(sentence):
        return True
    if any(word in sentence for word in CHINESE) and not any(
        phrase in sentence for phrase in CHINESE_NOT_ASKING
    ):
        return True
    if _korean_question_ending(last):
        return True
    return last.endswith("요") and any(
        word.startswith(KOREAN) and not word.startswith(KOREAN_NOT_ASKING) for word in found
    )


def _korean_question_ending(word: str) -> bool:
    """Formal "-ㅂ니까" ("-습니까"), "-까요" (shall we, would it), polite "-나요", "-ㄴ가요"."""
    if word.endswith(("까요", "나요", "가요")):
        return not word.endswith("가요") or _final_consonant(word[-3:-2]) == _FINAL_N
    return word.endswith("니까") and _final_consonant(word[-3:-2]) == _FINAL_B


def korean_because(word: str) -> bool:
    """Whether a Korean word ends in "-(으)니까", "because" ("비가 오니까..."), not the formal
    question's "-ㅂ니까"."""
    return word.endswith("니까") and _final_consonant(word[-3:-2]) != _FINAL_B


def japanese_or(word: str) -> bool:
    """Whether a Japanese phrase ends in "か" as "or" ("コーヒーか...", "coffee or..."), not as a
    polite question ("ありますか")."""
    return word.endswith("か") and not word.endswith(JAPANESE_ENDINGS) and len(word) > 1


def _final_consonant(syllable: str) -> int:
    """The index of a Hangul syllable's final consonant (0: none, 4: ㄴ, 17: ㅂ); -1 for
    anything that is not one syllable."""
    if len(syllable) != 1 or not _HANGUL_BASE <= ord(syllable) <= _HANGUL_LAST:
        return -1
    return (ord(syllable) - _HANGUL_BASE) % 28
