"""The operator's side of call analytics on a real server: the live event stream of a call,
the post-call summary from a real OpenAI-compatible server (:class:`ChatServer`, queued and
retried), record search by text and time, and the token in front of all of it."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets
from fastapi import FastAPI

from agent.calls import Call
from tests.agent.transports.stack import async_wait_for, running_server
from tests.agent.transports.test_listen_only import (
    AGENT_SAYS,
    CALLER_SAYS,
    OPERATOR,
    analytics_settings,
    heard,
)
from tests.conftest import requires_espeak
from tests.fakes.both_tracks_caller import BothTracksStream, ring, timeline
from tests.fakes.chat_server import ChatServer
from tests.fakes.speech_server import SpeechServer
from tests.fakes.twilio_caller import ulaw_speech

pytestmark = [requires_espeak, pytest.mark.timeout(120)]

AUTH = {"Authorization": f"Bearer {OPERATOR}"}
ANALYSIS = {
    "summary": "The caller asked about the weather in Paris; the agent will call back.",
    "reason": "weather in Paris",
    "sentiment": {"caller": "neutral", "agent": "positive"},
}


class Model:
    """The chat server's answers, in order (then the valid analysis, again and again)."""

    def __init__(self) -> None:
        self.answers: list[str] = []

    def __call__(self, messages: list[dict[str, Any]]) -> str:
        return self.answers.pop(0) if self.answers else json.dumps(ANALYSIS)


@pytest.fixture(scope="module")
def stack(
    asr_server_url: str, asr_model_name: str
) -> Iterator[tuple[str, FastAPI, ChatServer, Model]]:
    model = Model()
    with SpeechServer(voice="espeak") as tts, ChatServer(script=model) as chat:
        settings = analytics_settings(
            asr_server_url, asr_model_name, tts.url, summary_prompt_version="test-v7"
        )
        settings.llm.base_url = chat.base_url
        settings.llm.model = "chat-server"
        with running_server(settings) as (url, app):
            app.state.analytics.post_call._backoff_s = 0.05  # retries without the wait
            yield url, app, chat, model


async def call_with_two_speakers(url: str, app: FastAPI, call_sid: str) -> Call:
    """A forked call: the caller asks, the agent answers; returns once it has ended."""
    registry = app.state.registry
    forked = await ring(url, "twilio", call_sid)
    tracks = timeline(
        [(0.4, "inbound", ulaw_speech(CALLER_SAYS)), (3.6, "outbound", ulaw_speech(AGENT_SAYS))],
        total_s=7.0,
    )
    async with websockets.connect(forked.url) as ws:
        stream = BothTracksStream(ws, "twilio", call_sid)
        await stream.start(forked.parameters)
        await async_wait_for(
            lambda: any(c.attributes.get("call_sid") == call_sid for c in registry.calls()),
            timeout_s=5,
            what="the call's slot",
        )
        (call,) = [c for c in registry.calls() if c.attributes.get("call_sid") == call_sid]
        await stream.play(tracks)
        await stream.stop()
        await async_wait_for(lambda: call.released, timeout_s=15, what="the call to end")
        await stream.close()
    return call


