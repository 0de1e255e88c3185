"""Three ``voice-agent serve`` replicas behind a real HAProxy, configured from the Kubernetes
manifests' facts (tests/deploy/haproxy.py): one replica is drained mid-calls and comes back.

The replicas run with the Deployment's ConfigMap, pointed at loopback peers: one offline ASR
server and one speech server for all three, as replicas on Kubernetes share the GPU side
(three copies of the offline recognizer and Piper would not fit this test's CPU budget).
Calls are real: Twilio Media Streams over WebSockets through HAProxy, and a WebRTC peer
(aiortc) whose signalling goes through HAProxy and whose media flows peer to peer.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiortc import RTCSessionDescription

from tests.agent.test_drain import Line
from tests.agent.test_serve import Serve, free_port
from tests.agent.transports.stack import WebRTCClient
from tests.deploy.haproxy import BalancerFacts, HAProxy, haproxy_config
from tests.fakes.speech_server import SpeechServer
from tests.fakes.twilio_caller import TOKEN

pytestmark = pytest.mark.timeout(240)

REPLICAS = ("r1", "r2", "r3")
TWILIO_CALLS = 20
NEW_CALLS = 6


@dataclass
class Replica:
    """One ``voice-agent serve`` process, restartable on the same port (HAProxy's config is
    fixed, as a pod's address behind a Service is not: here the port is the identity)."""

    name: str
    port: int
    workdir: Path
    env: dict[str, str]
    serve: Serve | None = None
    runs: list[Serve] = field(default_factory=list)

    def start(self) -> None:
        run_dir = self.workdir / f"run{len(self.runs)}"
        run_dir.mkdir(parents=True)
        # Serve picks a port of its own; a second --port wins (argparse keeps the last).
        self.serve = Serve(run_dir, "--port", str(self.port), env=self.env)
        self.serve.port = self.port
        self.runs.append(self.serve)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self) -> None:
        for run in self.runs:
            run.kill()


@dataclass
class Cluster:
    facts: BalancerFacts
    replicas: dict[str, Replica]
    haproxy: HAProxy
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def cluster(
    tmp_path: Path, asr_server_url: str, agent_resources: list[dict[str, Any]]
) -> Iterator[Cluster]:
    facts = BalancerFacts.from_manifests(agent_resources)
    with SpeechServer() as speech:
        replicas = {}
        for name in REPLICAS:
            port = free_port()
            env = {
                **facts.settings_env,  # the Deployment's settings, then what differs here:
                "VOICE_AGENT_SERVER__HOST": "127.0.0.1",
                "VOICE_AGENT_SERVER__PORT": str(port),
                "VOICE_AGENT_STT__URL": asr_server_url,
                "VOICE_AGENT_LLM__BASE_URL": "",  # the offline responder
                "VOICE_AGENT_TTS__BASE_URL": speech.base_url,
                "VOICE_AGENT_TWILIO__AUTH_TOKEN": TOKEN,  # the Secret: the same for all
            }
            replicas[name] = Replica(name, port, tmp_path / name, env)
        try:
            for replica in replicas.values():  # all start at once
                replica.start()
            for replica in replicas.values():
                assert replica.serve is not None
                replica.serve.wait_healthy()
            port = free_port()
            config = haproxy_config(
                facts,
                port=port,
                replicas={r.name: r.port for r in replicas.values()},
                stats_socket=tmp_path / "haproxy.sock",
            )
            with HAProxy(config, tmp_path, tmp_path / "haproxy.sock") as haproxy:
                yield Cluster(facts, replicas, haproxy, port)
        finally:
            for replica in replicas.values():
                replica.kill()


Callers = tuple[dict[str, list[Line]], WebRTCClient]


@pytest.fixture
async def callers() -> AsyncIterator[Callers]:
    """The phone lines (by the replica they reached) and the WebRTC peer; whatever the test
    left open is hung up."""
    lines: dict[str, list[Line]] = {}
    webrtc = WebRTCClient()
    try:
        yield lines, webrtc
    finally:
        for line in [line for group in lines.values() for line in group]:
            if not line.closed:
                with contextlib.suppress(Exception):
                    await line.hang_up()
        await webrtc.close()


