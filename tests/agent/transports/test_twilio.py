"""Phone calls end to end: a client that speaks the carrier's protocol calls the real pipeline.

Twilio's webhook signature check is tested against Twilio's documented example and through
HTTP (Telnyx's in ``test_telnyx.py``); the call tests run once per carrier (the ``carrier``
fixture: Twilio, Telnyx), the media stream carrying espeak speech as 20 ms 8 kHz G.711 frames at
real-time pace.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest
import websockets
from fastapi import FastAPI

from agent.transports.telephony import (
    twilio_signature,
    twilio_stream_tokens,
    valid_twilio_signature,
)
from tests.agent.transports.carriers import Carrier
from tests.agent.transports.phone_stack import errors_logged
from tests.agent.transports.stack import (
    async_wait_for,
    phone_server,
    server_tasks,
)
from tests.conftest import requires_espeak
from tests.fakes.twilio_caller import TOKEN, ulaw_speech

pytestmark = [requires_espeak, pytest.mark.timeout(120)]

CALL_FORM = {"CallSid": "CA0001", "AccountSid": "AC0001", "From": "+15550001", "To": "+15550002"}


def test_signature_matches_twilios_documented_example() -> None:
    url = "https://mycompany.com/myapp.php?foo=1&bar=2"
    params = {
        "CallSid": "CA1234567890ABCDE",
        "Caller": "+12349013030",
        "Digits": "1234",
        "From": "+12349013030",
        "To": "+18005551212",
    }
    assert twilio_signature(url, params, "12345") == "0/KCTR6DLpKmkAf8muzZqo1nDgQ="
    assert valid_twilio_signature(url, params, "12345", "0/KCTR6DLpKmkAf8muzZqo1nDgQ=")
    assert not valid_twilio_signature(
        url, {**params, "Digits": "9"}, "12345", "0/KCTR6DLpKmkAf8muzZqo1nDgQ="
    )
    assert not valid_twilio_signature(url, params, "12345", None)


@pytest.fixture(scope="module")
def server(asr_server_url: str, asr_model_name: str) -> Iterator[tuple[str, FastAPI]]:
    with phone_server(asr_server_url, asr_model_name, max_calls=1) as running:
        yield running


async def webhook(
    url: str, *, signature: str | None, form: dict[str, str] = CALL_FORM
) -> httpx.Response:
    headers = {"X-Twilio-Signature": signature} if signature is not None else {}
    async with httpx.AsyncClient() as http:
        return await http.post(url + "/telephony/twilio", data=form, headers=headers)


def sign(url: str, form: dict[str, str] = CALL_FORM) -> str:
    return twilio_signature(url + "/telephony/twilio", form, TOKEN)


async def test_webhook_with_a_valid_signature_answers_twiml(server: tuple[str, FastAPI]) -> None:
    url, _app = server
    response = await webhook(url, signature=sign(url))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/xml")
    port = url.rsplit(":", 1)[1]
    assert f'<Connect><Stream url="ws://127.0.0.1:{port}/telephony/twilio/ws">' in response.text
    token = response.text.split('<Parameter name="token" value="')[1].split('"')[0]
    assert twilio_stream_tokens(TOKEN).redeem(token, "CA0001")  # for this call, unused


@pytest.mark.parametrize("signature", [None, "", "bm90IHRoZSBzaWduYXR1cmU=", "tampered"])
async def test_webhook_with_a_missing_or_wrong_signature_is_403(
    server: tuple[str, FastAPI], signature: str | None
) -> None:
    url, app = server
    started = app.state.registry.stats.started
    if signature == "tampered":
        signature = sign(url, {**CALL_FORM, "From": "+19990000"})
    response = await webhook(url, signature=signature)
    assert response.status_code == 403
    assert "<Stream" not in response.text
    assert app.state.registry.stats.started == started


async def test_a_phone_call_is_answered_and_barge_in_clears_bot_audio(
    server: tuple[str, FastAPI], carrier: Carrier
) -> None:
    url, app = server
    registry = app.state.registry
    async with carrier.call(url) as caller:
        await caller.start()
        await caller.silence(0.3)
        await caller.speak(ulaw_speech("what is the weather like in paris today"))
        speaking = asyncio.create_task(caller.silence(15))
        await async_wait_for(lambda: caller.count("media") >= 10, timeout_s=20, what="bot media")
        speaking.cancel()
        # The bot is talking: speak over it. (A clear may also come when the first question
        # starts; only one after the bot's audio began proves barge-in.)
        clears = caller.count("clear")
        await caller.speak(ulaw_speech("please call me back tomorrow morning"))
        await async_wait_for(
            lambda: caller.count("clear") > clears, timeout_s=10, what="a clear on barge-in"
        )
        # The answer ("You said: what is the weather like in paris today") is about 3 s, 150
        # frames; the clear came while it was still being sent.
        assert caller.media_at_clear[-1] < 120, caller.media_at_clear
        if carrier.name == "twilio":  # Telnyx's messages to it name no stream
            assert all(
                e["streamSid"] == "MZ0001"
                for e in caller.events
                if e["event"] in ("media", "clear")
            )
        await caller.mark("m1")
        call = registry.calls()[0]
        assert call.kind == carrier.name
        assert "paris" in " ".join(call.user_transcript).lower()
        # Only Twilio's own messages: a phone speaks no RTVI (no VAD events, no turn latency).
        assert {e.get("event") for e in caller.events} <= {"media", "clear", "mark"}
        await caller.stop()
        await asyncio.wait_for(caller.closed.wait(), 10)  # the server ends the call and closes
    await async_wait_for(lambda: registry.stats.active == 0, timeout_s=10, what="the call to end")
    assert server_tasks(app) == []


async def test_over_the_limit_a_call_is_rejected_busy(
    server: tuple[str, FastAPI], carrier: Carrier
) -> None:
    url, app = server
    registry = app.state.registry
    async with carrier.call(url) as caller:
        await caller.start()
        await async_wait_for(lambda: registry.stats.active == 1, timeout_s=5, what="the first call")
        response = await carrier.signed_webhook(url)
        assert response.status_code == 200
        assert '<Reject reason="busy"/>' in response.text and "<Stream" not in response.text
        async with websockets.connect(carrier.ws_url(url)) as second:
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await asyncio.wait_for(second.recv(), 5)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
        assert registry.stats.active == 1
    await async_wait_for(lambda: registry.stats.active == 0, timeout_s=10, what="the call to end")


@pytest.mark.parametrize(
    "token",
    ["1999999999.forged.0000", "Ünïcödé.tökën.☃", "².nonce.mac", "٣٣٣٣٣٣٣٣٣٣.nonce.mac"],
    ids=["forged", "unicode", "superscript-digit", "arabic-indic-digits"],
)
async def test_a_stream_with_a_wrong_token_is_refused_without_taking_a_slot(
    server: tuple[str, FastAPI], carrier: Carrier, token: str
) -> None:
    """Any text is just a wrong token: refused as a policy violation (1008), never a crash
    (a non-ASCII token made ``hmac.compare_digest`` raise: 1011 and a traceback)."""
    url, app = server
    registry = app.state.registry
    started = registry.stats.started
    async with carrier.call(url, forged=token) as caller:
        await caller.start(token=token)
        await asyncio.wait_for(caller.closed.wait(), 5)
        assert caller.ws.close_code == 1008, caller.ws.close_reason
    assert caller.count("media") == 0
    assert registry.stats.started == started and registry.stats.active == 0


async def test_a_caller_that_vanishes_mid_sentence_releases_everything(
    server: tuple[str, FastAPI], carrier: Carrier
) -> None:
    url, app = server
    registry = app.state.registry
    ws = await websockets.connect(await carrier.stream_url(url))
    caller = carrier.caller(ws)
    await caller.start()
    await caller.speak(ulaw_speech("i would like to book a table for two people"), stop_after=1.0)
    assert registry.stats.active == 1
    assert server_tasks(app)
    ws.transport.abort()  # no stop, no close frame: the line just drops
    await async_wait_for(lambda: registry.stats.active == 0, timeout_s=15, what="the call to end")
    assert server_tasks(app) == []
    await asyncio.wait_for(caller.closed.wait(), 5)


async def test_a_caller_that_sends_stop_and_hangs_up_at_once_ends_cleanly(
    server: tuple[str, FastAPI], carrier: Carrier
) -> None:
    """The carrier may close the socket right after ``stop``: a normal end, not an error (but
    Pipecat's own close crossing the carrier's, which it logs as one: ``errors_logged``)."""
    url, app = server
    registry = app.state.registry
    with errors_logged() as errors:
        ended = registry.stats.ended
        async with carrier.call(url) as caller:
            await caller.start()
            await caller.silence(0.5)
            await caller.stop()
        await async_wait_for(lambda: registry.stats.ended == ended + 1, timeout_s=10, what="end")
        assert server_tasks(app) == []
    assert errors == []
