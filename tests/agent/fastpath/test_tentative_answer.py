"""An answer stays tentative until the caller hears it: phone calls to the real server.

A Twilio caller speaks to our server (real sockets), whose LLM is a scripted chat peer that
records every request and answers ``You asked: <last user message>``; the TTS is espeak.

- False end: an utterance with a long inner pause ends the turn early; the caller goes on
  before any answer audio went out, so that answer is cancelled unheard and the next request
  holds both parts as one user message. Once an answer was heard, the turns stay apart.
- Eager answer: the STT (a scripted realtime peer) sends the whole sentence as interim text
  and holds its final transcript until the speculative request has reached the chat peer;
  a matching final keeps that answer (one request), a different one restarts it.

And, frame by frame against Pipecat's own aggregator: the user's words still queued when a
turn start interrupts the bot are kept, and an eager answer is withdrawn when the user goes on.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
import websockets
from fastapi import FastAPI
from pipecat.audio.turn.base_turn_analyzer import EndOfTurnState
from pipecat.frames.frames import (
    EagerEndOfTurnCancelFrame,
    EagerTranscriptionFrame,
    Frame,
    InterimTranscriptionFrame,
    LLMContextFrame,
    TranscriptionFrame,
    UserStoppedSpeakingFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMUserAggregator,
    LLMUserAggregatorParams,
)
from pipecat.tests.utils import SleepFrame, run_test
from pipecat.turns.user_start import (
    TranscriptionUserTurnStartStrategy,
    VADUserTurnStartStrategy,
)
from pipecat.turns.user_stop import SpeechTimeoutUserTurnStopStrategy
from pipecat.turns.user_turn_strategies import UserTurnStrategies

from agent.config import Settings, TurnSettings
from agent.fastpath.tentative_answer import TentativeAnswerUserAggregator
from agent.stt.frames import SpeechSegmentTranscribedFrame
from agent.stt.protocol import TranscriptionDelta
from agent.turns.adaptive_stop import AdaptiveUserTurnStopStrategy
from tests.agent.transports.stack import async_wait_for, running_server, stack_settings
from tests.conftest import quoted_in, requires_espeak
from tests.fakes.chat_server import ChatServer
from tests.fakes.paused_speech import Utterance
from tests.fakes.realtime_peer import Generation, RealtimePeer, Send
from tests.fakes.speech_server import SpeechServer
from tests.fakes.text_model import ScriptedTextModel
from tests.fakes.turn_analyzer import ScriptedTurnAnalyzer
from tests.fakes.twilio_caller import FRAME_S, SILENCE, TOKEN, TwilioCaller, payloads, to_ulaw

pytestmark = [requires_espeak, pytest.mark.timeout(120)]


def echo(messages: list[dict[str, Any]]) -> str:
    """The chat peer's answer: ``You asked: <last user message>``."""
    users = [str(m["content"]) for m in messages if m["role"] == "user"]
    return f"You asked: {users[-1] if users else ''}."


BOOKING = Utterance("clauses", ("i would like to book a table", "for two people"), (0.9,))


@contextmanager
def phone_server(
    stt_url: str, stt_model: str, chat: ChatServer, **turn: Any
) -> Iterator[tuple[str, FastAPI]]:
    """Our server taking phone calls, its LLM the chat peer."""
    with SpeechServer(voice="espeak") as tts:
        settings: Settings = stack_settings(asr_url=stt_url, asr_model=stt_model, tts_url=tts.url)
        settings.twilio.auth_token = TOKEN
        settings.llm.kind = "openai"
        settings.llm.base_url = chat.base_url
        settings.llm.model = "chat-server"
        for key, value in turn.items():
            setattr(settings.turn, key, value)
        with running_server(settings) as running:
            yield running


def user_messages(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


def roles(request: dict[str, Any]) -> list[str]:
    return [m["role"] for m in request["messages"] if m["role"] != "system"]


def normalized(text: str) -> str:
    return " ".join(re.findall(r"[a-z']+", text.lower()))


async def metric(url: str, name: str) -> float:
    async with httpx.AsyncClient() as http:
        text = (await http.get(url + "/metrics")).text
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))


