# ruff: noqa: RUF001 (other scripts' words and commas are the point)
"""A sentence that is only a subordinate clause ("When I got there.", "Quand je suis arrivé.",
"Wenn Sie morgen Zeit haben.") is not over: its main clause is still to come. A tie-breaker
beside Smart Turn and the text model (:func:`agent.turns.completeness.a_clause_alone`): such
words never end the turn on the text model's wait.

A recognizer closes every fragment before a pause with a full stop, and the text model reads
such a clause as finished in the languages it reads poorly (SmolLM2: "quand je suis arrivé."
at p(end) 0.1 or more), so a caller who paused 0.87 s after it was answered on the model's 0.8
s wait (``bench/results/turn_taking_unmarked_questions.md``). Only openers that make a clause
whatever the other words, first in the sentence (after fillers and calls for attention), and
only while nothing says the main clause has begun: a comma ("When I got there, the door was
locked."), an English question's inversion ("When you get a moment could you check..."), or
more than :data:`LONGEST` words (a recognizer may drop the comma; a clause a caller pauses
after is short):

- a subordinating conjunction ("if", "because", "wenn", "weil", "lorsque", "parce que",
  "cuando", "porque", "mentre", "embora", "omdat", "если", "عندما", "जब", "如果");
- a word that is both an interrogative and a clause opener, with a subject pronoun next and
  so no question's auxiliary ("when I...", "where I...", "quand je...", "quando eu...", German
  and Dutch "was ich...", "wat ik...": :func:`~agent.turns.question_forms.opens_a_clause`);
- "si"/"se" ("if" in French and Spanish; Italian "si" and Spanish "se" are also reflexive:
  "Se me olvidó." is whole) only with a subject pronoun next.

"If" with the person asked and a modal ("If you could help me with my bill.", "Si vous pouvez
me rappeler.") is a polite request, not a clause: after "I was wondering..." and a pause it
waited for the bound on four of five lines of the offline profile's extended set.

Not read: Italian "quando" and Russian "когда" (their questions keep the subject's place:
"Quando apre il negozio", "Когда вы открываетесь"), Italian "perché" ("why" too), English
"before", "after", "since", "until" before a noun ("After lunch." answers "when?"). A clause of
two words ("If possible.", "Wenn möglich.") is an answer. The cost of a wrong reading is a
turn that waits for the bound (1.3 s) where it would have ended on the model's wait (0.8 s).
"""

from __future__ import annotations

import re
from itertools import pairwise

from agent.turns.question_forms import AUXILIARIES, opens_a_clause

CONJUNCTIONS = frozenset(
    # English
    "if because although though unless whereas whenever wherever "
    # German
    "wenn weil obwohl obgleich falls sobald nachdem bevor dass ob solange sodass "
    # Dutch
    "omdat hoewel zodra nadat voordat tenzij terwijl indien "
    # French
    "lorsque lorsqu' puisque puisqu' quoique "
    # Spanish ("cuando", "donde" unaccented: relatives, where "cuándo" and "dónde" ask)
    "cuando donde porque aunque mientras "
    # Italian
    "mentre sebbene benché siccome poiché finché "
    # Portuguese
    "embora enquanto "
    # Russian
    "если хотя чтобы "
    # Arabic: when (not "متى", which asks), if, because, while
    "عندما حينما إذا لو لأن بينما كلما "
    # Hindi: when (the relative, not "कब"), if, because, although
    "जब अगर यदि क्योंकि हालांकि जबकि".split()
)
"""Words that open a subordinate clause and no question, in the languages the end of turn
knows."""

CONJUNCTION_PHRASES = re.compile(
    r"(?:parce qu|bien qu|alors qu|dès qu|pendant qu|avant qu|après qu|tandis qu|pour qu"
    r"|afin qu|même si|ya que|en cuanto|después de que|antes de que|para que|a menos que"
    r"|dopo che|prima che|assim que|depois que|antes que|já que|так как|после того как"
    r"|перед тем как|потому что|as soon as|even though|even if|in case)(?:e\b|'|\b)"
)
"""Conjunctions of two words or more, matched on the words joined by spaces (French "que" or
its elided "qu'")."""

BEFORE_A_SUBJECT = frozenset(
    "when where while since until till before after once "  # English
    "als da während "  # German ("als ich kam", not "als Kind")
    "als toen "  # Dutch
    "quand si "  # French
    "si "  # Spanish
    "quando se".split()  # Portuguese, Italian
)
"""Words that open a clause only when its subject comes next: each is also an interrogative,
a preposition, an adverb or a reflexive ("When does it open", "After lunch", "Se me olvidó")."""