async def wait_pool(cluster: Cluster, name: str, state: str, timeout_s: float) -> float:
    """Poll HAProxy until replica ``name`` is exactly ``state``; when that happened."""
    deadline = time.monotonic() + timeout_s
    while True:
        current = cluster.haproxy.states()[name]
        if current == state:
            return time.monotonic()
        assert time.monotonic() < deadline, f"{name} stayed {current!r}, never {state!r}"
        await asyncio.sleep(0.05)


async def calls_of(http: httpx.AsyncClient, replica: Replica) -> dict[str, int]:
    counts: dict[str, int] = (await http.get(f"{replica.url}/calls")).json()
    return counts


def replica_of(line: Line, cookie: str) -> str:
    """The replica HAProxy put this call on, from the affinity cookie on the 101 answer."""
    response = line.caller.ws.response
    assert response is not None
    header = response.headers.get("set-cookie", "")
    prefix = f"{cookie}="
    assert header.startswith(prefix), f"no {cookie} cookie on the upgrade answer: {header!r}"
    return header[len(prefix) :].split(";")[0]


async def dial(cluster: Cluster, lines: dict[str, list[Line]], sid: str) -> str:
    line = await Line.dial(cluster.port, sid)
    name = replica_of(line, cluster.facts.affinity_cookie)
    lines.setdefault(name, []).append(line)
    return name


async def wait_total(http: httpx.AsyncClient, replicas: list[Replica], total: int) -> None:
    for _ in range(200):
        counts = [(await calls_of(http, r))["active"] for r in replicas]
        if sum(counts) == total:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"expected {total} calls in progress, the replicas have {counts}")


def candidate_of(sdp: str) -> dict[str, Any]:
    """The offer's first ICE candidate as a trickle PATCH carries it."""
    line = next(line for line in sdp.splitlines() if line.startswith("a=candidate:"))
    return {"candidate": line[2:], "sdp_mid": "0", "sdp_mline_index": 0}


