"""Listen-only analytics streams: a carrier forks both tracks of a call a person handles; each
track is transcribed as its own speaker through the offline ASR server, on a real server on
loopback, for Twilio and for Telnyx (the carriers' protocol callers in
:mod:`tests.fakes.both_tracks_caller`, espeak speech)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets
from fastapi import FastAPI

from agent.transports.listen_only import decode_g711
from agent.transports.telephony import twilio_signature
from tests.agent.transports.carriers import Carrier
from tests.agent.transports.stack import async_wait_for, running_server, stack_settings
from tests.conftest import requires_espeak
from tests.fakes.both_tracks_caller import BothTracksStream, ring, timeline
from tests.fakes.speech import word_error_rate
from tests.fakes.speech_server import SpeechServer
from tests.fakes.telnyx_caller import PUBLIC_KEY, to_alaw
from tests.fakes.twilio_caller import TOKEN, TwilioCaller, ulaw_speech

pytestmark = [requires_espeak, pytest.mark.timeout(120)]

OPERATOR = "operator-secret"
DESK = "+15550100"
CALLER_SAYS = "what is the weather like in paris today"
AGENT_SAYS = "please call me back tomorrow morning"
CALL_END_S = 25
"""A stream's end waits up to 15 s for its last finals (pipelines.analytics.final_wait_s)."""


def analytics_settings(asr_url: str, asr_model: str, tts_url: str, **analytics: Any) -> Any:
    settings = stack_settings(asr_url=asr_url, asr_model=asr_model, tts_url=tts_url, max_calls=3)
    settings.server.api_token = OPERATOR
    settings.twilio.auth_token = TOKEN
    settings.telnyx = settings.telnyx.model_copy(update={"public_key": PUBLIC_KEY})
    settings.analytics = settings.analytics.model_copy(
        update={"enabled": True, "dial": DESK, **analytics}
    )
    return settings


@pytest.fixture(scope="module")
def server(asr_server_url: str, asr_model_name: str) -> Iterator[tuple[str, FastAPI]]:
    with SpeechServer(voice="espeak") as tts:
        settings = analytics_settings(asr_server_url, asr_model_name, tts.url)
        with running_server(settings) as running:
            yield running


def heard(text: str, sentence: str) -> bool:
    """The recognizer's words for ``sentence``: at most about one word in eight wrong (the
    offline recognizer's decode of a sentence varies with the moment its windows close)."""
    return word_error_rate(sentence, text) <= 0.15


def test_g711_decoding_matches_the_reference_codec() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import audioop
    every_byte = bytes(range(256))
    assert decode_g711(every_byte, "PCMU") == audioop.ulaw2lin(every_byte, 2)
    assert decode_g711(every_byte, "PCMA") == audioop.alaw2lin(every_byte, 2)
    assert to_alaw  # the Telnyx caller's A-law is the same codec


async def test_both_tracks_are_transcribed_each_as_its_own_speaker(
    server: tuple[str, FastAPI], carrier: Carrier
) -> None:
    url, app = server
    registry = app.state.registry
    call_sid = f"CA-both-{carrier.name}"
    forked = await ring(url, carrier.name, call_sid)
    assert forked.dial == DESK
    tracks = timeline(
        [(0.4, "inbound", ulaw_speech(CALLER_SAYS)), (4.2, "outbound", ulaw_speech(AGENT_SAYS))],
        total_s=8.0,
    )
    async with websockets.connect(forked.url) as ws:
        stream = BothTracksStream(ws, carrier.name, call_sid)
        await stream.start(forked.parameters)
        await async_wait_for(lambda: registry.stats.active == 1, timeout_s=5, what="a call slot")
        call = registry.calls()[0]
        assert call.kind == f"{carrier.name}-analytics"
        await stream.play(tracks)
        await stream.stop()
        await async_wait_for(lambda: call.released, timeout_s=CALL_END_S, what="the call to end")
        await stream.close()
    record = call.as_record()
    assert record["end_reason"] == "caller hung up"
    caller, agent = record["utterances"]
    assert caller["speaker"] == "caller" and heard(caller["text"], CALLER_SAYS), caller
    assert agent["speaker"] == "agent" and heard(agent["text"], AGENT_SAYS), agent
    # Where each was said on the call's clock (the speech starts ~0.1 s into its audio).
    assert 0.3 <= caller["start_s"] <= 0.9 and caller["end_s"] <= 4.0
    assert 4.1 <= agent["start_s"] <= 4.7 and agent["end_s"] <= 8.0
    assert record["user_transcript"] == [] and record["analysis"] is None