async def test_a_call_is_watched_live_then_summarized_with_model_and_prompt_version(
    stack: tuple[str, FastAPI, ChatServer, Model],
) -> None:
    url, app, chat, _model = stack
    events: list[dict[str, Any]] = []

    async def watch() -> None:
        async with httpx.AsyncClient(timeout=60) as http:
            listed: list[dict[str, Any]] = []
            while not listed:
                listed = (await http.get(url + "/analytics/api/calls", headers=AUTH)).json()[
                    "calls"
                ]
                await asyncio.sleep(0.05)
            path = f"/analytics/api/calls/{listed[0]['id']}/live"
            async with http.stream("GET", url + path, headers=AUTH) as response:
                assert response.headers["content-type"].startswith("application/x-ndjson")
                async for line in response.aiter_lines():
                    if line.strip():
                        events.append(json.loads(line))

    watching = asyncio.create_task(watch())
    call = await call_with_two_speakers(url, app, "CA-live")
    await asyncio.wait_for(watching, 30)  # the stream ends once the summary is in

    kinds = [e["type"] for e in events]
    assert kinds[0] == "snapshot" and kinds[-1] == "analysis"
    assert kinds.index("ended") < kinds.index("analysis")
    speech = [(e["speaker"], e["state"]) for e in events if e["type"] == "speech"]
    assert ("caller", "started") in speech and ("agent", "stopped") in speech
    assert {e["speaker"] for e in events if e["type"] == "interim"} == {"caller", "agent"}
    finals = [(e["speaker"], e["text"]) for e in events if e["type"] == "utterance"]
    assert [who for who, _ in finals] == ["caller", "agent"], finals
    assert heard(finals[0][1], CALLER_SAYS) and heard(finals[1][1], AGENT_SAYS), finals

    analysis = call.as_record()["analysis"]
    assert analysis is not None and events[-1]["analysis"] == analysis
    assert {k: analysis[k] for k in ANALYSIS} == ANALYSIS
    assert analysis["model"] == "chat-server" and analysis["prompt_version"] == "test-v7"
    (request,) = [r for r in chat.requests if "caller:" in r["messages"][-1]["content"]]
    transcript = request["messages"][-1]["content"]
    assert f"caller: {finals[0][1]}" in transcript and f"agent: {finals[1][1]}" in transcript
    assert transcript.lower().index("caller:") < transcript.lower().index("agent:")


async def test_a_failed_summary_is_retried_off_the_calls_path(
    stack: tuple[str, FastAPI, ChatServer, Model],
) -> None:
    url, app, _chat, model = stack
    model.answers = ["I cannot answer in JSON today.", '{"summary": "half"}']
    call = await call_with_two_speakers(url, app, "CA-retry")
    assert call.analysis is None or call.analysis.get("attempts") == 3  # the call never waited
    await async_wait_for(lambda: call.analysis is not None, timeout_s=20, what="the summary")
    assert call.analysis is not None and call.analysis["attempts"] == 3
    assert call.analysis["reason"] == ANALYSIS["reason"]


async def test_records_are_found_by_text_and_time_range(
    stack: tuple[str, FastAPI, ChatServer, Model],
) -> None:
    url, app, _chat, _model = stack
    before = time.time()
    call = await call_with_two_speakers(url, app, "CA-search")
    after = time.time()

    async def search(**params: Any) -> list[str]:
        async with httpx.AsyncClient() as http:
            response = await http.get(url + "/analytics/api/records", params=params, headers=AUTH)
        assert response.status_code == 200
        return [r["id"] for r in response.json()["records"]]

    assert call.id in await search(q="PARIS today", since=before, until=after)
    assert call.id in await search(q="call me back")  # the agent's words too
    assert call.id not in await search(q="a word nobody said")
    assert call.id not in await search(q="paris", since=after + 1)
    assert call.id not in await search(q="paris", until=before - 60)


async def test_the_operator_api_and_page_need_the_token(
    stack: tuple[str, FastAPI, ChatServer, Model],
) -> None:
    url, _app, _chat, _model = stack
    async with httpx.AsyncClient() as http:
        page = await http.get(url + "/analytics")
        for path in (
            "/analytics/api/calls",
            "/analytics/api/records",
            "/analytics/api/calls/x/live",
        ):
            assert (await http.get(url + path)).status_code == 401
            wrong = {"Authorization": "Bearer not-it"}
            assert (await http.get(url + path, headers=wrong)).status_code == 401
        missing = await http.get(url + "/analytics/api/calls/nope/live", headers=AUTH)
    assert page.status_code == 200 and "Call analytics" in page.text  # the page holds no data
    assert missing.status_code == 404