async def call(url: str, speak: Any) -> TwilioCaller:
    """One phone call: silence, ``await speak(caller)``, then listen until the caller hangs up."""
    async with websockets.connect(url.replace("http://", "ws://") + "/telephony/twilio/ws") as ws:
        caller = TwilioCaller(ws)
        await caller.start()
        await caller.silence(0.4)
        await speak(caller)
        await caller.stop()
        await caller.close()
    return caller


# ----------------------------------------------------------------------------- false ends


async def test_a_false_end_is_cancelled_unheard_and_both_parts_reach_the_llm_as_one_turn(
    asr_server_url: str, asr_model_name: str, redacted_log: list[str]
) -> None:
    # The model takes 4 s to its first token: the caller goes on long before any answer.
    with ChatServer(script=echo, first_token_delay_s=4.0) as chat:
        with phone_server(asr_server_url, asr_model_name, chat) as (url, _app):
            pcm, _ = BOOKING.audio(8000)
            frames = payloads(to_ulaw(pcm))
            second_part = round(_phrase_s(BOOKING, 1) / FRAME_S)
            moments: dict[str, float] = {}

            async def speak(caller: TwilioCaller) -> None:
                moments["began"] = time.monotonic()
                await caller.send(frames[:-second_part])  # the first part and its pause
                # The pause goes on until the turn has ended there (the recognizer's speed
                # varies with the machine's load): a false end, for sure.
                async with caller.quiet():
                    await async_wait_for(
                        lambda: len(chat.requests) == 1, timeout_s=20, what="the false end"
                    )
                await caller.send(frames[-second_part:])
                moments["ended"] = time.monotonic()
                await caller.send([SILENCE] * int(1.0 / FRAME_S))
                await async_wait_for(
                    lambda: len(caller.loud_at) > 0, timeout_s=20, what="the bot's answer"
                )
                await caller.silence(1.0)

            caller = await call(url, speak)
            merged = await metric(url, "voice_agent_false_ends_merged_total")
            endings = [
                await metric(url, f'voice_agent_turn_endings_total{{ending="{ending}"}}')
                for ending in ("complete", "finished", "waited", "no_words")
            ]

    first, *_, last = chat.requests
    assert len(chat.requests) == 2, [user_messages(r) for r in chat.requests]
    # The turn ended in the pause: the first request was for the first part alone ...
    assert normalized(user_messages(first)[-1]) == "i would like to book a table"
    # ... and was cancelled before any of it was heard: no bot audio until the user finished.
    assert caller.first_loud(moments["began"], moments["ended"]) is None
    # The next request sees both parts as one user message, and no answer to the first.
    assert roles(last) == ["user"]
    assert normalized(user_messages(last)[0]) == normalized(BOOKING.text)
    assert merged == 1
    assert sum(endings) == 2  # the false end and the whole turn, each counted by how it ended
    assert quoted_in(redacted_log, "book a table", "two people") == []  # the merge is logged


async def test_a_turn_whose_answer_was_heard_stays_a_turn_of_its_own(
    asr_server_url: str, asr_model_name: str
) -> None:
    # An instant model: the first part's answer is playing when the caller goes on.
    with ChatServer(script=echo) as chat:
        with phone_server(asr_server_url, asr_model_name, chat) as (url, _app):
            pcm, _ = BOOKING.audio(8000)
            first_part = round(_phrase_s(BOOKING, 0) / FRAME_S)
            frames = payloads(to_ulaw(pcm))

            async def speak(caller: TwilioCaller) -> None:
                await caller.send(frames[:first_part])
                await caller.send([SILENCE] * int(0.6 / FRAME_S))
                await async_wait_for(
                    lambda: len(caller.loud_at) > 0, timeout_s=15, what="the first answer"
                )
                await caller.send(frames[-round(_phrase_s(BOOKING, 1) / FRAME_S) :])
                async with caller.quiet():
                    await async_wait_for(
                        lambda: "two people" in user_messages(chat.requests[-1])[-1],
                        timeout_s=30,
                        what="the second turn",
                    )

            await call(url, speak)
            merged = await metric(url, "voice_agent_false_ends_merged_total")

    # Barge-in as it always was: the heard turn stays a message of its own (its answer was
    # cut inside its first sentence, so no spoken sentence of it is in the context).
    said = [normalized(m) for m in user_messages(chat.requests[-1])]
    assert (said[0], said[-1]) == ("i would like to book a table", "for two people")
    assert merged == 0