SUBJECTS = frozenset(
    "i you he she we they it i'm you're he's she's we're they're it's i've we've i'd "
    "ich du er sie es wir ihr man "
    "ik jij je hij zij ze het we wij u "
    "je j' tu il elle on nous vous ils elles c' "
    "yo tú él ella usted nosotros ustedes ellos ellas "
    "io lui lei noi voi loro "
    "eu você ele nós vocês eles elas".split()
)
"""Subject pronouns, the elided French ones as their first part ("j'" of "j'ai")."""

CHINESE = ("如果", "因为", "虽然", "要是", "只要", "除非", "即使")
"""Chinese conjunctions that open a subordinate clause ("如果你有时间…", "If you have
time…")."""

CLAUSE_ENDS = re.compile(r"[,，、،;；]")
"""A comma (Latin, Chinese, Arabic) or a semicolon: the clause is over and the main one under
way. In Hindi, also "तो" ("then": "जब मैं पहुँचा तो…")."""

SHORTEST = 3
"""The fewest words a clause must have to be read so: two ("If possible.") answer."""

LONGEST = 8
"""The most words a sentence may have to be read as a clause alone: in a longer one without a
comma the main clause has most likely begun ("If you could send me the receipt by email that
would be great")."""

CONDITIONALS = frozenset("if si wenn se als".split())
"""Words for "if" that open a polite request as well as a clause."""

POLITE_REQUEST = frozenset(
    "you vous tu sie du usted lei você u "  # the one asked
    "could would can will pouvez pouviez pourriez voulez vouliez könnten würden können "
    "puede pudiera podría potrebbe potesse può pode puder poderia kunt zou".split()
)
"""The person asked and a modal of ability or will: with both, "if" opens a request ("If you
could help me with my bill.", after "I was wondering..."; "Si vous pouvez me rappeler.",
"Wenn Sie mich zurückrufen könnten."), not a clause whose main clause is to come."""

_NOT_A_CLAUSE = (("s'il", "vous", "plaît"), ("s'il", "te", "plaît"), ("porque", "é", "que"))
"""French "please", which opens with "s'il" ("if it"); Portuguese "porque é que", a question."""


def only_a_subordinate_clause(found: list[str], sentence: str) -> bool:
    """Whether ``found``, the words of the last sentence (lower-cased, after any openers),
    are a subordinate clause whose main clause has not begun; ``sentence`` is that sentence
    as written, normalized."""
    if not SHORTEST <= len(found) <= LONGEST or _main_clause_begun(found, sentence):
        return False
    if "".join(found).startswith(CHINESE):
        return True
    if tuple(found[:3]) in _NOT_A_CLAUSE:
        return False
    first = found[0]
    if first in CONDITIONALS and len(POLITE_REQUEST.intersection(found[1:])) >= 2:
        return False
    return (
        first in CONJUNCTIONS
        or _elided_conjunction(first)
        or (first in BEFORE_A_SUBJECT and _subject(found[1]))
        or first in ("s'il", "s'ils")
        or opens_a_clause(found)
        or bool(CONJUNCTION_PHRASES.match(" ".join(found)))
    )


def _main_clause_begun(found: list[str], sentence: str) -> bool:
    """Whether a comma or semicolon comes after the clause's first word (not one after a filler
    before it: "Um, when I got there."), Hindi's "तो", or an English question's inversion after
    the opener and its subject ("When you get a moment could you...")."""
    after_opener = sentence[max(sentence.find(found[0]), 0) :]
    if CLAUSE_ENDS.search(after_opener) or "तो" in found[1:]:
        return True
    return any(verb in AUXILIARIES and subject in SUBJECTS for verb, subject in pairwise(found[2:]))


def _elided_conjunction(word: str) -> bool:
    """French "lorsqu'il", "puisqu'on": the conjunction and its subject in one word."""
    head, apostrophe, _ = word.partition("'")
    return bool(apostrophe) and f"{head}'" in CONJUNCTIONS


def _subject(word: str) -> bool:
    """Whether ``word`` is a subject pronoun, or opens with an elided one ("j'ai", "c'est")."""
    head, apostrophe, _ = word.partition("'")
    return word in SUBJECTS or (bool(apostrophe) and f"{head}'" in SUBJECTS)
