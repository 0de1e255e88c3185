"""The fakes themselves: a strict peer that lets a rule break through, or a caller that
strays from Twilio's protocol, would make every test that leans on them pass for nothing."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from agent.stt.protocol import (
    Commit,
    ErrorEvent,
    ServerEvent,
    SessionCreated,
    SessionUpdate,
    TranscriptionDelta,
    TranscriptionDone,
    encode_pcm_append,
    parse_server_event,
)
from tests.fakes.fault_proxy import FaultProxy
from tests.fakes.paused_speech import extended, unmarked_questions
from tests.fakes.realtime_peer import Generation, RealtimePeer
from tests.fakes.reference_words import TIMING_RATE, ReferenceWords
from tests.fakes.twilio_caller import FRAME_BYTES, TwilioCaller

pytestmark = pytest.mark.timeout(30)

MODEL = "voxtral-test"
CHUNK = b"\x01\x00" * 320  # 20 ms at 16 kHz


async def receive(ws: ClientConnection, timeout_s: float = 2.0) -> ServerEvent:
    return parse_server_event(await asyncio.wait_for(ws.recv(), timeout_s))


async def until_done(ws: ClientConnection) -> tuple[list[str], TranscriptionDone]:
    deltas: list[str] = []
    while True:
        event = await receive(ws)
        if isinstance(event, TranscriptionDone):
            return deltas, event
        assert isinstance(event, TranscriptionDelta), event
        deltas.append(event.delta)


async def session(peer: RealtimePeer) -> ClientConnection:
    ws = await connect(peer.url, compression=None)
    assert isinstance(await receive(ws), SessionCreated)
    await ws.send(SessionUpdate(MODEL).to_json())
    return ws


# ----------------------------------------------------------------------------- realtime peer


async def test_a_client_that_keeps_the_rules_gets_its_sample_count_back() -> None:
    async with RealtimePeer(model=MODEL, deltas="steps", delta_text="w") as peer:
        async with await session(peer) as ws:
            for _ in range(2):  # two utterances on one socket
                await ws.send(Commit().to_json())
                for _ in range(8):
                    await ws.send(encode_pcm_append(CHUNK))
                await ws.send(Commit(final=True).to_json())
                deltas, done = await until_done(ws)
                assert deltas == ["w", "w", ""] and done.text == "2560"  # 160 ms: two steps
    assert peer.transcripts() == [2560, 2560]
    assert peer.violations == []


@pytest.mark.parametrize(
    ("messages", "violation", "code"),
    [
        ([Commit().to_json()], "commit before session.update", "model_not_validated"),
        ([SessionUpdate("other").to_json()], "wrong model 'other'", "model_not_found"),
        (['{"type": "session.update"}'], "session.update without a model", "invalid_event"),
        (["not json"], "invalid_json", "invalid_json"),
        (['{"type": "input_audio_buffer.clear"}'], "unknown_event", "unknown_event"),
        (
            [SessionUpdate(MODEL).to_json(), '{"type": "input_audio_buffer.append", "audio": "!"}'],
            "audio is not base64",
            "invalid_audio",
        ),
        ([SessionUpdate(MODEL).to_json(), encode_pcm_append(CHUNK)], "outside a generation", None),
        (
            [SessionUpdate(MODEL).to_json(), Commit().to_json(), Commit(final=True).to_json()],
            "empty final commit",
            None,
        ),
        (
            [SessionUpdate(MODEL).to_json(), Commit().to_json(), Commit().to_json()],
            "non-final commit while a generation is open",
            None,
        ),
    ],
)
async def test_each_rule_break_is_recorded_and_answered_as_vllm_would(
    messages: list[str], violation: str, code: str | None
) -> None:
    async with RealtimePeer(model=MODEL) as peer:
        async with connect(peer.url, compression=None) as ws:
            await receive(ws)
            for message in messages:
                await ws.send(message)
            if code is not None:
                error = await receive(ws)
                assert isinstance(error, ErrorEvent) and error.code == code
            await ws.send(b"\x00")  # a binary frame: vLLM ends the session
            with pytest.raises(ConnectionClosed):
                await receive(ws)
    assert any(violation in v for v in peer.violations), peer.violations
    assert "binary frame" in peer.violations[-1]


async def test_faults_fire_once_so_the_reconnect_finds_a_healthy_peer() -> None:
    async with RealtimePeer(model=MODEL, drop_after=3, garbage_after=2) as peer:
        async with await session(peer) as ws:
            await ws.send(Commit().to_json())
            for _ in range(3):
                await ws.send(encode_pcm_append(CHUNK))
            assert await asyncio.wait_for(ws.recv(), 2) == "}{ this is not JSON"
            with pytest.raises(ConnectionClosed) as closed:
                await ws.recv()
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011
        async with await session(peer) as ws:  # the second connection is left alone
            await ws.send(Commit().to_json())
            for _ in range(4):
                await ws.send(encode_pcm_append(CHUNK))
            await ws.send(Commit(final=True).to_json())
            assert (await until_done(ws))[1].text == "1280"
    assert peer.fired == {"drop", "garbage"} and peer.violations == []


async def test_a_stalled_peer_reads_on_and_answers_nothing() -> None:
    async with RealtimePeer(model=MODEL, stall_after=1) as peer:
        async with await session(peer) as ws:
            await ws.send(Commit().to_json())
            await ws.send(encode_pcm_append(CHUNK))
            await ws.send(Commit(final=True).to_json())
            with pytest.raises(TimeoutError):
                await receive(ws, timeout_s=0.3)
    assert peer.fired == {"stall"} and peer.transcripts() == []


async def test_a_transcribing_function_writes_each_final_from_what_the_generation_heard() -> None:
    before = time.monotonic()
    async with RealtimePeer(
        model=MODEL, transcribe=lambda g: f"{g.samples} at {g.committed_at}"
    ) as peer:
        async with await session(peer) as ws:
            await ws.send(Commit().to_json())
            await ws.send(encode_pcm_append(CHUNK))
            await ws.send(Commit(final=True).to_json())
            text = (await until_done(ws))[1].text
    samples, _, committed_at = text.partition(" at ")
    assert samples == "320" and before <= float(committed_at) <= time.monotonic()


def generation_committed_at(committed_at: float) -> Generation:
    return Generation(samples=320, final=True, committed_at=committed_at)


def test_reference_words_write_each_phrase_once_after_its_audio_has_ended() -> None:
    unfinished = next(u for u in extended() if (u.language, u.kind) == ("de", "unfinished"))
    first_end, last_end = unfinished.phrase_ends_s(TIMING_RATE)
    assert first_end + unfinished.pauses_s[0] < last_end
    words = ReferenceWords()
    words.play(unfinished, began=100.0)

    assert words.transcribe(generation_committed_at(100.0)) == ""
    assert words.transcribe(generation_committed_at(100.0 + first_end + 0.2)) == (
        "Ich möchte einen tisch."  # closed as a recognizer closes a fragment before a pause
    )
    assert words.transcribe(generation_committed_at(100.0 + first_end + 0.3)) == ""  # not twice
    assert words.transcribe(generation_committed_at(100.0 + last_end + 0.2)) == (
        "Für zwei personen reservieren."
    )
    assert words.transcribe(generation_committed_at(100.0 + last_end + 2.0)) == ""  # noise


def test_reference_words_write_the_words_before_a_cut_inside_a_phrase() -> None:
    statement = next(u for u in extended() if (u.language, u.kind) == ("en", "statement"))
    (end,) = statement.phrase_ends_s(TIMING_RATE)
    words = ReferenceWords()
    words.play(statement, began=0.0)
    assert words.transcribe(generation_committed_at(end / 2)) == "I would like to book."
    assert words.unwritten == 5  # "a table for two people": no segment has held them yet
    assert words.transcribe(generation_committed_at(end - 0.01)) == "A table for two."
    assert words.transcribe(generation_committed_at(end)) == "People."  # the phrase's end
    assert words.unwritten == 0


def test_reference_words_close_a_question_with_a_question_mark_and_forget_the_last_call() -> None:
    question = next(u for u in extended() if (u.language, u.kind) == ("es", "question"))
    words = ReferenceWords()
    words.play(question, began=0.0)
    assert words.transcribe(generation_committed_at(10.0)) == "Qué hora es?"
    words.play(question, began=20.0)
    assert words.transcribe(generation_committed_at(19.0)) == ""
    assert words.transcribe(generation_committed_at(30.0)) == "Qué hora es?"


def test_reference_words_close_an_unmarked_question_with_a_full_stop() -> None:
    """As a recognizer that dropped the mark writes it (``--set unmarked-questions``)."""
    question = next(u for u in unmarked_questions() if u.language == "es")
    words = ReferenceWords()
    words.play(question, began=0.0)
    assert words.transcribe(generation_committed_at(10.0)) == "Dónde está la farmacia más cercana."


# ----------------------------------------------------------------------------- fault proxy


@pytest.fixture
async def echo_url() -> AsyncIterator[str]:
    async def echo(ws: ServerConnection) -> None:
        async for message in ws:
            await ws.send(message)

    async with serve(echo, "127.0.0.1", 0) as server:
        yield f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/echo"


async def test_the_proxy_delays_each_way_and_freezes_after_n_messages(echo_url: str) -> None:
    async with FaultProxy(echo_url, delay_s=0.05, freeze_after=3) as proxy:
        assert proxy.url.endswith("/echo")
        async with connect(proxy.url) as ws:
            started = time.monotonic()
            await ws.send("0")
            await ws.send("1")
            assert [await asyncio.wait_for(ws.recv(), 2) for _ in range(2)] == ["0", "1"]
            assert 0.1 <= time.monotonic() - started < 0.5  # 50 ms each way, not per message
            await ws.send("2")  # the third: from here on nothing passes either way
            await ws.send("3")
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(ws.recv(), 0.3)
    assert proxy.freezes == 1 and proxy.drops == 0


# ----------------------------------------------------------------------------- Twilio caller


async def test_the_caller_speaks_twilios_protocol_at_real_time_pace() -> None:
    received: list[dict[str, Any]] = []
    arrived: list[float] = []

    async def twilio_server(ws: ServerConnection) -> None:
        async for message in ws:
            received.append(json.loads(message))
            arrived.append(time.monotonic())

    async with serve(twilio_server, "127.0.0.1", 0) as server:
        url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        async with connect(url) as ws:
            caller = TwilioCaller(ws, "CA42", stream_sid="MZ42")
            await caller.start(token="t")
            await caller.speak(b"\x00" * (FRAME_BYTES * 10 + 1))  # 11 frames, the last padded
            await caller.mark("played")
            await caller.stop()
            await caller.close()
        await asyncio.sleep(0.1)

    assert [m["event"] for m in received] == ["connected", "start"] + ["media"] * 11 + [
        "mark",
        "stop",
    ]
    start = received[1]["start"]
    assert start["callSid"] == "CA42" and start["streamSid"] == "MZ42"
    assert start["mediaFormat"] == {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}
    assert start["customParameters"] == {"token": "t"}
    media = received[2:13]
    assert all(len(base64.b64decode(m["media"]["payload"])) == FRAME_BYTES for m in media)
    assert [int(m["sequenceNumber"]) for m in received[1:]] == list(range(1, 15))
    assert [m["media"]["chunk"] for m in media] == [str(n) for n in range(1, 12)]
    assert all(m["streamSid"] == "MZ42" for m in received[1:])
    assert 0.18 <= arrived[12] - arrived[2] < 0.4  # 10 gaps of 20 ms
    assert received[-1]["stop"]["callSid"] == "CA42"


async def test_the_caller_hears_a_loud_frame_after_the_quiet_sent_ahead_of_it() -> None:
    """Twilio plays media in order at real time: three quiet frames sent at once with a loud
    one are heard 60 ms before it; a ``clear`` drops what had not been played."""
    quiet = base64.b64encode(b"\xff" * FRAME_BYTES).decode()
    loud = base64.b64encode(b"\x00" * FRAME_BYTES).decode()  # μ-law 0x00: full scale

    def media(payload: str) -> str:
        return json.dumps({"event": "media", "streamSid": "MZ1", "media": {"payload": payload}})

    async def server(ws: ServerConnection) -> None:
        for payload in (quiet, quiet, quiet, loud):
            await ws.send(media(payload))
        await asyncio.sleep(0.3)  # all played: the next answer plays from its arrival
        for payload in (loud, *[quiet] * 20, loud):
            await ws.send(media(payload))
        await ws.send(json.dumps({"event": "clear", "streamSid": "MZ1"}))
        await asyncio.sleep(0.1)

    async with serve(server, "127.0.0.1", 0) as running:
        async with connect(f"ws://127.0.0.1:{running.sockets[0].getsockname()[1]}") as ws:
            caller = TwilioCaller(ws)
            await asyncio.wait_for(caller.closed.wait(), 5)

    assert len(caller.loud_at) == 3
    first, second = caller.heard_at  # the loud frame behind 20 quiet ones was cleared unplayed
    assert 0.03 < first - caller.loud_at[0] <= 0.06  # 60 ms after the first quiet frame came
    assert second == caller.loud_at[1]  # nothing left playing: heard as it arrives
    assert caller.first_heard(first + 0.001) == second