def _phrase_s(utterance: Utterance, index: int) -> float:
    """The length of one phrase of ``utterance`` at 8 kHz."""
    alone = Utterance(utterance.kind, (utterance.phrases[index],), ())
    return alone.audio(8000)[1]


# ----------------------------------------------------------------------------- eager answers


@contextmanager
def released_when(chat: ChatServer, requests: int, peer: RealtimePeer) -> Iterator[None]:
    """Hold the STT's final transcripts until the chat peer has seen ``requests`` requests."""
    assert peer.hold_finals is not None
    hold = peer.hold_finals

    async def release() -> None:
        await async_wait_for(
            lambda: len(chat.requests) >= requests, timeout_s=30, what="the eager request"
        )
        await asyncio.sleep(0.2)  # its answer is back and held before the final arrives
        hold.set()

    task = asyncio.get_running_loop().create_task(release())
    try:
        yield
    finally:
        task.cancel()


def scripted_stt(interim: str, final: str) -> RealtimePeer:
    """A realtime peer that hears ``interim`` at once and answers ``final`` when let go."""

    async def words(send: Send, generation: Generation) -> None:
        if generation.appends == 1:
            await send(TranscriptionDelta(interim))

    return RealtimePeer(transcript=final, on_append=words, hold_finals=asyncio.Event())


async def ask(url: str, text: str) -> TwilioCaller:
    from tests.fakes.twilio_caller import ulaw_speech

    async def speak(caller: TwilioCaller) -> None:
        await caller.speak(ulaw_speech(text))
        await caller.send([SILENCE] * int(1.0 / FRAME_S))
        async with caller.quiet():
            await async_wait_for(lambda: len(caller.loud_at) > 0, timeout_s=15, what="the answer")
            await async_wait_for(  # the whole answer played: the call record has heard it
                lambda: time.monotonic() - caller.loud_at[-1] > 0.8,
                timeout_s=15,
                what="the end of the answer",
            )

    return await call(url, speak)


async def test_an_eager_answer_is_kept_when_the_final_transcript_matches(
    redacted_log: list[str],
) -> None:
    peer = scripted_stt("What time is it", "What time is it?")
    with ChatServer(script=echo) as chat:
        async with peer:
            with phone_server(peer.url, "voxtral-test", chat, eager_answer=True) as (url, app):
                with released_when(chat, 1, peer):
                    await ask(url, "what time is it")
                kept = await metric(url, 'voice_agent_eager_answers_total{outcome="kept"}')
                spoken = " ".join(bot_said(app))

    assert len(chat.requests) == 1  # the eager request was the answer: none after the final
    assert user_messages(chat.requests[0]) == ["What time is it"]
    assert kept == 1
    assert normalized(spoken) == "you asked what time is it"
    assert quoted_in(redacted_log, "what time is it") == []


async def test_an_eager_answer_is_restarted_on_the_final_text_when_it_differs(
    redacted_log: list[str],
) -> None:
    peer = scripted_stt("I would like to book a table", "I would like to book a table for two.")
    with ChatServer(script=echo) as chat:
        async with peer:
            with phone_server(peer.url, "voxtral-test", chat, eager_answer=True) as (url, app):
                with released_when(chat, 1, peer):
                    await ask(url, "i would like to book a table for two")
                restarted = await metric(
                    url, 'voice_agent_eager_answers_total{outcome="restarted"}'
                )
                spoken = " ".join(bot_said(app))

    eager, final = chat.requests
    assert user_messages(eager) == ["I would like to book a table"]
    # The context holds only the final words; nothing of the eager answer was said.
    assert user_messages(final) == ["I would like to book a table for two."]
    assert roles(final) == ["user"]
    assert restarted == 1
    assert normalized(spoken) == "you asked i would like to book a table for two"
    assert quoted_in(redacted_log, "book a table") == []


def bot_said(app: FastAPI) -> list[str]:
    registry = app.state.registry
    calls = registry.recent() + registry.calls()
    return [text for c in calls for text in c.bot_transcript]


# ----------------------------------------------------------------------------- frame by frame


def final(text: str) -> TranscriptionFrame:
    frame = TranscriptionFrame(text, "caller", "now")
    frame.finalized = True
    return frame


def user_params() -> LLMUserAggregatorParams:
    """The turn strategies of a plain silence-ended turn, as in the pipeline."""
    return LLMUserAggregatorParams(
        user_turn_strategies=UserTurnStrategies(
            start=[VADUserTurnStartStrategy(), TranscriptionUserTurnStartStrategy()],
            stop=[SpeechTimeoutUserTurnStopStrategy(user_speech_timeout=0.0)],
        )
    )


