"""``POST /start`` is public: the TURN credentials it hands out are made for the session from
the TURN server's shared secret and expire (the TURN REST API scheme, coturn's
``use-auth-secret``); the secret, and any static password, stay on the server."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time

import httpx
from fastapi import FastAPI

from agent.config import load_settings
from agent.server import create_app
from tests.fakes.serving import background

SECRET = "coturn-static-auth-secret"
TTL_S = 600


def coturn_accepts(username: str, password: str, *, secret: str, now: float) -> bool:
    """What coturn with ``use-auth-secret`` / ``static-auth-secret=secret`` checks: the
    password is base64(HMAC-SHA1(secret, username)) and the username's timestamp is ahead."""
    expiry, _, _name = username.partition(":")
    expected = base64.b64encode(
        hmac.new(secret.encode(), username.encode(), hashlib.sha1).digest()
    ).decode()
    return expiry.isdigit() and int(expiry) > now and hmac.compare_digest(expected, password)


def agent(**turn: object) -> FastAPI:
    """The server with a STUN server and one TURN server configured with ``turn``."""
    settings = load_settings(
        "default",
        overrides={
            "server": {
                "start_local_services": False,
                "ice_servers": [
                    "stun:stun.example.org:3478",
                    {"urls": "turn:t.example:3478", **turn},
                ],
            }
        },
    )
    return create_app(settings)


async def test_start_hands_out_credentials_that_verify_against_the_secret_and_expire() -> None:
    with background(agent(shared_secret=SECRET, credential_ttl_s=TTL_S)) as url:
        async with httpx.AsyncClient() as http:
            asked = time.time()
            first = await http.post(f"{url}/start", json={})
            second = await http.post(f"{url}/start", json={})
    assert first.status_code == second.status_code == 200
    assert SECRET not in first.text
    stun, turn = first.json()["iceConfig"]["iceServers"]
    assert stun == {"urls": "stun:stun.example.org:3478"}  # STUN needs no credentials
    username, password = turn["username"], turn["credential"]
    expiry, name = username.split(":", 1)
    assert name == first.json()["sessionId"]  # one session's credentials
    assert asked + TTL_S - 2 <= int(expiry) <= time.time() + TTL_S
    assert coturn_accepts(username, password, secret=SECRET, now=time.time())
    assert not coturn_accepts(username, password, secret=SECRET, now=int(expiry) + 1)
    later = f"{int(expiry) + 86400}:{name}"  # a caller cannot stretch its own expiry
    assert not coturn_accepts(later, password, secret=SECRET, now=time.time())
    other = second.json()["iceConfig"]["iceServers"][1]
    assert other["username"] != username and other["credential"] != password


async def test_a_static_password_is_in_the_answer_only_when_explicitly_handed_out() -> None:
    with background(
        agent(username="voice", credential="static-pw", static_credentials=True)
    ) as url:
        async with httpx.AsyncClient() as http:
            start = await http.post(f"{url}/start", json={})
    assert start.json()["iceConfig"]["iceServers"][1] == {
        "urls": "turn:t.example:3478",
        "username": "voice",
        "credential": "static-pw",
    }
