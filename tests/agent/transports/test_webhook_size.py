"""A carrier webhook larger than a form ever is gets 413 before it costs the server memory,
whether it declares its length or comes chunked; the server answers the next webhook as
usual."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from urllib.parse import urlencode

import httpx
import pytest

from agent.config import load_settings
from agent.transports.telephony import MAX_WEBHOOK_BYTES, twilio_signature
from tests.agent.transports.stack import running_server
from tests.fakes.twilio_caller import TOKEN

FORM = {"CallSid": "CA0001", "From": "+15550100", "To": "+15550199"}


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    settings = load_settings(
        "default",
        overrides={"server": {"start_local_services": False}, "twilio": {"auth_token": TOKEN}},
    )
    with running_server(settings) as (base, _app):
        yield f"{base}/telephony/twilio"


async def chunks(body: bytes, size: int = 4096) -> AsyncIterator[bytes]:
    """``body`` as a chunked upload (no Content-Length)."""
    for at in range(0, len(body), size):
        yield body[at : at + size]


def signed(url: str, form: dict[str, str]) -> dict[str, str]:
    return {
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Twilio-Signature": twilio_signature(url, form, TOKEN),
    }


async def test_a_declared_oversized_body_is_refused_unread(url: str) -> None:
    body = b"CallSid=CA1&Pad=" + b"x" * MAX_WEBHOOK_BYTES
    async with httpx.AsyncClient() as http:
        response = await http.post(url, content=body, headers=signed(url, FORM))
    assert response.status_code == 413
    assert "too large" in response.text


async def test_a_chunked_oversized_body_is_refused_at_the_cap(url: str) -> None:
    form = dict(FORM, Pad="x" * (4 * MAX_WEBHOOK_BYTES))
    async with httpx.AsyncClient() as http:
        request = http.build_request(
            "POST", url, content=chunks(urlencode(form).encode()), headers=signed(url, form)
        )
        assert "content-length" not in request.headers
        assert request.headers["transfer-encoding"] == "chunked"
        response = await http.send(request)
        assert response.status_code == 413
        after = await http.post(url, data=FORM, headers=signed(url, FORM))
    assert after.status_code == 200  # the next webhook is answered as usual


async def test_a_chunked_form_under_the_cap_is_verified_and_answered(url: str) -> None:
    """The body read to check its size is the one the signature and the answer read."""
    async with httpx.AsyncClient() as http:
        good = await http.post(
            url, content=chunks(urlencode(FORM).encode(), 7), headers=signed(url, FORM)
        )
        forged = await http.post(
            url,
            content=chunks(urlencode(dict(FORM, From="+15550666")).encode(), 7),
            headers=signed(url, FORM),
        )
    assert good.status_code == 200
    assert "<Stream" in good.text
    assert forged.status_code == 403
