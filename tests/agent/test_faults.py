"""Network faults between the server and each peer, and between a caller and the server, on a
real phone call: a TCP fault proxy freezes or resets the STT, resets the TTS and the LLM
mid-answer, and slows the caller's line. The call goes on and answers the next question."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import websockets

from agent.stt import RealtimeSTTParams
from tests.agent.transports.stack import (
    async_wait_for,
    running_server,
    server_tasks,
    stack_settings,
)
from tests.conftest import quoted_in, requires_espeak
from tests.fakes.chat_server import ChatServer
from tests.fakes.serving import port_of
from tests.fakes.speech_server import SpeechServer
from tests.fakes.tcp_fault_proxy import TcpFaultProxy
from tests.fakes.twilio_caller import TwilioCaller, ulaw_speech

pytestmark = [requires_espeak, pytest.mark.timeout(120)]

WEATHER = "what is the weather like in paris today"
TABLE = "i would like to book a table for two people"


@asynccontextmanager
async def phone_call(url: str) -> AsyncIterator[TwilioCaller]:
    async with websockets.connect(url.replace("http://", "ws://") + "/telephony/twilio/ws") as ws:
        caller = TwilioCaller(ws)
        await caller.start()
        async with caller.quiet():  # the line carries silence between questions
            await asyncio.sleep(0.3)
        yield caller
        await caller.stop()


async def ask(caller: TwilioCaller, question: str) -> None:
    """Say ``question`` and wait until the bot's answer is heard."""
    before = caller.count("media")
    await caller.speak(ulaw_speech(question))
    async with caller.quiet():
        await async_wait_for(
            lambda: caller.count("media") >= before + 10,
            timeout_s=40,
            what=f"an answer to {question!r}",
        )


@pytest.mark.parametrize("fault", ["freeze", "reset"])
async def test_an_stt_link_that_freezes_or_resets_mid_turn_still_gets_the_turn_transcribed(
    asr_server_url: str, asr_model_name: str, fault: str
) -> None:
    async with TcpFaultProxy(port_of(asr_server_url)) as proxy:
        stt_url = f"ws://127.0.0.1:{proxy.port}/v1/realtime"
        with SpeechServer(voice="espeak") as tts:
            settings = stack_settings(asr_url=stt_url, asr_model=asr_model_name, tts_url=tts.url)
            settings.stt.params = RealtimeSTTParams(
                preroll_s=0.4, stall_timeout_s=2.0, final_timeout_s=2.0, reconnect_min_wait_s=0.1
            )
            with running_server(settings) as (url, app):
                async with phone_call(url) as caller:
                    speaking = asyncio.create_task(ask(caller, WEATHER))
                    await asyncio.sleep(1.0)  # mid-sentence
                    proxy.freeze() if fault == "freeze" else proxy.reset()
                    await speaking
                    heard = " ".join(app.state.registry.calls()[0].user_transcript).lower()
                    assert "paris" in heard
        assert proxy.connections >= 2  # the turn was replayed on a fresh connection


async def test_a_tts_reset_mid_answer_costs_that_answer_only(
    asr_server_url: str, asr_model_name: str
) -> None:
    with SpeechServer(voice="espeak") as tts:
        async with TcpFaultProxy(port_of(tts.url), bytes_per_s=20_000) as proxy:
            tts_url = f"http://127.0.0.1:{proxy.port}"
            settings = stack_settings(
                asr_url=asr_server_url, asr_model=asr_model_name, tts_url=tts_url
            )
            with running_server(settings) as (url, app):
                async with phone_call(url) as caller:
                    before = caller.count("media")
                    await caller.speak(ulaw_speech(WEATHER))
                    async with caller.quiet():
                        await async_wait_for(
                            lambda: caller.count("media") > before,
                            timeout_s=40,
                            what="answer audio",
                        )
                        proxy.reset()  # the speech server's line dies mid-answer
                        await asyncio.sleep(1.0)
                    await ask(caller, TABLE)  # the next question is answered
                    assert app.state.registry.stats.active == 1


async def test_an_llm_stream_reset_mid_answer_costs_that_answer_only(
    asr_server_url: str, asr_model_name: str, redacted_log: list[str]
) -> None:
    chat = ChatServer(answer=" ".join(["This answer is long and streamed slowly."] * 20))
    with chat, SpeechServer(voice="espeak") as tts:
        async with TcpFaultProxy(port_of(chat.url), bytes_per_s=2_000) as proxy:
            settings = stack_settings(
                asr_url=asr_server_url, asr_model=asr_model_name, tts_url=tts.url
            )
            settings.llm.kind = "openai"
            settings.llm.base_url = f"http://127.0.0.1:{proxy.port}/v1"
            settings.llm.model = "chat-server"
            with running_server(settings) as (url, app):
                async with phone_call(url) as caller:
                    await caller.speak(ulaw_speech(WEATHER))
                    async with caller.quiet():
                        await async_wait_for(
                            lambda: len(chat.requests) == 1, timeout_s=40, what="the chat request"
                        )
                        await asyncio.sleep(0.5)
                        proxy.reset()  # mid-stream
                        await asyncio.sleep(1.0)
                    asked = len(chat.requests)  # (the client may have retried the first)
                    await caller.speak(ulaw_speech(TABLE))  # over whatever is still playing
                    async with caller.quiet():
                        await async_wait_for(
                            lambda: len(chat.requests) > asked, timeout_s=40, what="a new request"
                        )
                        assert "paris" not in str(chat.requests[-1]["messages"][-1]).lower()
                        heard = caller.count("media")
                        await async_wait_for(
                            lambda: caller.count("media") >= heard + 10,
                            timeout_s=40,
                            what="the second answer",
                        )
                    assert app.state.registry.stats.active == 1
    # The error path (a reset stream, logged as errors) quotes neither side of the call.
    assert quoted_in(redacted_log, "paris", "table", "streamed slowly") == []


async def test_a_slow_narrow_line_to_the_caller_still_carries_the_call(
    asr_server_url: str, asr_model_name: str
) -> None:
    with SpeechServer(voice="espeak") as tts:
        settings = stack_settings(asr_url=asr_server_url, asr_model=asr_model_name, tts_url=tts.url)
        with running_server(settings) as (url, app):
            # 150 ms each way and 32 kB/s: a bad mobile link (Twilio's stream needs ~8 kB/s)
            async with TcpFaultProxy(port_of(url), delay_s=0.15, bytes_per_s=32_000) as proxy:
                async with phone_call(f"http://127.0.0.1:{proxy.port}") as caller:
                    await ask(caller, WEATHER)
                    assert app.state.registry.stats.active == 1


async def test_a_caller_whose_side_half_closes_is_hung_up_on_and_leaves_nothing(
    asr_server_url: str, asr_model_name: str
) -> None:
    with SpeechServer(voice="espeak") as tts:
        settings = stack_settings(asr_url=asr_server_url, asr_model=asr_model_name, tts_url=tts.url)
        with running_server(settings) as (url, app):
            async with TcpFaultProxy(port_of(url)) as proxy:
                ws_url = f"ws://127.0.0.1:{proxy.port}/telephony/twilio/ws"
                async with websockets.connect(ws_url) as ws:
                    caller = TwilioCaller(ws)
                    await caller.start()
                    await caller.speak(ulaw_speech(WEATHER), stop_after=1.0)
                    registry = app.state.registry
                    assert registry.stats.active == 1
                    proxy.half_close(towards="upstream")  # the caller's side sends FIN
                    await async_wait_for(
                        lambda: registry.stats.active == 0, timeout_s=10, what="the hang-up"
                    )
            assert server_tasks(app) == []
