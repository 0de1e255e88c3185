"""Interpreted sessions end to end, on real sockets: two parties in two calls, each hearing
the other in its own language.

The server runs as in production (``create_app``) with the offline ASR server (English:
tiny.en), an espeak speech server as the TTS, and the shared OpenAI-compatible chat server as
the translating LLM. The parties are carrier-protocol callers (:mod:`tests.fakes.twilio_caller`)
and an aiortc WebRTC peer (:mod:`tests.fakes.webrtc_caller`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest
import websockets

from agent.config import Settings
from agent.interpreter.notices import JOINED, NOTICES, PEER_LEFT, WAITING
from tests.agent.transports.carriers import Carrier
from tests.agent.transports.stack import (
    CLIENT_RATE,
    WebRTCClient,
    async_wait_for,
    running_server,
    stack_settings,
)
from tests.conftest import quoted_in, requires_espeak
from tests.fakes.chat_server import ChatServer
from tests.fakes.speech import speech_at, word_error_rate
from tests.fakes.speech_server import SpeechServer
from tests.fakes.telnyx_caller import PUBLIC_KEY as TELNYX_PUBLIC_KEY
from tests.fakes.telnyx_caller import TelnyxCaller, place_call, post_webhook
from tests.fakes.twilio_caller import TOKEN, TwilioCaller, ulaw_speech
from tests.pipelines.test_translation import SENTENCE, french

OPERATOR = {"Authorization": "Bearer operator-token"}
AGENT_SENTENCE = "turn on the lights in the kitchen"
IN_ENGLISH = "I will call you back tomorrow morning."
"""What the fake model answers when asked to translate into English."""


def translate(messages: list[dict[str, Any]]) -> str:
    """The fake model: French word by word when asked for French, a fixed English line when
    asked for English."""
    if "into English" in str(messages[0]["content"]):
        return IN_ENGLISH
    return french(messages)


def close_enough(sentence: str, finals: list[str]) -> bool:
    """Whether the recognizer's finals say ``sentence``: within 20 % WER as one final; split
    at a pause (a loaded machine), each part is decoded without the other's context, so
    tiny.en may slip a word more ("the light in my kitchen"): within 35 %."""
    return word_error_rate(sentence, " ".join(finals)) <= (0.2 if len(finals) == 1 else 0.35)


@pytest.fixture
def chat() -> Iterator[ChatServer]:
    with ChatServer(script=translate) as server:
        yield server


def interpreter_settings(asr_url: str, asr_model: str, llm_url: str, tts_url: str) -> Settings:
    """The server's settings: phone calls (Twilio auth on), an operator token, an LLM."""
    settings = stack_settings(
        asr_url=asr_url, asr_model=asr_model, tts_url=tts_url, api_token="operator-token"
    )
    settings.llm = settings.llm.model_copy(
        update={"kind": "openai", "base_url": llm_url, "model": "translator"}
    )
    settings.twilio.auth_token = TOKEN
    return settings


async def new_session(url: str, **languages: str) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{url}/interpreter/sessions", json=languages, headers=OPERATOR, timeout=10
        )
    assert response.status_code == 201, response.text
    return response.json()


@asynccontextmanager
async def phone_party(url: str, n: int, session_id: str, party: str) -> AsyncIterator[TwilioCaller]:
    """A Twilio caller whose stream carries the session's ``<Parameter>``s (as the TwiML of the
    webhook URL the session's ``join`` names hands them over), streaming silence throughout."""
    async with Carrier("twilio").call(url, n) as caller:
        await caller.start(
            parameters={
                "token": caller.stream_token(),
                "interpreter_session": session_id,
                "party": party,
            }
        )
        yield caller


def told(client: Any, kind: str) -> Callable[[], bool]:
    """Whether the WebRTC ``client`` has had a ``server-message`` of ``kind`` (to wait on)."""
    return lambda: any(m["data"].get("type") == kind for m in client.rtvi("server-message"))


def is_notice(request: dict[str, Any]) -> bool:
    """Whether a chat request translates one of the session's notices (not a party's words)."""
    return request["messages"][-1]["content"] in NOTICES


def in_french(notice: str) -> str:
    """A notice as the fake model translates it into French (and the agent hears it)."""
    return french([{"role": "user", "content": notice}])


def heard(call: Any) -> str:
    """Everything the TTS played into ``call`` (its record), as one text."""
    return " ".join(call.bot_transcript)


def calls_by_party(app: Any) -> dict[str, Any]:
    return {c.attributes.get("party"): c for c in app.state.registry.calls()}


