"""Call records of real calls: a Twilio caller (and a WebRTC peer) against the real server.

The server runs the voice agent against the offline ASR server, a scripted OpenAI-compatible
LLM that answers in three sentences, and a speech server whose every sentence is a 2 s tone,
so what the caller has heard at any moment is known: 2 s per sentence. The caller barges in
3 s into the first answer: its record must hold the first sentence only.
"""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import time
import wave
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import websockets
from fastapi import FastAPI
from loguru import logger

from agent.observability.log_privacy import handler_options
from agent.observability.metrics import STAGES
from tests.agent.test_serve import Serve
from tests.agent.transports.stack import (
    WebRTCClient,
    async_wait_for,
    running_server,
    stack_settings,
)
from tests.conftest import requires_espeak
from tests.fakes.chat_server import ChatServer
from tests.fakes.speech import speech_at
from tests.fakes.speech_server import SpeechServer
from tests.fakes.twilio_caller import TOKEN, TwilioCaller, ulaw_speech

pytestmark = [requires_espeak, pytest.mark.timeout(120)]

ANSWER = (
    "The weather in Paris is mild today. Bring a light coat tonight. Rain comes after midnight."
)
SENTENCES = [
    "The weather in Paris is mild today.",
    "Bring a light coat tonight.",
    "Rain comes after midnight.",
]
SENTENCE_S = 2.0
OPERATOR = {"Authorization": "Bearer operator-token"}


@dataclass
class Server:
    url: str
    app: FastAPI
    records: Path

    async def record(self, call_id: str) -> dict[str, Any]:
        async with httpx.AsyncClient(base_url=self.url) as http:
            response = await http.get(f"/calls/{call_id}", headers=OPERATOR)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def lines(self) -> list[dict[str, Any]]:
        files = sorted(self.records.glob("calls-*.jsonl"))
        return [json.loads(line) for f in files for line in f.read_text().splitlines()]


