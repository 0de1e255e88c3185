"""The app's own routes: health, readiness, the playground files, WebRTC request errors.

Readiness is probed against real loopback peers: a WebSocket server that greets with the
realtime protocol's ``session.created``, an OpenAI-style ``/models`` and a speech server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from pipecat.pipeline.worker import PipelineWorker
from pipecat.transports.base_transport import BaseTransport

from agent.calls import CallTurn
from agent.config import Settings, load_settings
from agent.server import PLAYGROUND_DIR, create_app
from tests.agent.transports.stack import running_server
from tests.fakes.chat_server import ChatServer
from tests.fakes.realtime_peer import RealtimePeer

VIDEO_ONLY_SDP = (
    "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n"
    "m=video 9 UDP/TLS/RTP/SAVPF 96\r\nc=IN IP4 0.0.0.0\r\na=rtpmap:96 VP8/90000\r\n"
)


def _never_called(transport: BaseTransport, settings: Settings, *, call_id: str) -> PipelineWorker:
    raise AssertionError("no call should start in these tests")


@pytest.fixture
async def stt_peer() -> AsyncIterator[str]:
    async with RealtimePeer(model=None) as peer:  # greets with session.created, as vLLM does
        yield peer.url


@pytest.fixture(scope="module")
def http_peer() -> Iterator[str]:
    """An OpenAI-compatible server answering ``GET /v1/models`` (the LLM and TTS probes)."""
    with ChatServer() as server:
        yield server.url


def settings_for(stt_url: str, llm_url: str | None, tts_url: str, **server: Any) -> Settings:
    return load_settings(
        "default",
        overrides={
            "server": {"start_local_services": False, **server},
            "stt": {"url": stt_url},
            "llm": {"kind": "openai", "base_url": llm_url, "model": "m"}
            if llm_url
            else {"kind": "echo"},
            "tts": {"kind": "openai", "base_url": tts_url},
        },
    )


async def test_healthz_and_readyz_when_everything_answers(stt_peer: str, http_peer: str) -> None:
    settings = settings_for(stt_peer, f"{http_peer}/v1", f"{http_peer}/v1")
    app = create_app(settings, pipeline=_never_called)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://t") as http:
        health = await http.get("/healthz")
        assert health.status_code == 200
        assert health.json()["calls"]["active"] == 0
        ready = await http.get("/readyz")
    assert ready.status_code == 200, ready.text
    body = ready.json()
    assert body["status"] == "ready"
    assert {k: v["ok"] for k, v in body["components"].items()} == {
        "stt": True,
        "llm": True,
        "tts": True,
    }


async def test_readyz_is_503_and_names_what_is_down(http_peer: str) -> None:
    dead = "ws://127.0.0.1:9/v1/realtime"  # discard port: nothing listens
    settings = settings_for(dead, "http://127.0.0.1:9/v1", f"{http_peer}/v1")
    app = create_app(settings, pipeline=_never_called)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://t") as http:
        ready = await http.get("/readyz")
    assert ready.status_code == 503
    assert sorted(ready.json()["down"]) == ["llm", "stt"]
    assert ready.json()["components"]["tts"]["ok"] is True


async def test_the_echo_responder_counts_as_ready_and_is_named_echo(
    stt_peer: str, http_peer: str
) -> None:
    app = create_app(settings_for(stt_peer, None, f"{http_peer}/v1"), pipeline=_never_called)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://t") as http:
        ready = await http.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["components"]["llm"]["detail"].startswith("echo")


async def test_readyz_is_503_full_at_max_calls_and_ready_again_when_a_slot_frees(
    stt_peer: str, http_peer: str
) -> None:
    settings = settings_for(stt_peer, None, f"{http_peer}/v1", max_calls=1)
    app = create_app(settings, pipeline=_never_called)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://t") as http:
        call = app.state.registry.reserve("twilio")
        full = await http.get("/readyz")
        call.release()
        ready = await http.get("/readyz")
    assert full.status_code == 503
    assert full.json()["status"] == "full" and full.json()["calls"]["active"] == 1
    assert ready.status_code == 200, ready.text


def test_the_playground_is_served_offline() -> None:
    settings = settings_for("ws://127.0.0.1:9/v1/realtime", None, "http://127.0.0.1:9")
    with running_server(settings, pipeline=_never_called) as (url, _app):
        for path in ("/", "/client"):
            page = httpx.get(url + path)
            assert page.status_code == 200 and "<title>Voice agent playground</title>" in page.text
        script = httpx.get(url + "/playground/app.js")
        assert script.status_code == 200 and "user-transcription" in script.text
        assert httpx.get(url + "/playground/style.css").status_code == 200
    # Nothing the page loads comes from elsewhere.
    for name in ("index.html", "app.js", "style.css"):
        text = (PLAYGROUND_DIR / name).read_text()
        assert "http://" not in text and "https://" not in text, name


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("POST", "/api/offer", {"type": "offer"}, 400),
        ("POST", "/api/offer", {"sdp": "v=0", "type": "answer"}, 400),
        ("POST", "/api/offer", ["not", "an", "object"], 400),
        ("PATCH", "/api/offer", {"pc_id": "nope", "candidates": []}, 404),
        ("PATCH", "/api/offer", {"candidates": "x"}, 400),
        ("POST", "/sessions/unknown/api/offer", {"sdp": "v=0", "type": "offer"}, 404),
        ("POST", "/api/offer", {"sdp": "v=0", "type": "offer"}, 400),
        ("POST", "/api/offer", {"sdp": "hello, this is not SDP", "type": "offer"}, 400),
        ("POST", "/api/offer", {"sdp": VIDEO_ONLY_SDP, "type": "offer"}, 400),
        ("POST", "/api/offer", {"sdp": "v=0\r\n" + "a=x\r\n" * 20_000, "type": "offer"}, 400),
        ("PATCH", "/api/offer", {"pc_id": "p", "candidates": ["not an object"]}, 400),
        ("PATCH", "/api/offer", {"pc_id": "p", "candidates": [{"sdp_mline_index": "x"}]}, 400),
    ],
)
async def test_bad_webrtc_requests_get_clear_errors_and_start_nothing(
    method: str, path: str, body: Any, status: int
) -> None:
    settings = settings_for("ws://127.0.0.1:9/v1/realtime", None, "http://127.0.0.1:9")
    app = create_app(settings, pipeline=_never_called)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://t") as http:
        response = await http.request(method, path, json=body)
    assert response.status_code == status, response.text
    assert app.state.registry.stats.started == 0
    for python_speak in ("Traceback", "object has no attribute", "Error(", "invalid literal"):
        assert python_speak not in response.text  # errors say what to send, not what broke


async def test_start_returns_a_session_and_the_configured_ice_servers() -> None:
    """Static TURN credentials only with the explicit option (see test_turn_credentials)."""
    settings = settings_for(
        "ws://127.0.0.1:9/v1/realtime",
        None,
        "http://127.0.0.1:9",
        ice_servers=[
            "stun:stun.example.org:3478",
            {
                "urls": "turn:turn.example.org:3478",
                "username": "u",
                "credential": "p",
                "static_credentials": True,
            },
        ],
    )
    app = create_app(settings, pipeline=_never_called)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://t") as http:
        start = await http.post("/start", json={})
    assert start.status_code == 200
    assert start.json()["sessionId"]
    assert start.json()["iceConfig"] == {
        "iceServers": [
            {"urls": "stun:stun.example.org:3478"},
            {"urls": "turn:turn.example.org:3478", "username": "u", "credential": "p"},
        ]
    }


async def test_the_operator_api_is_off_without_a_token() -> None:
    settings = settings_for("ws://127.0.0.1:9/v1/realtime", None, "http://127.0.0.1:9")
    app = create_app(settings, pipeline=_never_called)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://t") as http:
        response = await http.get("/calls/webrtc-1-abc")
    assert response.status_code == 404 and "server.api_token" in response.json()["detail"]


async def test_a_calls_transcript_is_served_to_the_operator_only() -> None:
    settings = settings_for(
        "ws://127.0.0.1:9/v1/realtime", None, "http://127.0.0.1:9", api_token="s3cret"
    )
    app = create_app(settings, pipeline=_never_called)
    registry = app.state.registry
    ended, running = registry.reserve("twilio"), registry.reserve("webrtc")
    ended.turns.append(CallTurn(index=1, user=["what time is it"], bot=["It is noon."]))
    ended.release()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://t") as http:
        stranger = await http.get(f"/calls/{ended.id}", headers={"Authorization": "Bearer no"})
        anonymous = await http.get(f"/calls/{ended.id}")
        # Header bytes outside ASCII (Starlette reads them as Latin-1): a wrong token, no 500.
        unicode = await http.get(
            f"/calls/{ended.id}", headers={"Authorization": "Bearer s3crét☃".encode()}
        )
        operator = {"Authorization": "Bearer s3cret"}
        record = (await http.get(f"/calls/{ended.id}", headers=operator)).json()
        live = (await http.get(f"/calls/{running.id}", headers=operator)).json()
        unknown = await http.get("/calls/twilio-99-nothing", headers=operator)
    assert stranger.status_code == anonymous.status_code == unicode.status_code == 401
    assert record["user_transcript"] == ["what time is it"]
    assert record["bot_transcript"] == ["It is noon."]
    assert not record["active"] and record["ended_at"] >= record["started_at"]
    assert live["active"] and live["ended_at"] is None
    assert unknown.status_code == 404
    running.release()