async def test_overlapping_speech_keeps_both_speakers_words(server: tuple[str, FastAPI]) -> None:
    url, app = server
    registry = app.state.registry
    forked = await ring(url, "twilio", "CA-overlap")
    tracks = timeline(
        [(0.4, "inbound", ulaw_speech(CALLER_SAYS)), (1.2, "outbound", ulaw_speech(AGENT_SAYS))],
        total_s=5.5,
    )
    async with websockets.connect(forked.url) as ws:
        stream = BothTracksStream(ws, "twilio", "CA-overlap")
        await stream.start(forked.parameters)
        await async_wait_for(lambda: registry.stats.active == 1, timeout_s=5, what="a call slot")
        call = registry.calls()[0]
        await stream.play(tracks)
        await stream.stop()
        await async_wait_for(lambda: call.released, timeout_s=CALL_END_S, what="the call to end")
        await stream.close()
    by_speaker = {u["speaker"]: u for u in call.as_record()["utterances"]}
    assert heard(by_speaker["caller"]["text"], CALLER_SAYS), by_speaker
    assert heard(by_speaker["agent"]["text"], AGENT_SAYS), by_speaker
    assert by_speaker["agent"]["start_s"] < by_speaker["caller"]["end_s"]  # they overlapped


async def test_the_webhook_is_checked_like_the_agents(server: tuple[str, FastAPI]) -> None:
    url, app = server
    started = app.state.registry.stats.started
    async with httpx.AsyncClient() as http:
        unsigned = await http.post(url + "/analytics/twilio", data={"CallSid": "CA1"})
        forged = await http.post(
            url + "/analytics/telnyx",
            content=b"CallSid=CA1",
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
    assert unsigned.status_code == 403 and forged.status_code == 403
    assert "<Stream" not in unsigned.text + forged.text
    assert app.state.registry.stats.started == started


async def test_a_stream_without_an_analytics_token_is_refused(server: tuple[str, FastAPI]) -> None:
    url, app = server
    started = app.state.registry.stats.started
    ws_url = url.replace("http://", "ws://") + "/analytics/twilio/ws"
    async with websockets.connect(ws_url) as ws:
        caller = TwilioCaller(ws, "CA-stranger")
        # The agent's own stream token, valid for the agent's stream, opens no analytics one.
        await caller.start(caller.stream_token(), tracks=("inbound", "outbound"))
        await asyncio.wait_for(caller.closed.wait(), 5)
        assert ws.close_code == 1008 and ws.close_reason == "unauthorized stream"
        await caller.close()
    assert app.state.registry.stats.started == started


async def test_drain_ends_a_listen_only_stream_with_going_away(
    asr_server_url: str, asr_model_name: str
) -> None:
    with SpeechServer(voice="espeak") as tts:
        settings = analytics_settings(asr_server_url, asr_model_name, tts.url)
        settings.server.drain_timeout_s = 0.5
        with running_server(settings) as (url, app):
            forked = await ring(url, "twilio", "CA-drain")
            registry = app.state.registry
            async with websockets.connect(forked.url) as ws:
                stream = BothTracksStream(ws, "twilio", "CA-drain")
                await stream.start(forked.parameters)
                await async_wait_for(lambda: registry.stats.active == 1, timeout_s=5, what="slot")
                playing = asyncio.create_task(stream.play(timeline([], total_s=10)))
                loop = registry.calls()[0].task.get_loop()
                asyncio.run_coroutine_threadsafe(registry.drain(timeout_s=0.5), loop)
                await asyncio.wait_for(stream.caller.closed.wait(), 10)
                playing.cancel()
                await asyncio.gather(playing, return_exceptions=True)
                assert ws.close_code == 1001
                await stream.close()
            await async_wait_for(
                lambda: registry.stats.active == 0, timeout_s=CALL_END_S, what="the end"
            )
            ended = registry.recent()[-1]
            assert ended.end_reason == "drain" and registry.stats.active == 0


async def test_a_full_server_still_connects_the_caller_without_a_stream(
    asr_server_url: str, asr_model_name: str
) -> None:
    with SpeechServer(voice="espeak") as tts:
        settings = analytics_settings(asr_server_url, asr_model_name, tts.url)
        with running_server(settings) as (url, app):
            app.state.registry._closing = True  # draining: no new slot
            async with httpx.AsyncClient() as http:
                form = {"CallSid": "CA-full"}
                signature = twilio_signature(url + "/analytics/twilio", form, TOKEN)
                answer = await http.post(
                    url + "/analytics/twilio", data=form, headers={"X-Twilio-Signature": signature}
                )
            assert answer.status_code == 200
            assert "<Stream" not in answer.text and f"<Number>{DESK}</Number>" in answer.text


CARD_SAID = "my card number is 4111 1111 1111 1111"
PHONE_SAID = "my phone number is five five five, zero one two, three four five six"


async def test_numbers_said_on_the_call_are_redacted_before_they_are_kept(
    server: tuple[str, FastAPI],
) -> None:
    """Piper's voice: the offline recognizer writes its digits as digits ("4,111,111,…",
    "555-012-3456"); espeak's spoken digits send it into long repetitions."""
    url, app = server
    registry = app.state.registry
    forked = await ring(url, "twilio", "CA-numbers")
    tracks = timeline(
        [
            (0.3, "inbound", ulaw_speech(CARD_SAID, voice="piper")),
            (0.3, "outbound", ulaw_speech(PHONE_SAID, voice="piper")),
        ],
        total_s=len(ulaw_speech(CARD_SAID, voice="piper")) / 8000 + 1.5,
    )
    async with websockets.connect(forked.url) as ws:
        stream = BothTracksStream(ws, "twilio", "CA-numbers")
        await stream.start(forked.parameters)
        await async_wait_for(lambda: registry.stats.active == 1, timeout_s=5, what="a call slot")
        call = registry.calls()[0]
        await stream.play(tracks)
        await stream.stop()
        await async_wait_for(lambda: call.released, timeout_s=CALL_END_S, what="the call to end")
        await stream.close()
    record = call.as_record()
    by_speaker = {u["speaker"]: u["text"] for u in record["utterances"]}
    # A card number heard with one digit wrong fails the Luhn check and is kept as an account
    # number: redacted all the same (which label a number gets is the unit tests' business).
    assert re.search(r"\[(card|account) number\]", by_speaker["caller"]), by_speaker
    assert "[phone number]" in by_speaker["agent"], by_speaker
    assert not any(ch.isdigit() for text in by_speaker.values() for ch in text), by_speaker
    assert record["attributes"]["redacted"] == "true"


async def test_malformed_messages_are_counted_and_ignored_and_the_call_goes_on(
    server: tuple[str, FastAPI],
) -> None:
    url, app = server
    registry = app.state.registry
    forked = await ring(url, "twilio", "CA-garbage")
    async with websockets.connect(forked.url) as ws:
        stream = BothTracksStream(ws, "twilio", "CA-garbage")
        await stream.start(forked.parameters)
        await async_wait_for(lambda: registry.stats.active == 1, timeout_s=5, what="a call slot")
        call = registry.calls()[0]
        for junk in (
            b"\x00binary",
            "not json",
            '{"event": "media", "media": {"track": "sideways", "payload": "AAAA"}}',
            '{"event": "media", "media": {"track": "inbound", "payload": "***"}}',
            '{"event": "media", "media": "no object"}',
            '{"event": "mark", "mark": {"name": "x"}}',
            "[1, 2, 3]",
        ):
            await ws.send(junk)
        await stream.play(timeline([(0.3, "inbound", ulaw_speech(CALLER_SAYS))], total_s=4.5))
        await stream.stop()
        await async_wait_for(lambda: call.released, timeout_s=CALL_END_S, what="the call to end")
        await stream.close()
    (utterance,) = call.as_record()["utterances"]
    assert utterance["speaker"] == "caller" and heard(utterance["text"], CALLER_SAYS)
    async with httpx.AsyncClient() as http:
        metrics = (await http.get(url + "/metrics")).text
    bad = [line for line in metrics.splitlines() if 'kind="twilio-analytics_message"' in line]
    assert sum(float(line.rsplit(" ", 1)[1]) for line in bad) >= 5, bad
