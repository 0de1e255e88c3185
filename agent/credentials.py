"""Comparing a secret a client sent with the one expected.

``hmac.compare_digest`` on ``str`` raises ``TypeError`` for anything that is not ASCII, so a
stream token, query token or ``Authorization`` header in any other script crashed the handler
(a 500, or a 1011 close with a traceback) instead of being refused. Compared as UTF-8 bytes,
any text a client sends is simply a wrong secret, still in constant time.
"""

from __future__ import annotations

import hmac


def same_secret(given: str, expected: str) -> bool:
    """Whether ``given`` equals ``expected``, in constant time, for any Unicode input."""
    return hmac.compare_digest(
        given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass")
    )


def ascii_digits(text: str) -> bool:
    """Whether ``text`` is a plain decimal number: ``str.isdigit`` also accepts "²" and "٣",
    which ``int`` then refuses or reads as another number."""
    return text.isascii() and text.isdigit()
