"""People pause inside sentences; on a phone call with the default end of turn, each paused
utterance is still one turn: one answer, begun only after the person finished, carrying the
words from before and after the pauses.

Three utterances from the paused-speech set (``tests/fakes/paused_speech.py``; clause pauses
up to 860 ms) go through a real Twilio call to the real server (offline ASR, offline
responder, a tone for the voice). With the old default (200 ms of silence) each of them was
answered mid-sentence (``bench/results/turn_taking.md``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import websockets
from fastapi import FastAPI

from agent.config import load_settings
from tests.agent.transports.stack import async_wait_for, running_server
from tests.fakes.paused_speech import Utterance, utterances
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
    registry = app.state.registry
    pcm, end_s = utterance.audio(8000)
    ws_url = url.replace("http://", "ws://") + "/telephony/twilio/ws"
    async with websockets.connect(ws_url, compression=None) as ws:
        caller = TwilioCaller(ws, f"CATURN{utterance.kind[:4]}")
        await caller.start()
        await caller.send([SILENCE] * int(0.5 / FRAME_S))
        began = time.monotonic()
        await caller.send(payloads(to_ulaw(pcm)))
        ended = began + end_s
        for _ in range(ANSWER_WITHIN_S * 2):  # silence until the answer starts
            await caller.send([SILENCE] * int(0.5 / FRAME_S))
            if caller.first_loud(ended) is not None:
                break
        await caller.send([SILENCE] * int(1.5 / FRAME_S))  # time for a second answer, if any
        await caller.stop()
        await caller.close()
    await async_wait_for(lambda: registry.stats.active == 0, timeout_s=15, what="the call to end")

    early = caller.first_loud(began, ended)
    assert early is None, f"the bot spoke {ended - early:.2f} s before the person had finished"
    assert caller.first_loud(ended) is not None, f"no answer {ANSWER_WITHIN_S} s after the end"
    cut_off = [n for n in caller.media_at_clear if n > 0]  # a clear before any bot audio is
    assert cut_off == [], "the bot was interrupted: it answered a part of the turn"  # a turn start
    answers = [s for s in registry.recent()[-1].bot_transcript if "said" in s.lower()]
    assert len(answers) == 1, f"{len(answers)} answers, expected one: {answers}"
    said = set(words(" ".join(registry.recent()[-1].bot_transcript)))
    first, last = set(words(utterance.phrases[0])), set(words(utterance.phrases[-1]))
    assert said & first and said & last, f"the answer lacks a part of the turn: {said}"
