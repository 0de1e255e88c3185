"""Does the transcript so far read like a finished question or request?

People pause 300-900 ms inside sentences, and the recognizer (Whisper tiny.en offline) ends
every fragment it hears with a full stop: "I would like to book a table." is a whole sentence
to it even when "for two people" follows. A full stop is therefore no evidence, and no rule on
the words can tell a finished statement from a clause that goes on. Questions and requests
are different: once asked, the person waits for the bot. So the one thing the words are
trusted to say is "this asks for an answer":

- a question: the last sentence ends with a question mark, or opens with an auxiliary verb
  ("is the store open today.", the word order English gives yes/no questions). A wh-word
  alone is not enough ("when you get a moment, ..." is a clause, not a question);
- a request: it opens with "please" or a verb in the imperative ("turn on the lights in the
  kitchen", "call me back tomorrow"), after any filler ("ok", "um").

Either way it must not end on a word a sentence does not end on ("can you tell me the").
"""

from __future__ import annotations

import re

AUXILIARIES = frozenset(
    "is are was were am do does did can could will would shall should may might must "
    "have has had isn't aren't wasn't weren't don't doesn't didn't can't couldn't won't "
    "wouldn't shouldn't haven't hasn't".split()
)
"""Words that open a yes/no question when they come first."""

TRAILING_WORDS = frozenset(
    "and or but so because um uh er erm hmm like the a an to of for with from in on at my "
    "your our their if then that which who when while".split()
)
"""Words a finished question does not end on: conjunctions, fillers, articles, prepositions."""

IMPERATIVES = frozenset(
    "please turn switch call book cancel tell give show send check find play stop start open "
    "close set remind read help put repeat transfer connect text email order change schedule "
    "add remove".split()
)
"""Words that open a request when they come first."""

FILLERS = frozenset("ok okay um uh er so hey hi hello well oh".split())
"""Words skipped before judging how a sentence opens."""

_SENTENCE_END = re.compile(r"(?<=[.?!])\s+")
_WORD = re.compile(r"[a-z0-9']+")


def last_sentence(text: str) -> str:
    """The last sentence of ``text`` (the recognizer's punctuation decides), stripped."""
    sentences = [s for s in _SENTENCE_END.split(text.strip()) if _WORD.search(s.lower())]
    return sentences[-1].strip() if sentences else ""


def looks_like_complete_question(text: str) -> bool:
    """Whether the words so far end with a whole question or request the bot should answer at
    once."""
    sentence = last_sentence(text)
    words = _WORD.findall(sentence.lower())
    if not words or words[-1] in TRAILING_WORDS:
        return False
    if sentence.rstrip().endswith("?"):
        return True
    while len(words) > 1 and words[0] in FILLERS:
        words = words[1:]
    return len(words) >= 3 and (words[0] in AUXILIARIES or words[0] in IMPERATIVES)
