"""Behind a real HAProxy (``option forwardfor``, configured like tests/deploy/haproxy.py from
the manifests), one stranger flooding the Twilio webhook cannot get Twilio's calls refused,
nor anyone else's ``/start``.

The layout of the shipped deployment, on loopback: HAProxy connects to ``voice-agent serve``
from 127.0.0.5, standing in for the ingress controller's pod address (the server trusts it as
``server.trusted_proxies``, as the ConfigMap trusts the pod network). The stranger floods
unsigned webhooks and ``/start`` from 127.0.0.2 and claims, in its own ``X-Forwarded-For``, to
be 127.0.0.4; Twilio's signed webhooks come both from 127.0.0.3 and from the stranger's own
address; a browser at 127.0.0.4 asks ``/start`` now and then.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from agent.transports.telephony import twilio_signature
from tests.agent.test_serve import Serve, free_port
from tests.deploy.haproxy import BalancerFacts, HAProxy, haproxy_config
from tests.fakes.twilio_caller import TOKEN

pytestmark = pytest.mark.timeout(120)

PROXY = "127.0.0.5"  # the ingress controller's pod, as the server sees it
STRANGER = "127.0.0.2"
TWILIO = "127.0.0.3"
BROWSER = "127.0.0.4"

FLOOD_S = 3.0
FLOOD_CONNECTIONS = 8
MAX_FLOOD_REQUESTS = 20_000  # a bound on the flood whatever the speed
SIGNED_EVERY_S = 0.1
START_EVERY_S = 0.5
START_LIMITED_WITHIN_S = 30.0
"""The stranger's ``/start`` goes on alone after the flood until it is limited: how many
requests that takes depends on how fast this machine answers (the bucket refills meanwhile)."""


@dataclasses.dataclass
class Front:
    url: str
    port: int


@pytest.fixture
def front(tmp_path: Path, agent_resources: list[dict[str, Any]]) -> Iterator[Front]:
    facts = BalancerFacts.from_manifests(agent_resources)
    # /healthz for the readiness probe: the STT, LLM and TTS that /readyz probes are not part
    # of this test (and no call is started: a webhook answer takes no slot).
    facts = dataclasses.replace(facts, readiness_path="/healthz")
    proxy_port = free_port()
    url = f"http://127.0.0.1:{proxy_port}"
    closed, port = free_port(), free_port()
    env = {
        **facts.settings_env,  # the Deployment's settings (its per-source limits), then:
        "VOICE_AGENT_SERVER__HOST": "127.0.0.1",
        "VOICE_AGENT_SERVER__PORT": str(port),
        "VOICE_AGENT_SERVER__PUBLIC_URL": url,  # what Twilio signs
        "VOICE_AGENT_SERVER__TRUSTED_PROXIES": f'["{PROXY}"]',  # the "pod network"
        "VOICE_AGENT_TWILIO__AUTH_TOKEN": TOKEN,
        "VOICE_AGENT_STT__URL": f"ws://127.0.0.1:{closed}/v1/realtime",
        "VOICE_AGENT_LLM__BASE_URL": "",
        "VOICE_AGENT_TTS__BASE_URL": f"http://127.0.0.1:{closed}",
    }
    serve = Serve(tmp_path, "--port", str(port), env=env)  # the last --port wins
    serve.port = port
    try:
        serve.wait_healthy()
        config = haproxy_config(
            facts,
            port=proxy_port,
            replicas={"r1": serve.port},
            stats_socket=tmp_path / "haproxy.sock",
            source=PROXY,
        )
        with HAProxy(config, tmp_path, tmp_path / "haproxy.sock") as haproxy:
            deadline = time.monotonic() + 30
            while haproxy.states().get("r1") != "UP":
                assert time.monotonic() < deadline, f"r1 never UP: {haproxy.states()}"
                time.sleep(0.2)
            yield Front(url, proxy_port)
    finally:
        serve.kill()


UNSIGNED_BODY = urlencode({"CallSid": "CAflood", "From": "+15550001", "To": "+15550002"})


def stranger_request(port: int, path: str, content_type: str, body: str) -> bytes:
    """A POST claiming, in its own X-Forwarded-For, to come from the browser's address."""
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"X-Forwarded-For: {BROWSER}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n{body}"
    ).encode()


async def flood(port: int, until: float, statuses: Counter[int], starts: Counter[int]) -> None:
    """Keep-alive connections from the stranger's address, each sending back to back: unsigned
    webhooks on most until ``until``, ``/start`` on one until it is first limited."""
    webhook = stranger_request(
        port, "/telephony/twilio", "application/x-www-form-urlencoded", UNSIGNED_BODY
    )
    start = stranger_request(port, "/start", "application/json", "{}")

    async def one_connection(request: bytes, statuses: Counter[int], end: float) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(STRANGER, 0))
        try:
            while (
                time.monotonic() < end
                and statuses[429] < (1 if request is start else MAX_FLOOD_REQUESTS)
                and statuses.total() < MAX_FLOOD_REQUESTS
            ):
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin1").split("\r\n")
                statuses[int(lines[0].split()[1])] += 1
                length = next(
                    int(line.split(":", 1)[1])
                    for line in lines
                    if line.lower().startswith("content-length:")
                )
                await reader.readexactly(length)
        finally:
            writer.close()

    await asyncio.gather(
        one_connection(start, starts, until + START_LIMITED_WITHIN_S),
        *(one_connection(webhook, statuses, until) for _ in range(FLOOD_CONNECTIONS - 1)),
    )


