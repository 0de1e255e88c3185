"""Redaction of what a contact-centre transcript carries, written as recognizers write it."""

from __future__ import annotations

import pytest

from agent.analytics.redaction import (
    ACCOUNT,
    CARD,
    EMAIL,
    IBAN,
    PHONE,
    iban_valid,
    luhn_valid,
    redact,
    redact_partial,
)


@pytest.mark.parametrize(
    "said",
    [
        "my card is four one one one one one one one one one one one one one one one",
        "my card is 4111 1111 1111 1111",
        "my card is 4111-1111-1111-1111.",
        "my card is 4111111111111111",
        "my card is four one one one, 1111 1111 one one one one",
    ],
)
def test_a_card_number_is_redacted_however_it_is_written(said: str) -> None:
    assert redact(said) == f"my card is {CARD}" + ("." if said.endswith(".") else "")


def test_a_number_that_fails_the_luhn_check_is_still_redacted_as_an_account() -> None:
    assert luhn_valid("4111111111111111") and not luhn_valid("4111111111111112")
    assert redact("it is 4111 1111 1111 1112") == f"it is {ACCOUNT}"


@pytest.mark.parametrize(
    "said",
    [
        "call me on five five five zero one double two three four five",
        "call me on 555-012-2345",
        "call me on plus four four two zero seven nine four six zero nine five eight",
        "call me on +44 20 7946 0958",
    ],
)
def test_phone_numbers_are_redacted(said: str) -> None:
    assert redact(said) == f"call me on {PHONE}"


def test_account_numbers_and_digits_with_oh_are_redacted() -> None:
    assert redact("account seven oh three two nine one please") == f"account {ACCOUNT} please"
    assert redact("reference 00482913") == f"reference {ACCOUNT}"


@pytest.mark.parametrize(
    "said",
    [
        "write to jane.doe@example.com today",
        "write to jane dot doe at example dot com today",
        "write to jane.doe at example.com today",
    ],
)
def test_email_addresses_are_redacted_written_or_spoken(said: str) -> None:
    assert redact(said) == f"write to {EMAIL} today"


def test_ibans_are_redacted_when_their_check_digits_hold() -> None:
    assert iban_valid("GB82 WEST 1234 5698 7654 32")
    assert not iban_valid("GB83 WEST 1234 5698 7654 32")
    assert redact("my iban is GB82 WEST 1234 5698 7654 32") == f"my iban is {IBAN}"


@pytest.mark.parametrize(
    "said",
    [
        "i would like to book a table for two people",
        "one ticket for 5 pm on march 3rd 2026",
        "a double room for one night",
        "can you tell me a short story about cats",
    ],
)
def test_ordinary_speech_and_short_numbers_are_left_alone(said: str) -> None:
    assert redact(said) == said


def test_interim_text_hides_a_number_before_it_is_complete() -> None:
    assert redact_partial("my card is four one one") == f"my card is {ACCOUNT}"
    assert redact_partial("a table for two") == "a table for two"


@pytest.mark.parametrize(
    "said",
    [
        "what is the weather like in paris today",
        "Please call me back tomorrow morning.",
        "someone at the desk, often",  # "one" and "at" inside words or alone
        "ONE two THREE four five six seven",
        "reach me at jane dot doe at example dot com",
        "GB82 WEST 1234 5698 7654 32",
        "plus double oh, then nothing",
        "room 12 at 5",
    ],
)
def test_the_quick_scan_changes_no_answer_of_the_full_rules(said: str) -> None:
    from agent.analytics.redaction import _redact

    assert redact(said) == _redact(said)


def test_text_with_nothing_to_redact_comes_back_as_it_is() -> None:
    said = "what is the weather like in paris today, someone asked"
    assert redact(said) is said and redact_partial(said) is said