async def last_request(aggregator: LLMUserAggregator, frames: list[Frame]) -> list[str]:
    """The user messages of the last LLM request the aggregator made."""
    down, _ = await run_test(aggregator, frames_to_send=frames)
    contexts = [f for f in down if isinstance(f, LLMContextFrame)]
    return [str(m["content"]) for m in contexts[-1].context.get_messages()]  # type: ignore[index]


# A turn, then the rest of the sentence as an interim with its final right behind it (our
# STT sends the last delta and ``done`` together): the interim starts a new turn, which
# interrupts the bot while the final is still queued in the aggregator.
FALSE_END_BY_INTERIM: list[Frame] = [
    VADUserStartedSpeakingFrame(),
    SleepFrame(0.1),
    VADUserStoppedSpeakingFrame(stop_secs=0.2),
    SleepFrame(0.1),
    final("I would like to book a table."),
    SleepFrame(0.3),
    InterimTranscriptionFrame("for two", "caller", "now"),
    final("for two people."),
    SleepFrame(0.5),
]


async def test_pipecats_aggregator_loses_a_final_queued_behind_the_interim_that_interrupts() -> (
    None
):
    # Why ours overrides ``broadcast_interruption``; when this fails, Pipecat has fixed it.
    stock = LLMUserAggregator(LLMContext(messages=[]), params=user_params())
    frames = [*FALSE_END_BY_INTERIM[:-1], SleepFrame(5.5)]  # its stop watchdog ends the turn
    messages = await last_request(stock, frames)
    assert not any("two people" in m for m in messages), messages


async def test_the_words_queued_behind_an_interrupting_interim_reach_the_llm_in_one_turn() -> None:
    ours = TentativeAnswerUserAggregator(LLMContext(messages=[]), params=user_params())
    assert await last_request(ours, FALSE_END_BY_INTERIM) == [
        "I would like to book a table. for two people."
    ]


async def test_an_eager_answer_is_withdrawn_when_the_user_goes_on_within_the_turn() -> None:
    ours = TentativeAnswerUserAggregator(
        LLMContext(messages=[]), params=user_params(), eager_answer=True
    )
    frames: list[Frame] = [
        VADUserStartedSpeakingFrame(),
        SleepFrame(0.1),
        VADUserStoppedSpeakingFrame(stop_secs=0.2),
        EagerTranscriptionFrame("book a table", "caller", "now"),
        SleepFrame(0.1),
        VADUserStartedSpeakingFrame(),  # "... for two"
        SleepFrame(0.1),
        VADUserStoppedSpeakingFrame(stop_secs=0.2),
        SleepFrame(0.1),
        final("Book a table for two."),
        SleepFrame(0.3),
    ]
    down, _ = await run_test(ours, frames_to_send=frames)
    answers = [f for f in down if isinstance(f, (LLMContextFrame, EagerEndOfTurnCancelFrame))]
    assert [(type(f), getattr(f, "speculation", None)) for f in answers] == [
        (LLMContextFrame, True),  # started on "book a table" ...
        (EagerEndOfTurnCancelFrame, None),  # ... withdrawn when the user went on ...
        (LLMContextFrame, False),  # ... and answered once the turn was over
    ]
    last = answers[-1]
    assert isinstance(last, LLMContextFrame)
    assert [m["content"] for m in last.context.get_messages()] == ["Book a table for two."]  # type: ignore[index]


# ----------------------------------------------------------------------------- answer ahead


def answering_ahead(p_end: float) -> LLMUserAggregatorParams:
    """The adaptive strategy as the default profile sets it, answering ahead of the model's
    wait; Smart Turn calls every pause complete, the text model reads ``p_end``."""
    settings = TurnSettings()
    return LLMUserAggregatorParams(
        user_turn_strategies=UserTurnStrategies(
            start=[VADUserTurnStartStrategy(), TranscriptionUserTurnStartStrategy()],
            stop=[
                AdaptiveUserTurnStopStrategy(
                    unfinished_wait_s=settings.unfinished_wait_s,
                    turn_analyzer=ScriptedTurnAnalyzer(EndOfTurnState.COMPLETE),
                    text_model=ScriptedTextModel(lambda _text: p_end),
                    text_end_p=settings.text_end_p,
                    text_end_wait_s=settings.text_end_wait_s,
                    text_unfinished_p=settings.text_unfinished_p,
                    answer_ahead=True,
                )
            ],
        )
    )