async def test_a_replica_drains_behind_haproxy_and_no_call_is_lost(
    cluster: Cluster, callers: Callers
) -> None:
    facts, replicas = cluster.facts, cluster.replicas
    lines, webrtc = callers
    for name in REPLICAS:
        await wait_pool(cluster, name, "UP", timeout_s=facts.check_interval_s * (facts.rise + 2))
    async with (
        httpx.AsyncClient(base_url=cluster.url, timeout=20) as browser,  # keeps its cookies
        httpx.AsyncClient(timeout=10) as direct,
    ):
        # ---- what the Ingress keeps inside stays inside
        for inside in ("/metrics", "/calls", "/readyz"):
            assert (await browser.get(inside)).status_code == 404, inside
        assert (await browser.get("/")).status_code == 200  # the playground page

        # ---- a WebRTC call: /start, then its follow-ups must reach the same replica
        start = await browser.post("/start")
        assert start.status_code == 200, start.text
        session = start.json()["sessionId"]
        home = browser.cookies[facts.affinity_cookie]
        await webrtc.pc.setLocalDescription(await webrtc.pc.createOffer())
        offer = webrtc.pc.localDescription
        path = f"/sessions/{session}/api/offer"
        answered = await browser.post(path, json={"sdp": offer.sdp, "type": offer.type})
        assert answered.status_code == 200, answered.text
        answer = answered.json()
        await webrtc.pc.setRemoteDescription(RTCSessionDescription(answer["sdp"], answer["type"]))
        trickle = {"pc_id": answer["pc_id"], "candidates": [candidate_of(offer.sdp)]}
        follow_ups = [(await browser.patch(path, json=trickle)).status_code for _ in range(3)]
        assert follow_ups == [200, 200, 200]
        strangers = []  # the same request without the cookie: round robin, other replicas
        for _ in range(3):
            async with httpx.AsyncClient(base_url=cluster.url) as stranger:
                strangers.append((await stranger.patch(path, json=trickle)).status_code)
        assert 404 in strangers, f"without affinity every PATCH found the session: {strangers}"
        for _ in range(200):
            if webrtc.pc.connectionState == "connected":
                break
            await asyncio.sleep(0.1)
        assert webrtc.pc.connectionState == "connected"
        victim = replicas[home]

        # ---- 20 phone calls, spread by HAProxy
        for i in range(TWILIO_CALLS):
            await dial(cluster, lines, f"{i:04d}")
        await wait_total(direct, list(replicas.values()), TWILIO_CALLS + 1)
        per_replica = {name: len(lines.get(name, [])) for name in REPLICAS}
        for replica in replicas.values():
            active = (await calls_of(direct, replica))["active"]
            assert active == per_replica[replica.name] + (replica is victim), (active, per_replica)
        assert all(per_replica.values()), f"a replica got no call: {per_replica}"

        # ---- SIGTERM the WebRTC call's replica, mid-calls
        assert victim.serve is not None
        victims_lines = list(lines.get(victim.name, []))
        started_before = (await calls_of(direct, victim))["started"]
        signalled = time.monotonic()
        victim.serve.process.send_signal(signal.SIGTERM)
        left_pool = await wait_pool(cluster, victim.name, "DOWN", timeout_s=30) - signalled
        assert left_pool <= facts.check_interval_s + 1.0, (
            f"{victim.name} left the pool {left_pool:.2f} s after SIGTERM "
            f"(health checks every {facts.check_interval_s} s)"
        )
        assert (await direct.get(f"{victim.url}/readyz")).json()["status"] == "draining"
        # A draining replica still gets its own session's follow-ups (option persist) …
        assert (await browser.patch(path, json=trickle)).status_code == 200
        # … and no new call: they go to the others.
        new_homes = Counter([await dial(cluster, lines, f"N{i:03d}") for i in range(NEW_CALLS)])
        assert victim.name not in new_homes, new_homes
        await wait_total(direct, list(replicas.values()), TWILIO_CALLS + 1 + NEW_CALLS)
        assert (await calls_of(direct, victim))["started"] == started_before
        await asyncio.sleep(1.0)  # the drained replica's calls go on
        assert not any(line.closed for line in victims_lines)
        assert webrtc.pc.connectionState == "connected"

        # ---- its calls end as callers hang up; then it exits by itself, cleanly
        for line in victims_lines:
            await line.hang_up()
        lines[victim.name] = []
        await webrtc.close()
        exit_code = await asyncio.to_thread(victim.serve.wait, 60)
        drained = time.monotonic() - signalled
        assert exit_code == 0, victim.serve.text()[-4000:]
        assert "drained in" in victim.serve.text()
        lost = [line for name in lines for line in lines[name] if line.closed]
        assert not lost, f"{len(lost)} calls on the other replicas ended without hanging up"

        # ---- started again, it rejoins the pool and takes calls again
        restarted = time.monotonic()
        victim.start()
        await asyncio.to_thread(victim.serve.wait_healthy)
        rejoined = await wait_pool(cluster, victim.name, "UP", timeout_s=30) - restarted
        again = Counter([await dial(cluster, lines, f"A{i:03d}") for i in range(NEW_CALLS)])
        assert again[victim.name] >= 1, again
        await wait_total(direct, [victim], again[victim.name])

        all_lines = [line for name in lines for line in lines[name]]
        lost += [line for line in all_lines if line.closed]
        assert not lost
        for line in all_lines:
            await line.hang_up()
    print(
        f"\nhaproxy drain: calls per replica {per_replica} (+1 WebRTC on {victim.name}); "
        f"{victim.name} left the pool {left_pool:.2f} s after SIGTERM (checks every "
        f"{facts.check_interval_s} s); new calls while it drained went to {dict(new_homes)}; "
        f"drained and exited {drained:.1f} s after SIGTERM; back in the pool {rejoined:.1f} s "
        f"after its restart, then took {again[victim.name]} of {NEW_CALLS} new calls; "
        f"calls lost: {len(lost)}"
    )