@requires_espeak
async def test_two_phone_callers_each_hear_the_other_in_their_language(
    asr_server_url: str, asr_model_name: str, chat: ChatServer, redacted_log: list[str]
) -> None:
    with SpeechServer(voice="espeak") as tts:
        settings = interpreter_settings(asr_server_url, asr_model_name, chat.base_url, tts.url)
        with running_server(settings) as (url, app):
            session = await new_session(url, caller_language="English", agent_language="French")
            sid = session["session_id"]
            await async_wait_for(
                lambda: any("notices translated into 'French'" in line for line in redacted_log),
                timeout_s=15,
                what="the notices in French",
            )
            async with phone_party(url, 1, sid, "caller") as caller:
                caller_line = asyncio.create_task(caller.silence(60))
                # Alone: the caller is told to wait (spoken into the call).
                await async_wait_for(
                    lambda: caller.count("media") > 10, timeout_s=30, what="the waiting message"
                )
                call_a = calls_by_party(app)["caller"]
                await async_wait_for(
                    lambda: WAITING in heard(call_a), timeout_s=15, what="waiting played"
                )
                async with phone_party(url, 2, sid, "agent") as agent:
                    agent_line = asyncio.create_task(agent.silence(60))
                    await async_wait_for(
                        lambda: "agent" in calls_by_party(app), timeout_s=15, what="the agent"
                    )
                    call_b = calls_by_party(app)["agent"]
                    await async_wait_for(
                        lambda: JOINED in heard(call_a) and in_french(JOINED) in heard(call_b),
                        timeout_s=30,
                        what="both told they are joined",
                    )
                    caller_line.cancel()
                    await asyncio.gather(caller_line, return_exceptions=True)
                    await caller.speak(ulaw_speech(SENTENCE))
                    caller_line = asyncio.create_task(caller.silence(60))
                    await async_wait_for(
                        lambda: "demain matin" in heard(call_b),
                        timeout_s=45,
                        what="the translation spoken to the agent",
                    )
                    heard_by_agent = agent.media_received
                    # The caller hangs up: the agent is told, then its call ends cleanly.
                    caller_line.cancel()
                    await caller.stop()
                    await caller.ws.close()
                    await asyncio.wait_for(agent.closed.wait(), timeout=45)
                    agent_line.cancel()
                    await asyncio.gather(caller_line, agent_line, return_exceptions=True)
            await async_wait_for(
                lambda: not app.state.registry.calls(), timeout_s=15, what="both calls ended"
            )
    # Each call holds what its party said and what it heard in its own language.
    assert close_enough(SENTENCE, call_a.user_transcript)
    assert "demain" not in heard(call_a)  # not spoken back to its speaker
    assert call_b.user_transcript == []
    # The agent heard the notices in French; the caller, in English, as written.
    assert JOINED not in heard(call_b) and in_french(WAITING) not in heard(call_a)
    assert heard(call_b).endswith(in_french(PEER_LEFT)) and agent.media_received > heard_by_agent
    assert agent.ws.close_code == 1000
    assert call_b.end_reason == "the caller left the interpreted session"
    assert call_a.attributes["interpreter_session"] == sid
    # The notices into French, once; then requests only in the caller → agent direction (the
    # agent was silent): one per final transcript, so one, or two where a loaded machine's
    # VAD split the sentence at a pause.
    notices = [r for r in chat.requests if is_notice(r)]
    assert sorted(r["messages"][1]["content"] for r in notices) == sorted(NOTICES)
    utterances = [r for r in chat.requests if r not in notices]
    assert 1 <= len(utterances) <= 2
    for request in chat.requests:
        assert "from English into French" in request["messages"][0]["content"]
    assert close_enough(SENTENCE, [request["messages"][1]["content"] for request in utterances])
    assert quoted_in(redacted_log, "tomorrow morning", "demain matin") == []