@pytest.fixture(scope="module")
def server(
    asr_server_url: str, asr_model_name: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    records = tmp_path_factory.mktemp("records")
    with (
        ChatServer(answer=ANSWER) as chat,
        SpeechServer(voice="tone", seconds=SENTENCE_S, sample_rate=16_000, freq=440.0) as tts,
    ):
        settings = stack_settings(
            asr_url=asr_server_url,
            asr_model=asr_model_name,
            tts_url=tts.url,
            max_calls=2,
            api_token="operator-token",
        )
        settings.tts.sample_rate = 16_000
        settings.llm.kind = "openai"
        settings.llm.base_url = chat.base_url
        settings.llm.model = "chat-server"
        settings.twilio.auth_token = TOKEN
        settings.records.directory = records
        settings.records.recording = True
        with running_server(settings) as (url, app):
            yield Server(url, app, records)


def bot_sentences(turn: dict[str, Any]) -> list[str]:
    return [s for s in SENTENCES if s in turn["bot"]]


async def test_a_phone_call_record_holds_every_turn_its_stages_and_only_the_played_text(
    server: Server,
) -> None:
    """...and the server's logs quote none of it (Pipecat's debug lines would)."""
    registry = server.app.state.registry
    ws_url = server.url.replace("http://", "ws://") + "/telephony/twilio/ws"
    private: list[str] = []
    debugging: list[str] = []
    sinks = [
        logger.add(private.append, level="TRACE", **handler_options(log_transcripts=False)),
        logger.add(debugging.append, level="TRACE", **handler_options(log_transcripts=True)),
    ]
    try:
        await _the_call(server, ws_url, registry)
    finally:
        for sink in sinks:
            logger.remove(sink)
    # No transcript text in the logs, unless observability.log_transcripts says so.
    said = ("paris", "tomorrow", "light coat", "midnight")
    assert not [line for line in private if any(w in line.lower() for w in said)]
    assert any("light coat" in line for line in debugging)
    assert any("paris" in line.lower() for line in debugging)


async def _the_call(server: Server, ws_url: str, registry: Any) -> None:
    async with websockets.connect(ws_url) as ws:
        caller = TwilioCaller(ws, "CA0042", stream_sid="MZ0042")
        await caller.start()
        await caller.silence(0.3)
        await caller.speak(ulaw_speech("what is the weather like in paris today"))
        async with caller.quiet():
            await async_wait_for(
                lambda: bool(caller.loud_at), timeout_s=20, what="the bot's first answer"
            )
            first_loud = caller.loud_at[0]
            (call,) = registry.calls()
            live = await server.record(call.id)  # during the call
            await async_wait_for(
                lambda: time.monotonic() - first_loud >= 1.5 * SENTENCE_S,
                timeout_s=10,
                what="the middle of the second sentence",
            )
        clears = caller.count("clear")
        await caller.speak(ulaw_speech("please call me back tomorrow morning"))
        await async_wait_for(
            lambda: caller.count("clear") > clears, timeout_s=10, what="a clear on barge-in"
        )
        heard_at_clear = audio_before_last_clear(caller)
        async with caller.quiet():
            deadline = time.monotonic() + 30
            while True:  # the second answer plays to its end
                turns = (await server.record(call.id))["turns"]
                if len(turns) >= 2 and len(bot_sentences(turns[-1])) == 3:
                    break
                assert time.monotonic() < deadline, turns
                await asyncio.sleep(0.2)
        await caller.stop()
        await asyncio.wait_for(caller.closed.wait(), 10)
    await async_wait_for(lambda: registry.stats.active == 0, timeout_s=10, what="the call to end")

    assert live["active"] and live["ended_at"] is None
    assert live["attributes"] == {"call_sid": "CA0042", "stream_sid": "MZ0042"}
    assert "paris" in live["turns"][0]["user"].lower()

    record = await server.record(call.id)  # after the call
    assert not record["active"] and record["end_reason"] == "caller hung up"
    assert record["ended_at"] > record["started_at"]
    assert record["attributes"] == {"call_sid": "CA0042", "stream_sid": "MZ0042"}
    first, second = record["turns"]
    assert "paris" in first["user"].lower()
    assert "tomorrow" in second["user"].lower()
    # The first answer was cut after its first sentence: only the sentences played are kept.
    assert SENTENCE_S < heard_at_clear < len(SENTENCES) * SENTENCE_S, heard_at_clear
    played = [" ".join(SENTENCES[:n]) for n in sentences_played_by(heard_at_clear)]
    assert first["bot"] in played and first["interrupted"], (first["bot"], heard_at_clear)
    assert second["bot"] == ANSWER and not second["interrupted"]
    for turn in (first, second):
        assert turn["answered"]
        stages = turn["latency_ms"]
        assert set(stages) == set(STAGES) and all(isinstance(stages[s], int) for s in STAGES)
        assert stages["vad_stop"] <= stages["stt_final"] <= stages["first_audio_out"]
    assert record["user_transcript"] == [first["user"], second["user"]]
    cut = SENTENCES[: len(bot_sentences(first))]
    assert record["bot_transcript"] == [*cut, *SENTENCES]

    await async_wait_for(
        lambda: any(line["id"] == call.id for line in server.lines()),
        timeout_s=5,
        what="the call's line in the JSON Lines file",
    )
    (line,) = [line for line in server.lines() if line["id"] == call.id]
    assert line == record

    # Both sides, caller left and bot right, in one 8 kHz stereo WAV as long as the call.
    with wave.open(record["recording"]) as wav:
        assert (wav.getnchannels(), wav.getframerate(), wav.getsampwidth()) == (2, 8000, 2)
        samples = np.frombuffer(wav.readframes(wav.getnframes()), "<i2").reshape(-1, 2)
    seconds = len(samples) / 8000
    assert abs(seconds - (record["ended_at"] - record["started_at"])) < 1.5, seconds
    caller_loud, bot_loud = (_loud_seconds(samples[:, side]) for side in (0, 1))
    assert caller_loud > 2.0  # two questions
    bot_audio_s = heard_at_clear + len(SENTENCES) * SENTENCE_S
    assert abs(bot_loud - bot_audio_s) < 1.0, (bot_loud, bot_audio_s)
    bot_spectrum = np.abs(np.fft.rfft(samples[:, 1].astype(float)))
    assert abs(np.argmax(bot_spectrum) * 8000 / len(samples) - 440) < 5  # the bot's tone


def sentences_played_by(seconds: float) -> set[int]:
    """How many whole sentences had played after ``seconds`` of the answer (either count
    within 0.15 s of a sentence's end, where the output's chunking decides)."""
    return {int((seconds + d) // SENTENCE_S) for d in (-0.15, 0.0, 0.15)}


def audio_before_last_clear(caller: TwilioCaller) -> float:
    """Seconds of bot audio the caller had received when the last ``clear`` came."""
    seconds, at_clear = 0.0, 0.0
    for event in caller.events:
        if event["event"] == "media":
            seconds += len(base64.b64decode(event["media"]["payload"])) / 8000
        elif event["event"] == "clear":
            at_clear = seconds
    return at_clear


def _loud_seconds(track: np.ndarray) -> float:
    """Seconds of ``track`` (8 kHz) in 20 ms windows louder than quiet speech."""
    windows = track[: len(track) // 160 * 160].reshape(-1, 160).astype(float)
    return float(np.sum(np.sqrt(np.mean(windows**2, axis=1)) > 500) * 0.02)


async def test_a_webrtc_call_gets_its_record_and_its_line(server: Server) -> None:
    registry = server.app.state.registry
    ended = registry.stats.ended
    client = WebRTCClient()
    try:
        response = await client.connect(server.url)
        assert response.status_code == 200, response.text
        await async_wait_for(lambda: client.frames > 0, timeout_s=15, what="audio from the bot")
        await asyncio.sleep(0.5)
        client.mic.say(speech_at("what is the weather like in paris today", 48_000))
        await async_wait_for(lambda: client.loud_frames > 10, timeout_s=30, what="the answer")
        (call,) = registry.calls()
        await async_wait_for(
            lambda: bool(call.bot_transcript), timeout_s=10, what="a sentence played"
        )
    finally:
        await client.close()
    await async_wait_for(lambda: registry.stats.ended > ended, timeout_s=15, what="the end")
    record = await server.record(call.id)
    assert record["kind"] == "webrtc" and record["end_reason"] in (
        "caller hung up",
        "connection lost",
    )
    (turn,) = record["turns"]
    assert "paris" in turn["user"].lower() and turn["bot"].startswith(SENTENCES[0])
    assert all(isinstance(turn["latency_ms"][s], int) for s in STAGES)
    await async_wait_for(
        lambda: any(line["id"] == call.id for line in server.lines()),
        timeout_s=5,
        what="the call's line",
    )


async def test_voice_agent_serve_writes_records_drains_with_a_reason_and_logs_no_words(
    tmp_path: Path, asr_server_url: str
) -> None:
    """A real ``voice-agent serve``: one caller speaks and hangs up, one stays past the drain
    timeout. Both records reach the day file; the log never quotes the caller."""
    records = tmp_path / "records"
    serve = Serve(
        tmp_path,
        "--profile",
        "vllm",
        env={
            "VOICE_AGENT_STT__URL": asr_server_url,
            "VOICE_AGENT_LLM__BASE_URL": "",  # the offline responder: "You said: …"
            "VOICE_AGENT_TTS__BASE_URL": "http://127.0.0.1:9/v1",  # nothing there
            "VOICE_AGENT_SERVER__DRAIN_TIMEOUT_S": "2",
            "VOICE_AGENT_RECORDS__DIRECTORY": str(records),
        },
    )
    try:
        serve.wait_healthy()
        ws_url = f"ws://127.0.0.1:{serve.port}/telephony/twilio/ws"
        async with websockets.connect(ws_url) as ws, websockets.connect(ws_url) as stays:
            caller, staying = TwilioCaller(ws, "CA0051"), TwilioCaller(stays, "CA0052")
            await caller.start()
            await staying.start()
            async with staying.quiet():
                await caller.silence(0.3)
                await caller.speak(ulaw_speech("what is the weather like in paris today"))
                async with caller.quiet():
                    await async_wait_for(
                        lambda: ": final after" in serve.text(),  # the STT's (textless) line
                        timeout_s=30,
                        what="the question's transcript",
                    )
                await caller.stop()
                serve.process.send_signal(signal.SIGTERM)
                await asyncio.wait_for(staying.closed.wait(), 15)
        assert await asyncio.to_thread(serve.wait, 30) == 0, serve.text()[-4000:]
    finally:
        serve.kill()

    (day_file,) = records.glob("calls-*.jsonl")
    lines = {line["attributes"]["call_sid"]: line for line in map(json.loads, day_file.open())}
    assert lines["CA0051"]["end_reason"] == "caller hung up"
    assert "paris" in lines["CA0051"]["turns"][0]["user"].lower()
    assert lines["CA0052"]["end_reason"] == "drain"
    assert "paris" not in serve.text().lower() and "You said" not in serve.text()
