"""Per-source limits: one address cannot flood offers or webhooks; others are not affected."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from agent.config import Settings, load_settings
from agent.rate_limit import PerSourceLimiter
from agent.server import create_app
from agent.transports.telephony import twilio_signature
from tests.fakes.telnyx_caller import PUBLIC_KEY as TELNYX_PUBLIC_KEY
from tests.fakes.twilio_caller import TOKEN as TWILIO_TOKEN


def test_a_source_gets_its_burst_then_its_rate_and_others_their_own() -> None:
    now = [0.0]
    limiter = PerSourceLimiter(rate_per_s=2, burst=3, clock=lambda: now[0])
    assert [limiter.allow("a") for _ in range(4)] == [True, True, True, False]
    assert limiter.allow("b")  # another address has its own bucket
    now[0] += 1.0
    assert [limiter.allow("a") for _ in range(3)] == [True, True, False]


def test_the_table_of_sources_is_bounded() -> None:
    limiter = PerSourceLimiter(rate_per_s=1, burst=1, max_sources=100)
    for n in range(1000):
        limiter.allow(f"10.0.{n // 256}.{n % 256}")
    assert len(limiter._buckets) == 100


def limited_to_5_then_1_per_s(**sections: dict[str, Any]) -> Settings:
    """The default profile with a small per-source limit (a burst of 5, then 1 a second)."""
    server = {
        "start_local_services": False,
        "requests_per_source_per_s": 1,
        "request_burst_per_source": 5,
    }
    return load_settings("default", overrides={"server": server, **sections})


@pytest.mark.parametrize(
    "method, path, body",
    [
        ("POST", "/api/offer", {"sdp": "v=0", "type": "offer"}),
        ("POST", "/start", {}),
        ("POST", "/telephony/twilio", None),
        ("POST", "/telephony/telnyx", None),
    ],
)
async def test_a_flood_from_one_address_gets_429(method: str, path: str, body: object) -> None:
    app = create_app(limited_to_5_then_1_per_s(telnyx={"public_key": TELNYX_PUBLIC_KEY}))
    transport = httpx.ASGITransport(app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        statuses = [(await http.request(method, path, json=body)).status_code for _ in range(30)]
    assert statuses.count(429) >= 20  # 5 in the burst, then about one a second
    assert 429 not in statuses[:5]


async def test_signed_webhooks_are_answered_from_a_source_the_limit_has_stopped() -> None:
    """The signature is checked first: unsigned requests drain the source's bucket, Twilio's
    signed ones (from the same proxy address) are answered all the same."""
    settings = limited_to_5_then_1_per_s(twilio={"auth_token": TWILIO_TOKEN})
    transport = httpx.ASGITransport(create_app(settings))
    url = "http://t/telephony/twilio"
    async with httpx.AsyncClient(transport=transport) as http:
        unsigned = [(await http.post(url, data={"CallSid": "CAx"})).status_code for _ in range(20)]
        signed = []
        for n in range(20):
            form = {"CallSid": f"CA{n}"}
            signature = twilio_signature(url, form, TWILIO_TOKEN)
            response = await http.post(url, data=form, headers={"X-Twilio-Signature": signature})
            signed.append(response.status_code)
    assert unsigned[:5] == [403] * 5 and unsigned.count(429) >= 14
    assert signed == [200] * 20
