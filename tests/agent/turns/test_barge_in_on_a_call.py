"""On a real phone call, the VAD needs a short stretch of speech to start a turn while the bot
is quiet, a longer one while it speaks, and speech over the bot still interrupts it.

The VAD reports a start after ``turn.vad_start_secs`` (0.1 s) of speech while the bot is
quiet, so French "Oui." alone is answered (``test_short_wait_on_a_call.py``); while the bot
speaks, a start interrupts it, so there it needs ``turn.barge_in_secs`` (0.2 s, Pipecat's
start time). The turn-start strategy sets the VAD, the Pipecat way: a ``VADParamsUpdateFrame``
upstream to the VAD the phone transport hosts, which logs each setting it takes (``Setting
VAD params to: ...``). A clip too short to tell the two apart reliably on Silero's scores (a
0.15 s word is heard at 0.2 s in some window phases) is not a good witness, so the settings
are read from that log, and the interruption from the ``clear`` the caller gets.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator

import pytest
import websockets

from tests.agent.transports.stack import async_wait_for, phone_server
from tests.conftest import requires_espeak
from tests.fakes.twilio_caller import TwilioCaller, ulaw_speech

pytestmark = [requires_espeak, pytest.mark.conversation, pytest.mark.timeout(120)]

START_SECS = re.compile(r"Setting VAD params to: .*start_secs=([0-9.]+)")


@pytest.fixture
def vad_log() -> Iterator[list[str]]:
    """Pipecat's VAD analyzer's log lines while the test runs."""
    from loguru import logger

    lines: list[str] = []
    sink = logger.add(lines.append, level="DEBUG", filter="pipecat.audio.vad.vad_analyzer")
    try:
        yield lines
    finally:
        logger.remove(sink)


async def test_the_vad_needs_more_speech_over_the_bot_and_speech_still_interrupts(
    asr_server_url: str, asr_model_name: str, vad_log: list[str]
) -> None:
    with phone_server(asr_server_url, asr_model_name, max_calls=1) as (url, app):
        async with websockets.connect(
            url.replace("http://", "ws://") + "/telephony/twilio/ws", compression=None
        ) as ws:
            caller = TwilioCaller(ws, "CABARGEIN01")
            await caller.start()
            await caller.silence(0.3)
            await caller.speak(ulaw_speech("what is the weather like in paris today"))
            async with caller.quiet():  # "You said: what is the weather…": about 3 s
                await async_wait_for(
                    lambda: caller.count("media") >= 10, timeout_s=20, what="the bot's answer"
                )
            assert start_secs(vad_log) == [0.1, 0.2], "the bot speaks: 0.2 s to interrupt"

            clears = caller.count("clear")
            await caller.speak(ulaw_speech("please call me back tomorrow morning"))
            async with caller.quiet():
                await async_wait_for(
                    lambda: caller.count("clear") > clears, timeout_s=10, what="a barge-in"
                )
                await async_wait_for(
                    lambda: start_secs(vad_log)[-1] == 0.1,
                    timeout_s=10,
                    what="the VAD's turn start once the bot went quiet",
                )
            await caller.stop()
            await asyncio.wait_for(caller.closed.wait(), 10)
            await caller.close()
        registry = app.state.registry
        await async_wait_for(lambda: registry.stats.active == 0, timeout_s=15, what="call end")


def start_secs(log: list[str]) -> list[float]:
    """Each ``start_secs`` the call's VAD took, in order."""
    return [float(m.group(1)) for line in log if (m := START_SECS.search(line))]