def transcribed(text: str) -> list[Frame]:
    """What our STT sends for a VAD segment: its final transcript, then the segment's end."""
    return [final(text), SpeechSegmentTranscribedFrame(text)]


def answers(down: Sequence[Frame]) -> list[tuple[type, bool | None]]:
    """The LLM requests (speculative or not) and withdrawals the aggregator sent, in order."""
    return [
        (type(f), getattr(f, "speculation", None))
        for f in down
        if isinstance(f, (LLMContextFrame, EagerEndOfTurnCancelFrame))
    ]


AGGREGATORS = pytest.mark.parametrize(
    "aggregator_class",
    [TentativeAnswerUserAggregator, LLMUserAggregator],
    ids=["ours", "Pipecat's (the strategy in any bot)"],
)


@AGGREGATORS
async def test_a_turn_the_models_call_finished_is_answered_while_its_wait_runs_out(
    aggregator_class: type[LLMUserAggregator],
) -> None:
    ours = aggregator_class(LLMContext(messages=[]), params=answering_ahead(0.4))
    frames: list[Frame] = [
        VADUserStartedSpeakingFrame(),
        SleepFrame(0.1),
        VADUserStoppedSpeakingFrame(stop_secs=0.2),
        SleepFrame(0.1),
        *transcribed("I would like a table for two people."),
        SleepFrame(1.2),  # the model's wait (0.8 s) runs out
    ]
    down, _ = await run_test(ours, frames_to_send=frames)
    kinds = [type(f) for f in down]

    assert answers(down) == [(LLMContextFrame, True)]  # one request, kept: none at the end
    assert kinds.index(LLMContextFrame) < kinds.index(UserStoppedSpeakingFrame)  # ahead of it
    assert [m["content"] for m in ours._context.get_messages()] == [  # type: ignore[index]
        "I would like a table for two people."
    ]


@AGGREGATORS
async def test_an_answer_ahead_is_withdrawn_when_the_user_goes_on_within_the_wait(
    aggregator_class: type[LLMUserAggregator],
) -> None:
    ours = aggregator_class(LLMContext(messages=[]), params=answering_ahead(0.4))
    sent = time.time()  # the VAD's stops are stamped when it made them, as the VAD stamps them
    frames: list[Frame] = [
        VADUserStartedSpeakingFrame(),
        SleepFrame(0.1),
        VADUserStoppedSpeakingFrame(stop_secs=0.2, timestamp=sent + 0.1),
        SleepFrame(0.1),
        *transcribed("I need apples."),
        SleepFrame(0.3),
        VADUserStartedSpeakingFrame(),  # "... and bread"
        SleepFrame(0.1),
        VADUserStoppedSpeakingFrame(stop_secs=0.2, timestamp=sent + 0.6),
        SleepFrame(0.1),
        *transcribed("And bread."),
        SleepFrame(1.2),
    ]
    down, _ = await run_test(ours, frames_to_send=frames)
    assert answers(down) == [
        (LLMContextFrame, True),  # started on "I need apples." ...
        (EagerEndOfTurnCancelFrame, None),  # ... withdrawn when the user went on ...
        (LLMContextFrame, True),  # ... started again on both parts, and kept
    ]
    requests = [f for f in down if isinstance(f, LLMContextFrame)]
    assert [m["content"] for m in requests[-1].context.get_messages()] == [  # type: ignore[index]
        "I need apples. And bread."
    ]


async def test_a_turn_the_model_does_not_call_finished_is_not_answered_ahead() -> None:
    ours = TentativeAnswerUserAggregator(LLMContext(messages=[]), params=answering_ahead(0.05))
    frames: list[Frame] = [
        VADUserStartedSpeakingFrame(),
        SleepFrame(0.1),
        VADUserStoppedSpeakingFrame(stop_secs=0.2),
        SleepFrame(0.1),
        *transcribed("I would like a table for two people."),
        SleepFrame(1.6),  # the bound (1.3 s)
    ]
    down, _ = await run_test(ours, frames_to_send=frames)
    assert answers(down) == [(LLMContextFrame, False)]  # one request, when the turn ended
