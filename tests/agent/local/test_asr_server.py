"""The offline ASR server, driven through a real socket exactly as a vLLM client drives vLLM.

One server (the session fixture ``asr_server_url``) serves every test here; each test opens
its own connections, so they also prove connections don't leak state into each other.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, ConnectionClosedError

from agent.config import ASRServerSettings
from agent.local import asr_server
from agent.local.asr_server import build_app
from agent.stt.protocol import (
    AudioAppend,
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
from tests.conftest import requires_espeak
from tests.fakes.serving import BackgroundServer
from tests.fakes.speech import speech_at, word_error_rate

pytestmark = [requires_espeak, pytest.mark.timeout(60)]

RATE = 16_000
WEATHER = "what is the weather like in paris today"
CALL_BACK = "please call me back tomorrow morning"
LIGHTS = "turn on the lights in the kitchen"
SILENCE_400MS = bytes(2 * RATE * 4 // 10)


@dataclass
class Turn:
    deltas: list[str] = field(default_factory=list)
    done: TranscriptionDone | None = None


async def recv(ws: ClientConnection) -> ServerEvent:
    async with asyncio.timeout(20):
        return parse_server_event(await ws.recv())


async def open_session(url: str, model: str | None) -> ClientConnection:
    """Connect, check ``session.created``, and (unless ``model`` is None) validate the model."""
    ws = await connect(url)
    created = await recv(ws)
    assert isinstance(created, SessionCreated)
    if model is not None:
        await ws.send(SessionUpdate(model).to_json())
    return ws


async def stream(ws: ClientConnection, pcm: bytes, *, chunk_ms: int = 40, speed: float = 0) -> None:
    """Append ``pcm`` in ``chunk_ms`` pieces, paced at ``speed`` times real time (0: no pacing)."""
    step = RATE * 2 * chunk_ms // 1000
    for start in range(0, len(pcm), step):
        await ws.send(encode_pcm_append(pcm[start : start + step]))
        if speed:
            await asyncio.sleep(chunk_ms / 1000 / speed)


async def until_done(ws: ClientConnection) -> Turn:
    turn = Turn()
    while turn.done is None:
        event = await recv(ws)
        if isinstance(event, TranscriptionDelta):
            turn.deltas.append(event.delta)
        elif isinstance(event, TranscriptionDone):
            turn.done = event
        else:
            raise AssertionError(f"unexpected event {event}")
    return turn


async def utterance(ws: ClientConnection, text: str, *, speed: float = 0) -> str:
    """One whole utterance: start commit, the speech, final commit; returns ``done.text``."""
    await ws.send(Commit().to_json())
    await stream(ws, speech_at(text, RATE) + SILENCE_400MS, speed=speed)
    await ws.send(Commit(final=True).to_json())
    turn = await until_done(ws)
    assert turn.done is not None
    return turn.done.text


async def expect_error(ws: ClientConnection, code: str) -> ErrorEvent:
    event = await recv(ws)
    assert isinstance(event, ErrorEvent), event
    assert event.code == code, event
    return event


def assert_heard(reference: str, text: str) -> None:
    assert word_error_rate(reference, text) <= 0.2, f"heard {text!r} for {reference!r}"


@contextmanager
def serving(recognizer: Any, model_name: str, *, decode_interval_s: float) -> Iterator[str]:
    """A server of its own around ``recognizer``; yields its realtime URL."""
    settings = ASRServerSettings(
        port=0, served_model_name=model_name, decode_interval_s=decode_interval_s
    )
    server = BackgroundServer(build_app(settings, recognizer))
    port = server.start()
    try:
        yield f"ws://127.0.0.1:{port}/v1/realtime"
    finally:
        server.stop()


# ----------------------------------------------------------------------------- HTTP


def http_url(ws_url: str) -> str:
    return ws_url.replace("ws://", "http://").removesuffix("/v1/realtime")


def get_json(url: str) -> tuple[int, Any]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, json.loads(response.read())


def test_health_answers_ok_once_the_model_is_loaded(asr_server_url: str) -> None:
    status, body = get_json(http_url(asr_server_url) + "/health")
    assert status == 200
    assert body["status"] == "ok"


def test_models_lists_the_served_name(asr_server_url: str, asr_model_name: str) -> None:
    status, body = get_json(http_url(asr_server_url) + "/v1/models")
    assert status == 200
    assert body["object"] == "list"
    assert [card["id"] for card in body["data"]] == [asr_model_name]
    assert body["data"][0]["object"] == "model"


# ----------------------------------------------------------------------------- transcription


async def test_session_created_comes_first_with_an_id(asr_server_url: str) -> None:
    async with connect(asr_server_url) as ws:
        event = await recv(ws)
        assert isinstance(event, SessionCreated)
        assert event.id.startswith("sess-")
        assert abs(event.created - time.time()) < 60


async def test_streamed_sentence_gets_deltas_then_done(
    asr_server_url: str, asr_model_name: str
) -> None:
    ws = await open_session(asr_server_url, asr_model_name)
    async with ws:
        await ws.send(Commit().to_json())
        await stream(ws, speech_at(WEATHER, RATE) + SILENCE_400MS, chunk_ms=40, speed=2)
        await ws.send(Commit(final=True).to_json())
        turn = await until_done(ws)
    assert turn.done is not None
    assert_heard(WEATHER, turn.done.text)
    assert [delta for delta in turn.deltas if delta], "no text arrived before done"
    assert turn.done.usage is not None
    assert turn.done.usage["completion_tokens"] == len(turn.done.text.split())
    assert turn.done.usage["total_tokens"] > turn.done.usage["completion_tokens"]


async def test_deltas_are_the_transcript_when_nothing_was_revised(
    asr_server_url: str, asr_model_name: str
) -> None:
    """Deltas only ever append: joined they are a word-prefix of (here: equal to) ``done``."""
    ws = await open_session(asr_server_url, asr_model_name)
    async with ws:
        await ws.send(Commit().to_json())
        await stream(ws, speech_at(CALL_BACK, RATE) + SILENCE_400MS, chunk_ms=20, speed=1.5)
        await ws.send(Commit(final=True).to_json())
        turn = await until_done(ws)
    assert turn.done is not None
    joined = "".join(turn.deltas)
    assert len(joined.split()) >= 2, f"too little text in deltas: {turn.deltas}"
    assert turn.done.text.startswith(joined)
    assert_heard(CALL_BACK, turn.done.text)


async def test_two_utterances_on_one_socket(asr_server_url: str, asr_model_name: str) -> None:
    ws = await open_session(asr_server_url, asr_model_name)
    async with ws:
        assert_heard(CALL_BACK, await utterance(ws, CALL_BACK))
        assert_heard(LIGHTS, await utterance(ws, LIGHTS))


async def test_audio_before_the_start_commit_belongs_to_the_utterance(
    asr_server_url: str, asr_model_name: str
) -> None:
    """Appends between ``done`` and the next start commit are the next utterance's start."""
    ws = await open_session(asr_server_url, asr_model_name)
    async with ws:
        await ws.send(Commit(final=True).to_json())
        empty = await until_done(ws)
        assert empty.done is not None and empty.done.text == ""
        pcm = speech_at(LIGHTS, RATE)
        await stream(ws, pcm[: len(pcm) // 2])  # before the commit
        await ws.send(Commit().to_json())
        await ws.send(Commit().to_json())  # ignored: a generation is already open
        await stream(ws, pcm[len(pcm) // 2 :] + SILENCE_400MS)
        await ws.send(Commit(final=True).to_json())
        turn = await until_done(ws)
        assert turn.done is not None
        assert_heard(LIGHTS, turn.done.text)
        # the ignored second start commit produced no second generation or done
        await ws.send(Commit(final=True).to_json())
        after = await until_done(ws)
        assert after.done is not None and after.done.text == ""


async def test_final_commit_without_a_start_decodes_the_buffer(
    asr_server_url: str, asr_model_name: str
) -> None:
    ws = await open_session(asr_server_url, asr_model_name)
    async with ws:
        await stream(ws, speech_at(CALL_BACK, RATE))
        await ws.send(Commit(final=True).to_json())
        turn = await until_done(ws)
    assert turn.done is not None
    assert_heard(CALL_BACK, turn.done.text)


async def test_concurrent_connections_get_their_own_transcripts(
    asr_server_url: str, asr_model_name: str
) -> None:
    first = await open_session(asr_server_url, asr_model_name)
    second = await open_session(asr_server_url, asr_model_name)
    async with first, second:
        heard = await asyncio.gather(
            utterance(first, WEATHER, speed=3), utterance(second, LIGHTS, speed=3)
        )
    assert_heard(WEATHER, heard[0])
    assert_heard(LIGHTS, heard[1])


async def test_a_client_vanishing_mid_sentence_does_not_disturb_another(
    asr_server_url: str, asr_model_name: str
) -> None:
    leaver = await open_session(asr_server_url, asr_model_name)
    stayer = await open_session(asr_server_url, asr_model_name)
    async with stayer:
        await leaver.send(Commit().to_json())
        await stayer.send(Commit().to_json())
        weather, lights = speech_at(WEATHER, RATE), speech_at(LIGHTS, RATE)
        await asyncio.gather(
            stream(leaver, weather[: len(weather) // 2], speed=3),
            stream(stayer, lights[: len(lights) // 2], speed=3),
        )
        leaver.transport.abort()  # gone without a close frame, a partial decode pending
        await stream(stayer, lights[len(lights) // 2 :] + SILENCE_400MS, speed=3)
        await stayer.send(Commit(final=True).to_json())
        turn = await until_done(stayer)
        assert turn.done is not None
        assert_heard(LIGHTS, turn.done.text)
        assert_heard(CALL_BACK, await utterance(stayer, CALL_BACK))
    assert get_json(http_url(asr_server_url) + "/health")[0] == 200


async def test_utterance_longer_than_the_limit_is_refused(
    asr_server_url: str, asr_model_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(asr_server, "MAX_UTTERANCE_S", 1.0)
    ws = await open_session(asr_server_url, asr_model_name)
    async with ws:
        await ws.send(Commit().to_json())
        await ws.send(AudioAppend.from_pcm(bytes(2 * RATE)).to_json())  # exactly the limit
        await ws.send(AudioAppend.from_pcm(bytes(640)).to_json())
        error = await expect_error(ws, "processing_error")
        assert "final commit" in error.error
        await ws.send(Commit(final=True).to_json())
        turn = await until_done(ws)
        assert turn.done is not None and turn.done.text == ""
        assert turn.done.usage is not None and turn.done.usage["prompt_tokens"] == -(-RATE // 1280)


# ----------------------------------------------------------------------------- errors


async def test_invalid_json_is_an_error_and_the_session_goes_on(
    asr_server_url: str, asr_model_name: str
) -> None:
    ws = await open_session(asr_server_url, asr_model_name)
    async with ws:
        await ws.send("{not json")
        await expect_error(ws, "invalid_json")
        assert_heard(LIGHTS, await utterance(ws, LIGHTS))


async def test_unknown_event_is_an_error_and_the_session_goes_on(
    asr_server_url: str, asr_model_name: str
) -> None:
    ws = await open_session(asr_server_url, asr_model_name)
    async with ws:
        await ws.send(json.dumps({"type": "response.create"}))
        error = await expect_error(ws, "unknown_event")
        assert "response.create" in error.error
        assert_heard(LIGHTS, await utterance(ws, LIGHTS))


@pytest.mark.parametrize("audio", ["not base64!", "", "AAE=AA", "AA=="])
async def test_invalid_audio_is_an_error_and_the_session_goes_on(
    asr_server_url: str, asr_model_name: str, audio: str
) -> None:
    """Not base64, empty, bad padding, an odd byte count (half a sample)."""
    ws = await open_session(asr_server_url, asr_model_name)
    async with ws:
        await ws.send(Commit().to_json())
        await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": audio}))
        await expect_error(ws, "invalid_audio")
        await stream(ws, speech_at(LIGHTS, RATE))
        await ws.send(Commit(final=True).to_json())
        turn = await until_done(ws)
        assert turn.done is not None
        assert_heard(LIGHTS, turn.done.text)


async def test_commit_before_session_update_is_model_not_validated(
    asr_server_url: str, asr_model_name: str
) -> None:
    ws = await open_session(asr_server_url, model=None)
    async with ws:
        await ws.send(Commit().to_json())
        await expect_error(ws, "model_not_validated")
        await ws.send(Commit(final=True).to_json())
        await expect_error(ws, "model_not_validated")
        await ws.send(SessionUpdate(asr_model_name).to_json())
        assert_heard(LIGHTS, await utterance(ws, LIGHTS))


async def test_wrong_model_is_model_not_found_and_stays_unvalidated(
    asr_server_url: str, asr_model_name: str
) -> None:
    ws = await open_session(asr_server_url, model="openai/whisper-large-v3")
    async with ws:
        error = await expect_error(ws, "model_not_found")
        assert "openai/whisper-large-v3" in error.error
        await ws.send(Commit().to_json())
        await expect_error(ws, "model_not_validated")
        await ws.send(SessionUpdate(asr_model_name).to_json())
        assert_heard(LIGHTS, await utterance(ws, LIGHTS))


async def test_missing_model_is_invalid_event_like_vllm(
    asr_server_url: str, asr_model_name: str
) -> None:
    """vLLM answers a session.update without ``model`` with ``invalid_event``."""
    ws = await open_session(asr_server_url, model=None)
    async with ws:
        await ws.send(json.dumps({"type": "session.update"}))
        await expect_error(ws, "invalid_event")
        await ws.send(Commit().to_json())
        await expect_error(ws, "model_not_validated")
        await ws.send(SessionUpdate(asr_model_name).to_json())
        assert_heard(LIGHTS, await utterance(ws, LIGHTS))


async def test_binary_frame_ends_the_session_without_a_close_frame(
    asr_server_url: str, asr_model_name: str
) -> None:
    """As vLLM (``receive_text()`` fails, its handler returns): the connection just drops."""
    ws = await open_session(asr_server_url, asr_model_name)
    async with ws:
        await ws.send(Commit().to_json())
        await ws.send(speech_at(LIGHTS, RATE)[:3200])  # raw PCM in a binary frame
        with pytest.raises(ConnectionClosed) as closed:
            await recv(ws)
    assert isinstance(closed.value, ConnectionClosedError)
    assert closed.value.rcvd is None  # no close frame: code 1006 for the client
    other = await open_session(asr_server_url, asr_model_name)
    async with other:
        assert_heard(LIGHTS, await utterance(other, LIGHTS))


# ----------------------------------------------------------------------------- decode failures


class FlakyRecognizer:
    """Fails its first decode the way CTranslate2 does (RuntimeError), then hears words."""

    def __init__(self) -> None:
        self.calls = 0

    def transcribe(self, audio: np.ndarray) -> str:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("simulated decoder failure")
        return "hello there"


class FlakySecondPass(FlakyRecognizer):
    """A two-pass recognizer whose first pass doubts everything and whose second pass fails
    the first time: the failure comes from the decoder's second turn on the job."""

    def first_pass(self, audio: np.ndarray) -> str | None:
        return None

    def second_pass(self, audio: np.ndarray) -> str:
        return self.transcribe(audio)


@pytest.fixture(params=[FlakyRecognizer, FlakySecondPass])
def flaky_server_url(request: pytest.FixtureRequest, asr_model_name: str) -> Iterator[str]:
    with serving(request.param(), asr_model_name, decode_interval_s=60) as url:
        yield url


async def test_a_failed_decode_is_a_processing_error_and_the_session_goes_on(
    flaky_server_url: str, asr_model_name: str
) -> None:
    ws = await open_session(flaky_server_url, asr_model_name)
    async with ws:
        await ws.send(Commit().to_json())
        await stream(ws, bytes(3200))
        await ws.send(Commit(final=True).to_json())
        error = await expect_error(ws, "processing_error")
        assert "simulated decoder failure" in error.error
        await ws.send(Commit().to_json())
        await stream(ws, bytes(3200))
        await ws.send(Commit(final=True).to_json())
        turn = await until_done(ws)
        assert turn.done is not None and turn.done.text == "hello there"
        assert turn.deltas == ["hello there"]


# ----------------------------------------------------------------------------- delta rules


@pytest.mark.parametrize(
    ("hypothesis", "stable"),
    [
        ("Please call.", "Please"),
        ("Please call me back tomorrow,", "Please call me back"),
        ("What is the weather like in Paris?", "What is the weather like in"),
        ("Hello", ""),
        ("", ""),
    ],
)
def test_partials_hold_back_their_last_word(hypothesis: str, stable: str) -> None:
    assert asr_server._stable_prefix(hypothesis) == stable


@pytest.mark.parametrize(
    ("text", "emitted", "extends"),
    [
        ("Please call me", "Please", True),
        ("Please call me", "", True),
        ("Please call me back tomorrow", "Please call me back to", False),  # mid-word
        ("please call me", "Please", False),  # revised: wait for done
        ("Please", "Please", False),  # nothing new
    ],
)
def test_deltas_only_append_whole_words(text: str, emitted: str, extends: bool) -> None:
    assert asr_server._extends(text, emitted) is extends


def test_a_word_is_sent_as_a_delta_only_once_two_decodes_agree_on_it() -> None:
    agreed = asr_server._agreed_prefix
    assert agreed("", "Please call me.") == ""  # the first decode confirms nothing yet
    # The misheard tail ("Mac") is not confirmed by the next decode, so it is never sent.
    assert agreed("Please call me Mac.", "Please call me back tomorrow.") == "Please call me"
    assert agreed("Please call me back tomorrow", "Please call me back tomorrow morning.") == (
        "Please call me back"  # each decode's last word may be cut off: held back
    )
    assert agreed("Turn on the", "Turn off the lights.") == "Turn"


# ----------------------------------------------------------------------------- streaming


def last_loud_sample(pcm: bytes) -> int:
    """espeak's own audio ends on 0.4 s of near-digital quiet: where the speech really ends."""
    return int(np.nonzero(np.abs(np.frombuffer(pcm, "<i2")) > 100)[0][-1])


class CountingRecognizer:
    """The real recognizer, noting how much audio each decode covered."""

    def __init__(self) -> None:
        from agent.local.recognizer import WhisperRecognizer

        self._model = WhisperRecognizer()
        self.decoded: list[int] = []  # samples per decode, in order

    def transcribe(self, audio: np.ndarray) -> str:
        self.decoded.append(audio.size)
        return self._model.transcribe(audio)


@pytest.fixture
def counted_server(asr_model_name: str) -> Iterator[tuple[str, CountingRecognizer]]:
    """A server whose only partials are those the end of speech starts (no periodic ones)."""
    pytest.importorskip("faster_whisper", reason="the offline recognizer needs faster-whisper")
    recognizer = CountingRecognizer()
    with serving(recognizer, asr_model_name, decode_interval_s=60) as url:
        yield url, recognizer


async def test_the_end_of_speech_starts_a_decode_that_done_reuses(
    counted_server: tuple[str, CountingRecognizer], asr_model_name: str
) -> None:
    """Speech, then quiet, in real time: the decode starts when the speech ends, before the
    client's final commit, and ``done`` needs no decode of its own."""
    url, recognizer = counted_server
    speech = speech_at(LIGHTS, RATE)
    ws = await open_session(url, asr_model_name)
    async with ws:
        await ws.send(Commit().to_json())
        await stream(ws, speech + SILENCE_400MS, chunk_ms=20, speed=1)
        decoded_before_commit = list(recognizer.decoded)
        await ws.send(Commit(final=True).to_json())
        turn = await until_done(ws)
    assert turn.done is not None
    assert_heard(LIGHTS, turn.done.text)
    assert decoded_before_commit, "nothing was decoded while the caller was quiet"
    assert decoded_before_commit[-1] > last_loud_sample(speech), "it missed the speech's end"
    assert recognizer.decoded == decoded_before_commit, "done decoded again"


async def test_speech_right_up_to_the_final_commit_is_decoded_at_the_commit(
    counted_server: tuple[str, CountingRecognizer], asr_model_name: str
) -> None:
    """No quiet before the commit: the last words must not be lost to an early decode."""
    url, recognizer = counted_server
    speech = speech_at(WEATHER, RATE)
    speech = speech[: 2 * last_loud_sample(speech) + 2]  # without espeak's trailing quiet
    ws = await open_session(url, asr_model_name)
    async with ws:
        await ws.send(Commit().to_json())
        await stream(ws, speech, chunk_ms=20, speed=1)
        await ws.send(Commit(final=True).to_json())
        turn = await until_done(ws)
    assert turn.done is not None
    assert_heard(WEATHER, turn.done.text)
    assert recognizer.decoded[-1] == len(speech) // 2


def test_the_loudness_tracker_finds_where_speech_ended() -> None:
    speech = speech_at(LIGHTS, RATE)
    loudness = asr_server._Loudness()
    buffer = bytearray()
    for start in range(0, len(speech + SILENCE_400MS), 666):  # ragged appends
        buffer += (speech + SILENCE_400MS)[start : start + 666]
        loudness.extend(buffer)
    ended = last_loud_sample(speech)
    assert ended - 0.1 * RATE < loudness.loud_until <= ended + 320  # within a 20 ms window


class DoubtingRecognizer:
    """tiny.en on a noisy line, as the decoder sees it: a quick first pass that doubts every
    decode, and a second pass that hears "hello there". Notes how much audio each pass
    covered; every first pass waits until the test lets it finish (``release``)."""

    def __init__(self) -> None:
        self.first: list[int] = []
        self.second: list[int] = []
        self.started = threading.Event()
        self.release = threading.Event()

    def transcribe(self, audio: np.ndarray) -> str:
        return self.first_pass(audio) or self.second_pass(audio)

    def first_pass(self, audio: np.ndarray) -> str | None:
        self.started.set()
        assert self.release.wait(10), "the test never let the first pass finish"
        self.first.append(audio.size)
        return None

    def second_pass(self, audio: np.ndarray) -> str:
        self.second.append(audio.size)
        return "hello there"


@pytest.fixture
def doubting_server(asr_model_name: str) -> Iterator[tuple[str, DoubtingRecognizer]]:
    """A server whose first periodic partial starts 0.2 s into the turn."""
    recognizer = DoubtingRecognizer()
    with serving(recognizer, asr_model_name, decode_interval_s=0.2) as url:
        yield url, recognizer


def line_noise(seconds: float) -> bytes:
    """Loud noise: the server's loudness tracker hears it all as speech, to its last sample."""
    noise = np.random.default_rng(7).integers(-8000, 8000, int(seconds * RATE), dtype=np.int16)
    return noise.astype("<i2").tobytes()


async def commit_while_the_first_pass_runs(
    ws: ClientConnection, recognizer: DoubtingRecognizer
) -> Turn:
    """The final commit, read by the server (it answers a bad event after it) while a
    partial's first pass still runs; then the pass may finish."""
    await ws.send(Commit(final=True).to_json())
    await ws.send("not json")
    await expect_error(ws, "invalid_json")
    recognizer.release.set()
    return await until_done(ws)


async def test_a_final_does_not_wait_for_the_second_pass_of_a_partial_it_made_moot(
    doubting_server: tuple[str, DoubtingRecognizer], asr_model_name: str
) -> None:
    """Speech up to the commit, past what the partial covers: ``done`` cannot reuse that
    partial, so its doubtful words are not decoded again the slow way; only the final is."""
    url, recognizer = doubting_server
    ws = await open_session(url, asr_model_name)
    async with ws:
        await ws.send(Commit().to_json())
        await stream(ws, line_noise(1.0))
        assert await asyncio.to_thread(recognizer.started.wait, 10), "no partial started"
        await stream(ws, line_noise(0.3))
        turn = await commit_while_the_first_pass_runs(ws, recognizer)
    assert turn.done is not None and turn.done.text == "hello there"
    final = int(1.3 * RATE)
    assert recognizer.first[0] < final, "the partial covered the whole turn"
    assert recognizer.first[1:] == [final]
    assert recognizer.second == [final], "a moot partial's second pass ran"


async def test_a_partial_that_covers_the_speech_finishes_for_done_to_reuse(
    doubting_server: tuple[str, DoubtingRecognizer], asr_model_name: str
) -> None:
    """Speech, then quiet: the partial the end of speech started covers the turn, so its
    second pass runs and ``done`` reuses it rather than decoding the turn again."""
    url, recognizer = doubting_server
    ws = await open_session(url, asr_model_name)
    async with ws:
        await ws.send(Commit().to_json())
        await stream(ws, line_noise(1.0) + SILENCE_400MS)
        assert await asyncio.to_thread(recognizer.started.wait, 10), "no partial started"
        turn = await commit_while_the_first_pass_runs(ws, recognizer)
    assert turn.done is not None and turn.done.text == "hello there"
    assert len(recognizer.first) == 1, "done decoded the turn again"
    assert recognizer.first[0] > int(1.0 * RATE), "the partial missed the speech's end"
    assert recognizer.second == recognizer.first
