"""A Twilio stream token opens one stream, of one call, for a minute; a call has one stream.

The signed webhook hands the token over in its TwiML; before, it was HMAC(CallSid): it never
expired, could be replayed, and a second stream on a live call got its audio and its call
control (transfer). Real server, real sockets, a caller speaking Twilio's protocol.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest
import websockets
from fastapi import FastAPI

from agent.transports.stream_tokens import StreamTokens
from agent.transports.telephony import twilio_signature
from tests.agent.transports.stack import async_wait_for, phone_server
from tests.fakes.twilio_caller import TOKEN, TwilioCaller

pytestmark = pytest.mark.timeout(60)

FORM = {"CallSid": "CA0042", "AccountSid": "AC0001", "From": "+15550001", "To": "+15550002"}


@pytest.fixture(scope="module")
def server(asr_server_url: str, asr_model_name: str) -> Iterator[tuple[str, FastAPI]]:
    with phone_server(asr_server_url, asr_model_name, max_calls=4) as running:
        yield running


async def webhook_token(url: str) -> str:
    """What Twilio gets from our signed webhook: the TwiML's stream token."""
    signature = twilio_signature(url + "/telephony/twilio", FORM, TOKEN)
    async with httpx.AsyncClient() as http:
        response = await http.post(
            url + "/telephony/twilio", data=FORM, headers={"X-Twilio-Signature": signature}
        )
    assert response.status_code == 200
    return response.text.split('<Parameter name="token" value="')[1].split('"')[0]


async def open_stream(url: str, token: str) -> tuple[websockets.ClientConnection, TwilioCaller]:
    ws = await websockets.connect(url.replace("http://", "ws://") + "/telephony/twilio/ws")
    caller = TwilioCaller(ws, FORM["CallSid"])
    await caller.start(token)
    return ws, caller


async def refused(url: str, token: str) -> str:
    """The close reason of a stream that must be refused (1008)."""
    ws, caller = await open_stream(url, token)
    await asyncio.wait_for(caller.closed.wait(), 5)
    await caller.close()
    assert ws.close_code == 1008, (ws.close_code, ws.close_reason)
    return ws.close_reason or ""


async def test_a_token_opens_one_stream_and_a_call_has_one_stream(
    server: tuple[str, FastAPI],
) -> None:
    url, app = server
    registry = app.state.registry
    token = await webhook_token(url)
    ws, caller = await open_stream(url, token)
    await async_wait_for(lambda: registry.stats.active == 1, timeout_s=5, what="the call")
    # A replayed token, and a fresh valid one while the call's stream is open: both refused,
    # neither takes a slot.
    assert await refused(url, token) == "unauthorized stream"
    assert await refused(url, await webhook_token(url)) == "this call has a stream already"
    assert registry.stats.active == 1
    await caller.stop()
    await asyncio.wait_for(caller.closed.wait(), 10)
    await caller.close()
    await ws.close()
    await async_wait_for(lambda: registry.stats.active == 0, timeout_s=10, what="the call to end")
    assert await refused(url, token) == "unauthorized stream"  # still used up


async def test_a_token_older_than_a_minute_is_refused(server: tuple[str, FastAPI]) -> None:
    url, _app = server
    stale = StreamTokens(TOKEN, purpose="twilio-stream", clock=lambda: 0.0).issue("CA0042")
    assert await refused(url, stale) == "unauthorized stream"
