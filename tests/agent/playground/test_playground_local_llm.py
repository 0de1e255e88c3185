"""The playground in headless Chromium with the default profile's real model answering.

The same page, browser and spoken question as ``test_playground_browser.py``, but the LLM is
the offline profile's own (llama.cpp's server with the packaged SmolLM2-135M-Instruct,
``local_llm``): the page shows a generated answer, not an echo of the question, and the
latency bar gives the model's time to first token its own stage.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI

from agent.config import LLMSettings
from tests.agent.playground.browser import Browser
from tests.agent.playground.test_playground_browser import (
    QUESTION,
    READ_THE_BAR,
    heard_the_question,
)
from tests.agent.transports.stack import async_wait_for, running_server, stack_settings
from tests.conftest import requires_chromium, requires_espeak, requires_local_llm
from tests.fakes.speech import speech_at, words, write_wav
from tests.fakes.speech_server import SpeechServer

pytestmark = [requires_espeak, requires_chromium, requires_local_llm, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def server(
    asr_server_url: str, asr_model_name: str, local_llm: LLMSettings
) -> Iterator[tuple[str, FastAPI]]:
    with SpeechServer(voice="espeak") as tts:
        settings = stack_settings(asr_url=asr_server_url, asr_model=asr_model_name, tts_url=tts.url)
        settings = settings.model_copy(update={"llm": local_llm})
        with running_server(settings) as running:
            yield running


async def test_the_playground_answers_a_spoken_question_with_a_generated_sentence(
    server: tuple[str, FastAPI], turn_log: list[dict[str, Any]]
) -> None:
    url, app = server
    registry = app.state.registry
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        silence = bytes(2 * 48_000)
        mic = silence * 4 + speech_at(QUESTION, 48_000) + silence * 20
        browser = Browser("about:blank", write_wav(Path(tmp) / "mic.wav", mic, 48_000), Path(tmp))
        try:
            await browser.attach()
            await browser.send("Runtime.enable")
            await browser.send("Page.navigate", url=url + "/")
            for _ in range(200):
                found = await browser.js("!!document.getElementById('connect')")
                if found and await browser.js("document.readyState") == "complete":
                    break
                await asyncio.sleep(0.1)
            await browser.js("document.getElementById('connect').click()")

            async def text(selector: str) -> str:
                value = await browser.js(
                    f"Array.from(document.querySelectorAll('{selector}'))"
                    ".map(e => e.textContent).join(' ')"
                )
                return str(value or "")

            deadline = time.monotonic() + 60
            user = bot = ""
            bar = None
            while time.monotonic() < deadline:
                user, bot = await text(".msg.user .text"), await text(".msg.bot .text")
                bar = await browser.js(READ_THE_BAR)
                if "paris" in words(user) and len(words(bot)) >= 3 and bar:
                    break
                await asyncio.sleep(0.25)
            assert heard_the_question(user), (user, bot)
            # A generated sentence: words of its own, not the echo of the question.
            assert len(words(bot)) >= 3, (user, bot)
            assert not bot.strip().startswith("You said"), bot
            assert set(words(bot)) != set(words(user)), (user, bot)

            # The bar's LLM stage is the model's time to first token, as the server measured.
            assert bar is not None
            answered = [r for r in turn_log if r["complete"]]
            assert answered, turn_log
            measured = answered[0]
            before = max(measured["vad_stop_ms"], measured["stt_final_ms"])
            llm_added = measured["llm_first_token_ms"] - before
            assert llm_added > 0, measured
            assert bar["stages"]["llm_first_token"] == str(llm_added), (bar, measured)

            await browser.js("document.getElementById('connect').click()")  # Disconnect
            await async_wait_for(
                lambda: registry.stats.active == 0, timeout_s=15, what="the call to end"
            )
        finally:
            await browser.close()
