"""Redact card numbers, account numbers, phone numbers, e-mail addresses and IBANs from text
as a recognizer writes it: digits written out ("4111 1111 …"), spoken one by one ("four one
one one …", "double five"), or mixed.

Why not Presidio: its pattern recognizers need no model, but ``presidio-analyzer`` imports
spaCy (and its dozen compiled dependencies) on import, pulls ``tldextract`` (which fetches the
public suffix list over the network on first use), and its recognizers read written digits
only: a transcript's "four one one one …" passes through untouched. The rules below are the
same ones (Luhn for cards, ISO 13616 mod-97 for IBANs) applied after turning spoken digits into
digits, in one small module with no dependency.

Every run of six or more digits is redacted, whatever it is: a transcript has no field names,
so a number that is neither a valid card nor shaped like a phone number is taken for an
account number. Shorter numbers ("a table for two", "at 5 pm", a year) stay.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CARD = "[card number]"
PHONE = "[phone number]"
ACCOUNT = "[account number]"
EMAIL = "[email]"
IBAN = "[IBAN]"

MIN_DIGITS = 6
"""A run of this many digits or more is redacted (an account number at least)."""

_DIGIT_WORDS = {
    "zero": "0",
    "one": "1",
    "two": "2",
    "three": "3",
    "four": "4",
    "five": "5",
    "six": "6",
    "seven": "7",
    "eight": "8",
    "nine": "9",
}
_OH = {"oh", "o"}  # "five oh five": a zero only inside a run of digits
_REPEAT = {"double": 2, "triple": 3}
_TOKEN = re.compile(r"\+|[A-Za-z]+|\d+")
_GAP = re.compile(r"[\s\-.,()/]*")
"""What may separate the parts of one spoken or written number."""

_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
_SPOKEN_EMAIL = re.compile(
    r"\b[a-z0-9_.]+(?:\s+(?:dot|underscore)\s+[a-z0-9_]+)*\s+at\s+[a-z0-9-]+"
    r"(?:(?:\s+dot\s+|\.)[a-z]{2,})+\b",
    re.IGNORECASE,
)
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?:[ ]?[A-Z0-9]){11,30}\b", re.IGNORECASE)


def luhn_valid(digits: str) -> bool:
    """The Luhn checksum every payment card number carries."""
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2 == 1:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def iban_valid(candidate: str) -> bool:
    """ISO 13616: the country and check digits moved to the end, letters as 10..35, mod 97."""
    compact = candidate.replace(" ", "").upper()
    if not 15 <= len(compact) <= 34:
        return False
    moved = compact[4:] + compact[:4]
    number = "".join(str(int(char, 36)) for char in moved)
    return int(number) % 97 == 1


@dataclass(frozen=True, slots=True)
class _Run:
    start: int
    end: int
    digits: str
    plus: bool


def _digit_runs(text: str) -> list[_Run]:
    """Stretches of ``text`` that spell one number, with the digits they spell."""
    runs: list[_Run] = []
    start = end = -1
    digits = ""
    plus = False
    repeat = 1

    def close() -> None:
        nonlocal start, digits, plus, repeat
        if digits:
            runs.append(_Run(start, end, digits, plus))
        start, digits, plus, repeat = -1, "", False, 1

    for match in _TOKEN.finditer(text):
        word = match.group().lower()
        if start >= 0 and not _GAP.fullmatch(text, end, match.start()):
            close()
        value: str | None = None
        if word.isdigit():
            value = word
        elif word in _DIGIT_WORDS:
            value = _DIGIT_WORDS[word]
        elif word in _OH and digits:
            value = "0"
        if value is not None:
            if start < 0:
                start = match.start()
            digits += value * repeat if len(value) == 1 else value
            repeat = 1
            end = match.end()
        elif word in _REPEAT or word in ("+", "plus"):
            if digits and word in ("+", "plus"):
                close()
            if start < 0:
                start = match.start()
                end = match.end()
            if word in _REPEAT:
                repeat = _REPEAT[word]
            else:
                plus = True
            end = match.end()
        else:
            close()
    close()
    return runs


def _label(run: _Run) -> str:
    digits = run.digits
    if 13 <= len(digits) <= 19 and luhn_valid(digits):
        return CARD
    if run.plus or len(digits) == 10 or (len(digits) == 11 and digits[0] == "1"):
        return PHONE
    if 7 <= len(digits) <= 15 and run.plus:
        return PHONE
    return ACCOUNT


_CANDIDATE = re.compile(
    r"\d|@|(?<![A-Za-z])(?:zero|one|two|three|four|five|six|seven|eight|nine|at)(?![A-Za-z])",
    re.IGNORECASE,
)
"""Something the rules below could act on: a digit (numbers, IBANs), a digit spoken as a word
(a number starts with one: "oh", "double" and "plus" only join or lead one), an ``@`` or the
word "at" (e-mail addresses, written or spoken). Text with none of them is returned as it is,
after one scan in C: most of what people say, and every interim update of it."""


def redact(text: str) -> str:
    """``text`` with every card, account and phone number, e-mail address and IBAN replaced
    by a label such as ``[card number]``."""
    if _CANDIDATE.search(text) is None:
        return text
    return _redact(text)


def _redact(text: str) -> str:
    text = _EMAIL.sub(EMAIL, text)
    text = _SPOKEN_EMAIL.sub(EMAIL, text)
    text = _IBAN.sub(lambda m: IBAN if iban_valid(m.group()) else m.group(), text)
    pieces: list[str] = []
    last = 0
    for run in _digit_runs(text):
        if len(run.digits) < MIN_DIGITS:
            continue
        pieces.append(text[last : run.start])
        pieces.append(_label(run))
        last = run.end
    pieces.append(text[last:])
    return "".join(pieces)


def redact_partial(text: str) -> str:
    """Interim text: a number still being spoken may not have its six digits yet, so any run
    of three or more is hidden too (a final transcript gets :func:`redact`)."""
    if _CANDIDATE.search(text) is None:
        return text
    redacted = _redact(text)
    pieces: list[str] = []
    last = 0
    for run in _digit_runs(redacted):
        if len(run.digits) < 3:
            continue
        pieces.append(redacted[last : run.start])
        pieces.append(ACCOUNT)
        last = run.end
    pieces.append(redacted[last:])
    return "".join(pieces)