@requires_espeak
async def test_a_telnyx_caller_joins_through_its_webhook_url_and_a_bad_session_is_told_why(
    asr_server_url: str, asr_model_name: str, chat: ChatServer
) -> None:
    with SpeechServer(voice="espeak") as tts:
        settings = interpreter_settings(asr_server_url, asr_model_name, chat.base_url, tts.url)
        settings.telnyx = settings.telnyx.model_copy(update={"public_key": TELNYX_PUBLIC_KEY})
        with running_server(settings) as (url, app):
            session = await new_session(url, caller_language="English", agent_language="French")
            sid, join = session["session_id"], session["join"]
            webhook = join["caller"]["telnyx_webhook"]
            assert webhook.startswith(f"{url}/telephony/telnyx?")
            # The TeXML hands the session and the party on to the stream, beside its token.
            stream_url = await place_call(url, query=webhook.partition("?")[2])
            named = parse_qs(stream_url.partition("?")[2])
            assert named["interpreter_session"] == [sid] and named["party"] == ["caller"]
            async with websockets.connect(stream_url) as ws:
                caller = TelnyxCaller(ws)
                await caller.start()
                await async_wait_for(
                    lambda: "caller" in calls_by_party(app), timeout_s=15, what="the caller"
                )
                async with phone_party(url, 2, sid, "agent"):
                    await async_wait_for(
                        lambda: all(p["present"] for p in parties(app, sid).values()),
                        timeout_s=30,
                        what="both parties there",
                    )
                await asyncio.wait_for(caller.closed.wait(), timeout=45)  # the agent left
            await async_wait_for(
                lambda: not app.state.registry.calls(), timeout_s=15, what="both calls ended"
            )
            # A webhook URL that names no live session: the caller hears why, nothing streams.
            unknown = await post_webhook(url, query=f"interpreter_session={sid}x&party=caller")
            ended = await post_webhook(url, query=f"interpreter_session={sid}&party=caller")
    for answer, why in ((unknown, "unknown"), (ended, "ended")):
        assert answer.status_code == 200 and "<Stream" not in answer.text, answer.text
        assert "<Hangup" in answer.text and why in answer.text, answer.text


def parties(app: Any, session_id: str) -> dict[str, Any]:
    """An interpreted session's parties as ``GET /interpreter/sessions/{id}`` shows them."""
    session = app.state.interpreter.find(session_id)
    return session.as_dict()["parties"] if session else {}


@requires_espeak
async def test_a_phone_caller_and_a_browser_agent_talk_both_ways_with_captions_on_the_screen(
    asr_server_url: str, asr_model_name: str, chat: ChatServer
) -> None:
    with SpeechServer(voice="espeak") as tts:
        settings = interpreter_settings(asr_server_url, asr_model_name, chat.base_url, tts.url)
        with running_server(settings) as (url, app):
            session = await new_session(url, caller_language="English", agent_language="French")
            sid = session["session_id"]
            agent = WebRTCClient()
            try:
                joined = await agent.connect(
                    url, request_data=session["join"]["agent"]["webrtc_request_data"]
                )
                assert joined.status_code == 200, joined.text
                await async_wait_for(
                    told(agent, "interpreter-waiting"), timeout_s=30, what="the agent told to wait"
                )
                async with phone_party(url, 1, sid, "caller") as caller:
                    async with caller.quiet():
                        await async_wait_for(
                            told(agent, "interpreter-joined"),
                            timeout_s=30,
                            what="the agent told the caller joined",
                        )
                    await caller.speak(ulaw_speech(SENTENCE))
                    async with caller.quiet():
                        loud_before = agent.loud_frames

                        def captions(party: str) -> list[dict[str, Any]]:
                            return [
                                m["data"]
                                for m in agent.rtvi("server-message")
                                if m["data"].get("type") == "translation"
                                and m["data"]["party"] == party
                                and m["data"]["final"]
                            ]

                        await async_wait_for(
                            lambda: bool(captions("caller")),
                            timeout_s=45,
                            what="the caller's caption",
                        )
                        await async_wait_for(
                            lambda: agent.loud_frames > loud_before + 25,
                            timeout_s=45,
                            what="the caller's words spoken to the agent",
                        )
                        # The agent answers; the caller hears it in English.
                        call_a = calls_by_party(app)["caller"]
                        agent.mic.say(speech_at(AGENT_SENTENCE, CLIENT_RATE))
                        await async_wait_for(
                            lambda: IN_ENGLISH in heard(call_a),
                            timeout_s=45,
                            what="the agent's words spoken to the caller",
                        )
                        await async_wait_for(
                            lambda: bool(captions("agent")),
                            timeout_s=15,
                            what="the agent's caption",
                        )
            finally:
                await agent.close()
    # A loaded machine may end a sentence at a pause: one or two finals per side.
    from_caller = captions("caller")
    assert 1 <= len(from_caller) <= 2, from_caller
    assert close_enough(SENTENCE, [c["source"] for c in from_caller]), from_caller
    assert "demain matin" in " ".join(c["text"] for c in from_caller)
    assert {(c["source_language"], c["target_language"]) for c in from_caller} == {
        ("English", "French")
    }
    said = captions("agent")
    assert 1 <= len(said) <= 2, said
    assert close_enough(AGENT_SENTENCE, [c["source"] for c in said]), said
    assert {(c["text"], c["source_language"], c["target_language"]) for c in said} == {
        (IN_ENGLISH, "French", "English")
    }
    systems = [r["messages"][0]["content"] for r in chat.requests if not is_notice(r)]
    assert len(systems) == len(from_caller) + len(said)
    assert any("from English into French" in s for s in systems), systems
    assert any("from French into English" in s for s in systems), systems
