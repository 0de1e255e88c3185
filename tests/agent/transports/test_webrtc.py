"""WebRTC calls end to end: a real aiortc peer talks to the real voice-agent pipeline.

The server runs the product pipeline (Silero VAD → Voxtral-protocol STT against the offline
ASR server → offline responder → OpenAI-compatible TTS) on loopback; the client speaks an
espeak question at real-time pace and must hear an answer and see its words transcribed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest
from fastapi import FastAPI

from tests.agent.fastpath.test_audio_jitter import BUFFER
from tests.agent.transports.stack import (
    CLIENT_RATE,
    WebRTCClient,
    async_wait_for,
    open_sockets,
    running_server,
    server_tasks,
    stack_settings,
)
from tests.conftest import requires_espeak
from tests.fakes.speech import speech_at, words
from tests.fakes.speech_server import SpeechServer

pytestmark = [requires_espeak, pytest.mark.timeout(120)]

QUESTION = "what is the weather like in paris today"


@pytest.fixture(scope="module")
def tts_url() -> Iterator[str]:
    with SpeechServer(voice="espeak") as tts:
        yield tts.url


@pytest.fixture(scope="module")
def server(asr_server_url: str, asr_model_name: str, tts_url: str) -> Iterator[tuple[str, FastAPI]]:
    settings = stack_settings(
        asr_url=asr_server_url, asr_model=asr_model_name, tts_url=tts_url, max_calls=1
    )
    with running_server(settings) as running:
        yield running


async def test_a_spoken_question_gets_a_spoken_answer(server: tuple[str, FastAPI]) -> None:
    url, app = server
    registry = app.state.registry
    client = WebRTCClient()
    try:
        response = await client.connect(url)
        assert response.status_code == 200, response.text
        await async_wait_for(lambda: client.frames > 0, timeout_s=15, what="audio from the bot")
        await asyncio.sleep(0.5)
        client.mic.say(speech_at(QUESTION, CLIENT_RATE))
        await async_wait_for(
            lambda: client.loud_frames > 25, timeout_s=30, what="the bot's spoken answer"
        )
        await async_wait_for(
            lambda: any(m["data"].get("final") for m in client.rtvi("user-transcription")),
            timeout_s=10,
            what="a final user-transcription RTVI message",
        )
        live = registry.calls()
        assert len(live) == 1 and live[0].kind == "webrtc"
        heard = " ".join(live[0].user_transcript)
        assert {"weather", "paris"} <= set(words(heard)), heard
        await async_wait_for(  # what was played, not what was generated: let a sentence play
            lambda: bool(live[0].bot_transcript), timeout_s=15, what="a sentence played"
        )
    finally:
        await client.close()
    await async_wait_for(lambda: registry.stats.active == 0, timeout_s=15, what="the call to end")
    assert registry.recent()[-1].bot_transcript, "the bot said nothing"


async def test_over_the_limit_an_offer_gets_503_and_no_peer(server: tuple[str, FastAPI]) -> None:
    url, app = server
    registry = app.state.registry
    first, second = WebRTCClient(), WebRTCClient()
    try:
        assert (await first.connect(url)).status_code == 200
        refused_before = registry.stats.refused
        response = await second.connect(url)
        assert response.status_code == 503
        assert "limit of 1 concurrent calls" in response.json()["error"]
        async with httpx.AsyncClient() as http:
            start = await http.post(url + "/start", json={})
        assert start.status_code == 503 and "error" in start.json()
        assert registry.stats.refused == refused_before + 1
        assert registry.stats.active == 1
    finally:
        await first.close()
        await second.close()
    await async_wait_for(lambda: registry.stats.active == 0, timeout_s=15, what="the call to end")


async def test_a_client_that_vanishes_mid_sentence_releases_everything(
    server: tuple[str, FastAPI],
) -> None:
    url, app = server
    registry = app.state.registry
    sockets_before = open_sockets()
    ended_before = registry.stats.ended
    client = WebRTCClient()
    try:
        assert (await client.connect(url)).status_code == 200
        await async_wait_for(lambda: client.frames > 0, timeout_s=15, what="the call to connect")
        client.mic.say(speech_at("i would like to book a table for two people", CLIENT_RATE))
        await asyncio.sleep(1.0)  # mid-sentence
        assert registry.stats.active == 1
        assert server_tasks(app), "the leftover check must see a live call's tasks"
        client.pinging = False  # the tab freezes: no keep-alive, no audio, no goodbye
        client.mic.silent = True
        await async_wait_for(
            lambda: registry.stats.active == 0, timeout_s=20, what="the server to end the call"
        )
        assert registry.stats.ended == ended_before + 1
        assert server_tasks(app) == [], "tasks left on the server loop"
    finally:
        await client.close()
    await async_wait_for(
        lambda: open_sockets() <= sockets_before, timeout_s=10, what="sockets to be closed"
    )


async def test_a_call_restarted_on_a_new_peer_connection_goes_on_and_renegotiates_again(
    server: tuple[str, FastAPI],
) -> None:
    """Pipecat's clients restart a failed call on a new peer connection (``restart_pc``),
    which the server answers under a new ``pc_id``: the same call goes on there, its audio
    leaves the jitter buffer at once, and the next offer under the new id renegotiates it."""
    url, app = server
    registry = app.state.registry
    first, restarted = WebRTCClient(), WebRTCClient()
    try:
        assert (await first.connect(url)).status_code == 200
        await async_wait_for(lambda: first.frames > 0, timeout_s=15, what="the call to connect")
        started = registry.stats.started
        response = await restarted.connect(url, pc_id=first.pc_id, restart_pc=True)
        assert response.status_code == 200, response.text
        assert restarted.pc_id != first.pc_id
        await first.close()
        await async_wait_for(lambda: restarted.frames > 0, timeout_s=15, what="audio again")
        assert (registry.stats.active, registry.stats.started) == (1, started)
        restarted.mic.say(speech_at(QUESTION, CLIENT_RATE))
        await async_wait_for(
            lambda: restarted.loud_frames > 25, timeout_s=30, what="an answer after the restart"
        )
        again = await restarted.connect(url, pc_id=restarted.pc_id)
        assert again.status_code == 200, again.text  # before: a new call, refused at the limit
        assert (registry.stats.active, registry.stats.started) == (1, started)
        server_pc = app.state.webrtc._live[restarted.pc_id].pc
        receivers = [t.receiver for t in server_pc.getTransceivers() if t.kind == "audio"]
        assert receivers and all(getattr(r, BUFFER)._prefetch == 0 for r in receivers)
    finally:
        await first.close()
        await restarted.close()
    await async_wait_for(lambda: registry.stats.active == 0, timeout_s=15, what="the call to end")


async def test_an_offer_under_a_replaced_pc_id_is_a_new_call_and_leaves_the_restarted_one_alone(
    asr_server_url: str, asr_model_name: str, tts_url: str
) -> None:
    """After a restart the old ``pc_id`` names no call of ours, but Pipecat's handler still
    maps it to the restarted call's connection: an offer under it (a confused or stale client)
    is a new call, and the restarted call goes on, still answered."""
    settings = stack_settings(
        asr_url=asr_server_url, asr_model=asr_model_name, tts_url=tts_url, max_calls=2
    )
    with running_server(settings) as (url, app):
        registry = app.state.registry
        first, restarted, stale = WebRTCClient(), WebRTCClient(), WebRTCClient()
        try:
            assert (await first.connect(url)).status_code == 200
            await async_wait_for(lambda: first.frames > 0, timeout_s=15, what="the first call")
            response = await restarted.connect(url, pc_id=first.pc_id, restart_pc=True)
            assert response.status_code == 200, response.text
            await first.close()
            await async_wait_for(lambda: restarted.frames > 0, timeout_s=15, what="audio again")

            response = await stale.connect(url, pc_id=first.pc_id)
            assert response.status_code == 200, response.text  # before: 500
            assert stale.pc_id not in (first.pc_id, restarted.pc_id)
            await async_wait_for(lambda: stale.frames > 0, timeout_s=15, what="the new call")
            assert (registry.stats.active, registry.stats.started) == (2, 2)

            restarted.mic.say(speech_at(QUESTION, CLIENT_RATE))
            await async_wait_for(
                lambda: restarted.loud_frames > 25, timeout_s=30, what="the restarted call's answer"
            )
        finally:
            for client in (first, restarted, stale):
                await client.close()
        await async_wait_for(
            lambda: registry.stats.active == 0, timeout_s=15, what="the calls to end"
        )
