"""People pause inside sentences; on a phone call with the default end of turn, each paused
utterance is still one turn: one answer, begun only after the person finished, carrying the
words from before and after the pauses.

Three utterances from the paused-speech set (``tests/fakes/paused_speech.py``; clause pauses
up to 860 ms) go through a real Twilio call to the real server (offline ASR, offline
responder, a tone for the voice). With the old default (200 ms of silence) each of them was
answered mid-sentence (``bench/results/turn_taking.md``).

A fourth, "um... what was it... oh right, the delivery address", goes over a line with white
noise 10 dB below the speech, with the words Voxtral would write (the Voxtral stand-in of the
turn-taking bench): at its second pause (0.74 s) Smart Turn hears a finished question through
the noise, and the words are one. Before ``turn.paused_turns_wait`` it was answered there on
that bench's noisy lines.

A fifth, "sorry... can you say that again", is a call for attention before the
question, with the stand-in's words on a clean line: it must not be answered at "Sorry.".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
import websockets
from fastapi import FastAPI

from agent.config import load_settings
from tests.agent.transports.stack import async_wait_for, phone_server, running_server
from tests.conftest import requires_espeak
from tests.fakes.line_noise import line
from tests.fakes.paused_speech import Utterance, calls_for_attention, utterances
from tests.fakes.realtime_peer import RealtimePeer
from tests.fakes.reference_words import ReferenceWords
from tests.fakes.speech import words
from tests.fakes.speech_server import SpeechServer
from tests.fakes.twilio_caller import FRAME_S, SILENCE, TOKEN, TwilioCaller, payloads, to_ulaw

pytestmark = [pytest.mark.conversation, pytest.mark.timeout(120)]

ANSWER_WITHIN_S = 10
"""Generous: on a loaded machine the recognizer's finals can take seconds (latency is the
bench's business, not this test's)."""

PAUSED = {u.phrases[0]: u for u in utterances() if len(u.phrases) > 1}
CASES = [
    PAUSED["i would like to book a table"],  # clauses, pauses 0.36 and 0.72 s
    PAUSED["so"],  # a hesitation, then the set's longest pause (0.86 s)
    PAUSED["i need apples"],  # a list, three pauses of 0.48-0.71 s
]


@pytest.fixture(scope="module")
def server(asr_server_url: str, asr_model_name: str) -> Iterator[tuple[str, FastAPI]]:
    with SpeechServer(voice="tone", sample_rate=24_000) as tts:
        settings = load_settings(
            "default",
            overrides={
                "server": {"start_local_services": False},
                "stt": {"url": asr_server_url, "model": asr_model_name},
                "llm": {"kind": "echo"},
                "tts": {"kind": "openai", "base_url": f"{tts.url}/v1", "sample_rate": 24_000},
            },
        )
        settings.twilio.auth_token = TOKEN
        with running_server(settings) as running:
            yield running


@pytest.mark.parametrize("utterance", CASES, ids=lambda u: u.kind)
async def test_a_paused_utterance_is_one_turn(
    server: tuple[str, FastAPI], utterance: Utterance
) -> None:
    url, app = server
    pcm, _ = utterance.audio(8000)
    caller, began, ended = await say(url, app, f"CATURN{utterance.kind[:4]}", pcm)
    assert_one_answer_after_the_end(caller, app, utterance, began, ended)


@requires_espeak
async def test_a_caller_who_paused_is_not_answered_at_a_question_inside_the_turn() -> None:
    utterance = next(u for u in utterances() if u.phrases[0] == "um")  # pauses 0.45, 0.74 s
    pcm, _ = utterance.audio(8000)
    before, pcm, after = line(pcm, 8000, "white", 10, before_s=0.5, after_s=ANSWER_WITHIN_S + 2)
    caller, app, began, ended = await say_with_voxtrals_words(
        utterance, "CAHESITATION", pcm, before=before, after=after
    )
    assert_one_answer_after_the_end(caller, app, utterance, began, ended)


async def test_a_caller_who_asks_for_attention_is_answered_after_the_question() -> None:
    """ "Sorry... can you say that again" (a pause of 0.87 s), with the words Voxtral would
    write: "Sorry." was a short command to the words, and Smart Turn calls it complete, so it
    was answered at the pause (``bench/results/turn_taking_attention.md``)."""
    utterance = calls_for_attention()[1]
    pcm, _ = utterance.audio(8000)
    caller, app, began, ended = await say_with_voxtrals_words(utterance, "CAATTENTION", pcm)
    assert_one_answer_after_the_end(caller, app, utterance, began, ended)


async def say_with_voxtrals_words(
    utterance: Utterance,
    call_sid: str,
    pcm: bytes,
    *,
    before: bytes | None = None,
    after: bytes | None = None,
) -> tuple[TwilioCaller, FastAPI, float, float]:
    """:func:`say` to a phone server whose recognizer writes the utterance's own words, as
    Voxtral would (the turn-taking bench's stand-in)."""
    voxtral_words = ReferenceWords()
    voxtral = RealtimePeer(
        model="voxtral-test", transcribe=voxtral_words.transcribe, final_delay_s=0.3
    )
    async with voxtral:
        with phone_server(voxtral.url, "voxtral-test", max_calls=2) as (url, app):
            caller, began, ended = await say(
                url,
                app,
                call_sid,
                pcm,
                before=before,
                after=after,
                speaking=lambda began: voxtral_words.play(utterance, began),
            )
    return caller, app, began, ended


async def say(
    url: str,
    app: FastAPI,
    call_sid: str,
    pcm: bytes,
    *,
    before: bytes | None = None,
    after: bytes | None = None,
    speaking: Callable[[float], None] | None = None,
) -> tuple[TwilioCaller, float, float]:
    """One call: ``before`` (default 0.5 s of silence), the caller's ``pcm`` (8 kHz PCM16),
    then ``after`` (default silence) until the answer starts, and until it has ended 1.5 s
    ago (time for a second answer, if any); returns the caller, when the speech began and
    when it ended (``time.monotonic``). ``speaking`` is told when the speech begins."""
    half_s = int(0.5 / FRAME_S)
    lead = payloads(to_ulaw(before)) if before else [SILENCE] * half_s
    tail = payloads(to_ulaw(after)) if after else []
    ws_url = url.replace("http://", "ws://") + "/telephony/twilio/ws"
    async with websockets.connect(ws_url, compression=None) as ws:
        caller = TwilioCaller(ws, call_sid)
        await caller.start()
        await caller.send(lead)
        began = time.monotonic()
        if speaking is not None:
            speaking(began)
        await caller.send(payloads(to_ulaw(pcm)))
        ended = began + len(pcm) / 2 / 8000
        chunks = (tail[i : i + half_s] or [SILENCE] * half_s for i in range(0, 10**9, half_s))
        for _ in range(ANSWER_WITHIN_S * 2):  # the line until the answer starts
            await caller.send(next(chunks))
            if caller.first_loud(ended) is not None:
                break
        for _ in range(ANSWER_WITHIN_S * 2):  # until the answer ends, and 1.5 s more
            await caller.send(next(chunks))
            if not caller.loud_at or caller.loud_at[-1] < time.monotonic() - 1.5:
                break
        await caller.stop()
        await caller.close()
    registry = app.state.registry
    await async_wait_for(lambda: registry.stats.active == 0, timeout_s=15, what="the call to end")
    return caller, began, ended


def assert_one_answer_after_the_end(
    caller: TwilioCaller, app: FastAPI, utterance: Utterance, began: float, ended: float
) -> None:
    """Nothing was said before the caller finished, and one answer came after, with the
    words from before and after the pauses."""
    early = caller.first_loud(began, ended)
    assert early is None, f"the bot spoke {ended - early:.2f} s before the person had finished"
    assert caller.first_loud(ended) is not None, f"no answer {ANSWER_WITHIN_S} s after the end"
    cut_off = [n for n in caller.media_at_clear if n > 0]  # a clear before any bot audio is
    assert cut_off == [], "the bot was interrupted: it answered a part of the turn"  # a turn start
    record = app.state.registry.recent()[-1]
    answers = [s for s in record.bot_transcript if "said" in s.lower()]
    assert len(answers) == 1, f"{len(answers)} answers, expected one: {answers}"
    said = set(words(" ".join(record.bot_transcript)))
    first, last = set(words(utterance.phrases[0])), set(words(utterance.phrases[-1]))
    assert said & first and said & last, f"the answer lacks a part of the turn: {said}"
