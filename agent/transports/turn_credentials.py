"""Time-limited TURN credentials, so that the public ``POST /start`` gives nothing away for good.

The TURN REST API scheme that coturn implements with ``use-auth-secret`` and
``static-auth-secret``: the username is ``"<expiry unix time>:<name>"``, the password
``base64(HMAC-SHA1(secret, username))``. The TURN server recomputes the password from the
username with the same secret and refuses it once the expiry has passed, so a credential
copied out of a browser is good for ``credential_ttl_s`` at most, and the secret itself never
leaves the server.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

from agent.config import IceServerSettings


def turn_password(secret: str, username: str) -> str:
    """The password a TURN server with ``static-auth-secret = secret`` expects for ``username``."""
    digest = hmac.new(secret.encode(), username.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def turn_credentials(secret: str, name: str, *, ttl_s: float, now: float) -> tuple[str, str]:
    """``(username, password)`` for ``name`` (a session or call id), valid until ``now + ttl_s``."""
    username = f"{int(now + ttl_s)}:{name}"
    return username, turn_password(secret, username)


def ice_servers_for(
    servers: list[IceServerSettings], name: str, *, now: float
) -> list[dict[str, Any]]:
    """The ICE servers as a peer is given them (``{urls, username?, credential?}``): fresh
    credentials for ``name`` where a shared secret is set, a static password only where
    ``static_credentials`` allows it, else none."""
    out: list[dict[str, Any]] = []
    for server in servers:
        entry: dict[str, Any] = {"urls": server.urls}
        if server.shared_secret:
            username, credential = turn_credentials(
                server.shared_secret, name, ttl_s=server.credential_ttl_s, now=now
            )
            entry.update(username=username, credential=credential)
        elif server.static_credentials:
            entry.update(
                {
                    key: value
                    for key, value in (
                        ("username", server.username),
                        ("credential", server.credential),
                    )
                    if value is not None
                }
            )
        out.append(entry)
    return out