async def signed_webhooks(front: Front, source: str, until: float, answers: list[int]) -> None:
    """Twilio's webhooks for new calls, correctly signed, from ``source``."""
    transport = httpx.AsyncHTTPTransport(local_address=source)
    async with httpx.AsyncClient(transport=transport, timeout=10) as http:
        n = 0
        while time.monotonic() < until:
            n += 1
            form = {"CallSid": f"CA{source[-1]}{n:05d}", "From": "+15550003", "To": "+15550004"}
            url = f"{front.url}/telephony/twilio"
            signature = twilio_signature(url, form, TOKEN)
            response = await http.post(url, data=form, headers={"X-Twilio-Signature": signature})
            assert response.status_code != 200 or "<Stream" in response.text
            answers.append(response.status_code)
            await asyncio.sleep(SIGNED_EVERY_S)


async def browser_starts(front: Front, flood_over: asyncio.Event, answers: list[int]) -> None:
    """The real browser's ``/start``, for as long as the stranger floods in its name."""
    transport = httpx.AsyncHTTPTransport(local_address=BROWSER)
    async with httpx.AsyncClient(transport=transport, timeout=10) as http:
        while not flood_over.is_set():
            answers.append((await http.post(f"{front.url}/start", json={})).status_code)
            await asyncio.sleep(START_EVERY_S)


async def test_a_stranger_flooding_the_webhook_gets_no_real_call_refused(front: Front) -> None:
    flood_statuses: Counter[int] = Counter()
    stranger_starts: Counter[int] = Counter()
    from_twilio: list[int] = []
    from_strangers_address: list[int] = []
    starts: list[int] = []
    started = time.monotonic()
    until = started + FLOOD_S
    flood_over = asyncio.Event()

    async def the_flood() -> None:
        try:
            await flood(front.port, until, flood_statuses, stranger_starts)
        finally:
            flood_over.set()

    await asyncio.gather(
        the_flood(),
        signed_webhooks(front, TWILIO, until, from_twilio),
        signed_webhooks(front, STRANGER, until, from_strangers_address),
        browser_starts(front, flood_over, starts),
    )
    elapsed = time.monotonic() - started
    rate = flood_statuses.total() / FLOOD_S
    print(
        f"\nunsigned flood: {flood_statuses.total()} requests in {FLOOD_S:.0f} s = {rate:.0f}/s "
        f"{dict(flood_statuses)}; signed from Twilio: {Counter(from_twilio)}; signed from the "
        f"stranger's address: {Counter(from_strangers_address)}; the stranger's /start: "
        f"{dict(stranger_starts)} in {elapsed:.1f} s; the browser's /start: {Counter(starts)}"
    )
    assert stranger_starts[429] > 0, "the stranger's /start flood was never limited"
    assert flood_statuses[429] > 0, "the flood was never limited: not a flood"
    assert set(flood_statuses) <= {403, 429}, "an unsigned webhook got an answer"
    refused = [s for s in from_twilio + from_strangers_address if s != 200]
    assert len(from_twilio) >= 10 and len(from_strangers_address) >= 10
    assert not refused, f"signed webhooks refused: {Counter(refused)}"
    assert starts and all(s == 200 for s in starts), f"/start refused: {Counter(starts)}"


def test_a_client_that_is_not_a_trusted_proxy_cannot_choose_its_address(
    tmp_path: Path,
) -> None:
    """``X-Forwarded-For`` is believed from ``server.trusted_proxies`` only: a client that
    connects directly and names a new address in each request still has one bucket (uvicorn
    on its own would believe any loopback peer)."""
    port = free_port()
    env = {
        "VOICE_AGENT_SERVER__HOST": "127.0.0.1",
        "VOICE_AGENT_SERVER__PORT": str(port),
        "VOICE_AGENT_SERVER__START_LOCAL_SERVICES": "false",
        "VOICE_AGENT_SERVER__TRUSTED_PROXIES": f'["{PROXY}"]',
        "VOICE_AGENT_SERVER__REQUESTS_PER_SOURCE_PER_S": "1",
        "VOICE_AGENT_SERVER__REQUEST_BURST_PER_SOURCE": "5",
    }
    serve = Serve(tmp_path, "--port", str(port), env=env)
    serve.port = port
    try:
        serve.wait_healthy()
        with httpx.Client() as http:  # from 127.0.0.1, which uvicorn alone would believe
            statuses = [
                http.post(
                    f"http://127.0.0.1:{port}/start",
                    json={},
                    headers={"X-Forwarded-For": f"198.51.100.{n}"},
                ).status_code
                for n in range(20)
            ]
    finally:
        serve.kill()
    assert statuses[:5] == [200] * 5 and statuses.count(429) >= 13, statuses
