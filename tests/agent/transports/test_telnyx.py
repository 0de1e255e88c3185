"""Telnyx, the second carrier: its signed webhook, its TeXML answer, its stream token and its
codecs. (The call tests both carriers share run for Telnyx too: ``test_twilio.py``,
``test_twilio_abuse.py``, ``test_twilio_leaks.py``.)

The webhook is signed as Telnyx signs it, with the fake's Ed25519 key
(:mod:`tests.fakes.telnyx_caller`); the PCMA call carries espeak speech as 20 ms A-law frames
at real-time pace through the real pipeline.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Callable, Iterator
from urllib.parse import urlencode

import httpx
import pytest
import websockets
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from fastapi import FastAPI
from hypothesis import given
from hypothesis import strategies as st

from agent.config import ConfigError, load_settings
from agent.server import create_app
from agent.transports.telnyx import signature_problem
from tests.agent.transports.stack import async_wait_for, phone_server, server_tasks
from tests.conftest import requires_espeak
from tests.fakes.telnyx_caller import (
    CALL_FORM,
    PUBLIC_KEY,
    TelnyxCaller,
    alaw_speech,
    place_call,
    post_webhook,
    sign,
    stream_url_of,
)
from tests.fakes.twilio_caller import ulaw_speech

BODY = urlencode(CALL_FORM).encode()


def problem(headers: dict[str, str]) -> str | None:
    """What the server finds wrong with ``BODY`` sent with ``headers``, as of now."""
    key = Ed25519PublicKey.from_public_bytes(base64.b64decode(PUBLIC_KEY))
    return signature_problem(key, BODY, headers, now=time.time(), tolerance_s=300)


# ------------------------------------------------------------------ the signature, offline


def test_a_webhook_signed_with_the_accounts_key_is_accepted() -> None:
    assert problem(sign(BODY)) is None
    assert problem(sign(BODY, timestamp=int(time.time()) - 299)) is None


@pytest.mark.parametrize(
    "forge, why",
    [
        (lambda: {}, "missing"),
        (lambda: {"telnyx-timestamp": str(int(time.time()))}, "missing"),
        (lambda: sign(BODY, key=Ed25519PrivateKey.generate()), "does not match"),
        (lambda: sign(BODY + b"&Digits=9"), "does not match"),  # signed a different body
        (lambda: {**sign(BODY), "telnyx-timestamp": str(int(time.time()) + 1)}, "match"),
        (lambda: {**sign(BODY), "telnyx-signature-ed25519": "not base64!"}, "does not match"),
        (lambda: {**sign(BODY), "telnyx-signature-ed25519": "c2hvcnQ="}, "does not match"),
        (lambda: {**sign(BODY), "telnyx-timestamp": "yesterday"}, "Unix seconds"),
        (lambda: sign(BODY, timestamp=int(time.time()) - 301), "clock"),  # a replay
        (lambda: sign(BODY, timestamp=int(time.time()) + 301), "clock"),
    ],
)
def test_a_missing_wrong_or_stale_signature_is_refused_with_its_reason(
    forge: Callable[[], dict[str, str]], why: str
) -> None:
    found = problem(forge())
    assert found is not None and why in found


@given(st.text(), st.text())
def test_any_unicode_in_the_signature_headers_is_refused_with_a_reason(
    timestamp: str, signature: str
) -> None:
    headers = {"telnyx-timestamp": timestamp, "telnyx-signature-ed25519": signature}
    assert problem(headers) is not None


# ------------------------------------------------------------------ settings


def test_the_public_key_must_be_an_ed25519_key_and_turns_the_routes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ConfigError, match=r"telnyx\.public_key"):
        load_settings("default", overrides={"telnyx": {"public_key": "bm90IGEga2V5"}})
    monkeypatch.setenv("VOICE_AGENT_TELNYX__PUBLIC_KEY", PUBLIC_KEY)
    assert load_settings("default").telnyx.public_key == PUBLIC_KEY
    monkeypatch.delenv("VOICE_AGENT_TELNYX__PUBLIC_KEY")

    async def status(settings_key: str | None) -> int:
        overrides = {"telnyx": {"public_key": settings_key}} if settings_key else {}
        app = create_app(load_settings("default", overrides=overrides))
        transport = httpx.ASGITransport(app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            response = await http.post("/telephony/telnyx", content=BODY, headers=sign(BODY))
        return response.status_code

    assert asyncio.run(status(None)) == 404  # no key, no Telnyx: nothing unsigned is taken
    assert asyncio.run(status(PUBLIC_KEY)) == 200


# ------------------------------------------------------------------ over the wire


@pytest.fixture(scope="module")
def server(asr_server_url: str, asr_model_name: str) -> Iterator[tuple[str, FastAPI]]:
    with phone_server(asr_server_url, asr_model_name, max_calls=1) as running:
        yield running


@pytest.mark.parametrize("codec", ["PCMU", "PCMA"])
async def test_the_signed_webhook_answers_texml_that_connects_a_bidirectional_stream(
    asr_server_url: str, asr_model_name: str, codec: str
) -> None:
    running = phone_server(asr_server_url, asr_model_name, max_calls=1, telnyx={"codec": codec})
    with running as (url, _app):
        response = await post_webhook(url)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/xml")
    port = url.rsplit(":", 1)[1]
    stream = stream_url_of(response.text)
    assert stream.startswith(f"ws://127.0.0.1:{port}/telephony/telnyx/ws?token=")
    assert f'codec="{codec}" bidirectionalMode="rtp" bidirectionalCodec="{codec}"' in response.text


@pytest.mark.parametrize(
    "headers",
    [
        {},
        sign(BODY, key=Ed25519PrivateKey.generate()),
        sign(urlencode({**CALL_FORM, "From": "+19990000"}).encode()),
        sign(BODY, timestamp=int(time.time()) - 3600),
        {"telnyx-timestamp": "0", "telnyx-signature-ed25519": ""},
    ],
    ids=["unsigned", "another-key", "tampered", "stale", "empty"],
)
async def test_a_webhook_with_a_missing_wrong_or_stale_signature_is_403_and_starts_nothing(
    server: tuple[str, FastAPI], headers: dict[str, str]
) -> None:
    url, app = server
    started = app.state.registry.stats.started
    response = await post_webhook(url, headers=headers)
    assert response.status_code == 403
    assert "telnyx" in response.text and "<Stream" not in response.text
    assert app.state.registry.stats.started == started


async def test_a_replayed_webhook_is_refused_and_mints_no_token(
    server: tuple[str, FastAPI],
) -> None:
    """A captured signed webhook sent again within the signature's window; Telnyx's own retry
    is signed anew (another timestamp) and still answered."""
    url, _app = server
    body = urlencode({**CALL_FORM, "CallSid": "v3:telnyx-replayed"}).encode()
    captured = sign(body, timestamp=int(time.time()) - 5)
    first = await post_webhook(
        url, {**CALL_FORM, "CallSid": "v3:telnyx-replayed"}, headers=captured
    )
    again = await post_webhook(
        url, {**CALL_FORM, "CallSid": "v3:telnyx-replayed"}, headers=captured
    )
    retry = await post_webhook(url, {**CALL_FORM, "CallSid": "v3:telnyx-replayed"})
    assert first.status_code == retry.status_code == 200 and "<Stream" in retry.text
    assert again.status_code == 403 and "replay" in again.text and "<Stream" not in again.text


@pytest.mark.parametrize("how", ["replayed", "bare"])
@requires_espeak
async def test_a_stream_token_opens_one_call_only(server: tuple[str, FastAPI], how: str) -> None:
    url, app = server
    registry = app.state.registry
    stream_url = await place_call(url)
    async with websockets.connect(stream_url) as ws:
        caller = TelnyxCaller(ws)
        await caller.start()
        await async_wait_for(lambda: registry.stats.active == 1, timeout_s=5, what="the call")
        await caller.stop()
        await asyncio.wait_for(caller.closed.wait(), 10)
    await async_wait_for(lambda: registry.stats.active == 0, timeout_s=10, what="the call to end")
    started = registry.stats.started
    again = stream_url if how == "replayed" else stream_url.partition("?")[0]
    async with websockets.connect(again) as ws:
        intruder = TelnyxCaller(ws)
        await intruder.start()
        await asyncio.wait_for(intruder.closed.wait(), 5)
    assert ws.close_code == 1008 and ws.close_reason == "unauthorized stream"
    assert registry.stats.started == started


@pytest.mark.parametrize("encoding", ["OPUS", "L16"])
async def test_a_stream_in_a_codec_the_server_cannot_decode_is_refused_with_the_reason(
    server: tuple[str, FastAPI], encoding: str
) -> None:
    url, app = server
    started = app.state.registry.stats.started
    async with websockets.connect(await place_call(url)) as ws:
        caller = TelnyxCaller(ws)
        caller.codec = encoding  # type: ignore[assignment]
        await caller.start()
        await asyncio.wait_for(caller.closed.wait(), 5)
    assert ws.close_code == 1008 and "PCMU or PCMA" in (ws.close_reason or "")
    assert app.state.registry.stats.started == started


@requires_espeak
@pytest.mark.timeout(120)
@pytest.mark.parametrize("caller_codec", ["PCMA", "PCMU"])
async def test_a_call_in_a_law_is_transcribed_and_answered(
    asr_server_url: str, asr_model_name: str, caller_codec: str
) -> None:
    """The server asks for PCMA both ways; the caller's audio is decoded as its ``start`` says
    (A-law, or μ-law where Telnyx could not transcode) and the bot answers."""
    running = phone_server(asr_server_url, asr_model_name, max_calls=1, telnyx={"codec": "PCMA"})
    with running as (url, app):
        registry = app.state.registry
        async with websockets.connect(await place_call(url)) as ws:
            caller = TelnyxCaller(ws, codec=caller_codec, playback="PCMA")  # type: ignore[arg-type]
            await caller.start()
            await caller.silence(0.3)
            question = "what is the weather like in paris today"
            speak = alaw_speech if caller_codec == "PCMA" else ulaw_speech
            await caller.speak(speak(question))
            talking = asyncio.create_task(caller.silence(15))
            await async_wait_for(lambda: len(caller.loud_at) >= 10, timeout_s=20, what="bot speech")
            talking.cancel()
            call = registry.calls()[0]
            assert "paris" in " ".join(call.user_transcript).lower()
            assert call.attributes["codec"] == caller_codec
            assert call.attributes["call_sid"] == caller.call_control_id
            await caller.stop()
            await asyncio.wait_for(caller.closed.wait(), 10)
        await async_wait_for(lambda: registry.stats.active == 0, timeout_s=10, what="the end")
        assert server_tasks(app) == []
