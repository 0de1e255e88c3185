"""Secrets from the wire are compared as bytes: any Unicode a client sends is a wrong secret,
never a crash (``hmac.compare_digest`` raises ``TypeError`` on non-ASCII ``str``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agent.credentials import ascii_digits, same_secret


@given(st.text(), st.text())
def test_any_two_texts_compare_without_raising(given_text: str, expected: str) -> None:
    assert same_secret(given_text, expected) is (given_text == expected)


@given(st.text())
def test_a_text_equals_itself(text: str) -> None:
    assert same_secret(text, text)


def test_only_ascii_decimal_numbers_are_numbers() -> None:
    assert ascii_digits("1712345678")
    for text in ("", "²", "٣٣", "1.5", " 12", "-1", "\uff11\uff12"):  # the last: full-width "12"
        assert not ascii_digits(text), text
