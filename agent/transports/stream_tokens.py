"""Single-use, short-lived tokens that tie a carrier's media stream to the webhook it signed.

The webhook (signed by the carrier, so it really comes from the carrier) answers with the
stream URL and a token; the media stream must present it. A token is
``expires.nonce.mac``, the MAC an HMAC-SHA256 over the carrier, the call it was issued for,
the expiry and the nonce: it opens one stream, for that call, within ``ttl_s``. Any replica
that shares the secret can check it; that it was used is kept in this replica's memory only
(replicas behind a balancer keep a stream on the replica that answered its webhook, or the
window for a replay is the TTL).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable

from agent.credentials import ascii_digits, same_secret

STREAM_TOKEN_TTL_S = 60.0
"""A carrier opens the stream within a second or two of the webhook's answer."""


class StreamTokens:
    """Issues and redeems one carrier's stream tokens (``purpose`` keeps carriers apart)."""

    def __init__(
        self,
        secret: str,
        *,
        purpose: str,
        ttl_s: float = STREAM_TOKEN_TTL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._key = secret.encode()
        self._purpose = purpose
        self._ttl = ttl_s
        self._clock = clock
        self._used: dict[str, float] = {}  # nonce -> expiry

    def issue(self, call: str = "") -> str:
        """A fresh token for one stream of ``call``."""
        expires = int(self._clock() + self._ttl)
        nonce = secrets.token_hex(12)
        return f"{expires}.{nonce}.{self._mac(call, expires, nonce)}"

    def redeem(self, token: str, call: str = "") -> bool:
        """Whether ``token`` is one of ours for ``call``, unexpired and not used before (it is
        used now)."""
        parts = token.split(".")
        if len(parts) != 3 or not ascii_digits(parts[0]):
            return False
        expires, nonce, mac = int(parts[0]), parts[1], parts[2]
        if not same_secret(mac, self._mac(call, expires, nonce)):
            return False
        now = self._clock()
        self._used = {n: at for n, at in self._used.items() if at >= now}
        if expires < now or nonce in self._used:
            return False
        self._used[nonce] = expires
        return True

    def _mac(self, call: str, expires: int, nonce: str) -> str:
        message = f"{self._purpose}:{call}:{expires}:{nonce}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()
