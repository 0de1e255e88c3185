"""The playground page in headless Chromium: connect, talk through a fake microphone, read.

Chromium (Debian's ``/usr/bin/chromium``) plays an espeak WAV as its microphone; the test
drives the page over the DevTools protocol with the ``websockets`` package, clicks Connect,
and waits until the page shows the user's words, the bot's reply and, under it, the turn's
latency bar, whose figures must be the server's own ``turn_latency`` measurement. A screenshot
is saved as ``playground.png`` in the test's pytest tmp dir (``bench/results/playground.png``,
shown in the README, is a copy of one).
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

from agent.observability.metrics import STAGES
from tests.agent.playground.browser import (
    Browser,
    async_wait_for_page,
    open_playground,
    screenshot_card,
)
from tests.agent.transports.stack import (
    async_wait_for,
    running_server,
    stack_settings,
)
from tests.conftest import requires_chromium, requires_espeak
from tests.fakes.chat_server import ChatServer
from tests.fakes.speech import speech_at, word_error_rate, words, write_wav
from tests.fakes.speech_server import SpeechServer

QUESTION = "what is the weather like in paris today"


def heard_the_question(user: str) -> bool:
    """The page shows the question as the recognizer heard it through Chromium. On a loaded
    2-core machine Chromium's capture (with echo cancellation, noise suppression and gain
    control on, as the page asks) has now and then garbled two of its eight words: "What is
    now ever like in Paris today?" (the same words with aiortc's jitter prefetch restored).
    The words themselves are checked with an aiortc caller (``tests/agent/transports/
    test_webrtc.py``); here the question must be recognizably the one asked."""
    return "paris" in words(user) and word_error_rate(QUESTION, user) <= 0.3


FOLLOW_UP = "turn on the lights in the kitchen"

pytestmark = [
    requires_espeak,
    pytest.mark.timeout(120),
    requires_chromium,
]


@pytest.fixture(scope="module")
def server(asr_server_url: str, asr_model_name: str) -> Iterator[tuple[str, FastAPI]]:
    with SpeechServer(voice="espeak") as tts:
        settings = stack_settings(asr_url=asr_server_url, asr_model=asr_model_name, tts_url=tts.url)
        with running_server(settings) as running:
            yield running


# Installed in the page before Connect: remembers what the meter and the "You" pill showed,
# so a short moment (the VAD hearing the user) is not missed between two polls.
WATCH_THE_METER = """
(() => {
window.__seen = {levels: [], heard: false};
const meter = document.getElementById('mic-level');
const pill = document.getElementById('user-speaking');
new MutationObserver(() => {
  window.__seen.levels.push(Number(meter.getAttribute('aria-valuenow')));
  if (meter.classList.contains('heard') && pill.classList.contains('active')) {
    window.__seen.heard = true;
  }
}).observe(document.body, {attributes: true, subtree: true});
return true;
})()
"""

# The latency bar under the bot's reply, as the page shows it.
READ_THE_BAR = """
(() => {
  const box = document.querySelector('.msg.bot .latency');
  if (!box) return null;
  const stages = {};
  for (const s of box.querySelectorAll('.stage')) {
    stages[s.dataset.stage] = s.querySelector('.ms').textContent;
  }
  const segments = Array.from(box.querySelectorAll('.seg'))
    .map(e => parseFloat(e.style.width));
  return {total: box.querySelector('.total').textContent, stages, segments};
})()
"""


async def test_the_playground_shows_the_turn_its_latency_and_the_microphone_level(
    server: tuple[str, FastAPI], turn_log: list[dict[str, Any]], tmp_path: Path
) -> None:
    url, app = server
    registry = app.state.registry
    # Chromium's helper processes may still write to the profile as it exits.
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        pcm = speech_at(QUESTION, 48_000)
        silence = bytes(2 * 48_000)
        follow_up = speech_at(FOLLOW_UP, 48_000)
        # Chromium starts the file at getUserMedia, before the call is up: lead with silence.
        # The follow-up comes once the answer is over, for the screenshot.
        mic = silence * 4 + pcm + silence * 6 + follow_up + silence * 12
        wav = write_wav(Path(tmp) / "mic.wav", mic, 48_000)
        browser = Browser("about:blank", wav, Path(tmp) / "profile")
        try:
            await browser.attach()
            await browser.send("Runtime.enable")
            await open_playground(browser, url + "/")
            assert await browser.js("document.getElementById('connect').textContent") == "Connect"
            assert await browser.js(WATCH_THE_METER)
            await browser.js("document.getElementById('connect').click()")

            async def text(selector: str) -> str:
                value = await browser.js(
                    f"Array.from(document.querySelectorAll('{selector}'))"
                    ".map(e => e.textContent).join(' ')"
                )
                return str(value or "")

            deadline = time.monotonic() + 40
            user = bot = ""
            bar = None
            while time.monotonic() < deadline:
                user, bot = await text(".msg.user .text"), await text(".msg.bot .text")
                bar = await browser.js(READ_THE_BAR)
                if "paris" in words(user) and bot.strip() and bar:
                    break
                await asyncio.sleep(0.25)
            status = await browser.js("document.getElementById('status').textContent")
            error = await browser.js("document.getElementById('error').textContent")
            assert heard_the_question(user), (user, bot, status, error)
            assert bot.strip(), (user, bot, status, error)
            assert status == "Connected"
            assert (
                await browser.js("document.getElementById('connect').textContent") == "Disconnect"
            )
            assert registry.stats.active == 1

            # The bar's figures are the server's measurement of this turn, stage by stage.
            answered = [r for r in turn_log if r["complete"]]
            assert len(answered) == 1, turn_log
            assert bar is not None, (user, bot)
            measured = answered[0]
            assert bar["total"] == f"{measured['first_audio_out_ms']} ms", (bar, measured)
            reached = 0
            for stage in STAGES:  # each stage shows the time it added to the one before
                at = measured[f"{stage}_ms"]
                assert isinstance(at, int), measured
                assert bar["stages"][stage] == str(max(0, at - reached)), (stage, bar, measured)
                reached = max(reached, at)
            # The bar's length is the total, on a scale of one second (or the turn, if longer).
            total = measured["first_audio_out_ms"]
            assert sum(bar["segments"]) == pytest.approx(100 * total / max(1000, total), abs=0.1)

            # The meter followed the microphone (up with the question, down in the silence),
            # and the server's VAD was seen hearing the user.
            seen = await browser.js("window.__seen")
            assert max(seen["levels"]) >= 30 and min(seen["levels"]) <= 10, seen["levels"][-50:]
            assert seen["heard"]

            # The screenshot: the answered turn, and the meter up while the follow-up is heard.
            await async_wait_for_page(
                browser,
                "document.getElementById('user-speaking').classList.contains('active') && "
                "Number(document.getElementById('mic-level').getAttribute('aria-valuenow')) >= 40",
                what="the follow-up question on the meter",
            )
            (tmp_path / "playground.png").write_bytes(await screenshot_card(browser))

            await browser.js("document.getElementById('connect').click()")  # Disconnect
            await async_wait_for(
                lambda: registry.stats.active == 0, timeout_s=15, what="the call to end"
            )
            assert await browser.js("document.getElementById('connect').textContent") == "Connect"
        finally:
            await browser.close()


SENTENCE = "please call me back tomorrow morning"
FRENCH = {"please": "s'il vous plaît", "call": "appelez", "me": "moi", "back": "en retour",
          "tomorrow": "demain", "morning": "matin"}  # fmt: skip


def french(messages: list[dict[str, Any]]) -> str:
    """A fixed word-by-word "translation" (the chat fake's script)."""
    said = str(messages[-1]["content"]).lower().strip(".").split()
    return " ".join(FRENCH.get(word, word) for word in said) + "."


async def test_the_playground_shows_a_translation_call_as_it_is_translated(
    asr_server_url: str, asr_model_name: str, tmp_path: Path
) -> None:
    """With ``translation.enabled`` the page shows the speaker's words and, under them, their
    translation with its latency bar (the spoken translation is not drawn a second time as
    the bot's reply)."""
    with SpeechServer(voice="espeak") as tts, ChatServer(script=french) as chat:
        settings = stack_settings(asr_url=asr_server_url, asr_model=asr_model_name, tts_url=tts.url)
        settings.llm = settings.llm.model_copy(
            update={"kind": "openai", "base_url": chat.base_url, "model": "m"}
        )
        settings.translation = settings.translation.model_copy(update={"enabled": True})
        with (
            running_server(settings) as (url, _app),
            tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp,
        ):
            silence = bytes(2 * 48_000)
            mic = silence * 4 + speech_at(SENTENCE, 48_000) + silence * 20
            browser = Browser(
                "about:blank", write_wav(Path(tmp) / "mic.wav", mic, 48_000), Path(tmp) / "p"
            )
            try:
                await browser.attach()
                await open_playground(browser, url + "/")
                await browser.js("document.getElementById('connect').click()")
                await async_wait_for_page(
                    browser,
                    "Array.from(document.querySelectorAll('.msg.translation')).some(e => "
                    "e.textContent.includes('demain matin.') && "
                    "!e.querySelector('.interim').textContent)",
                    what="the finished translation",
                )
                user = await browser.js(
                    "Array.from(document.querySelectorAll('.msg.user .text'))"
                    ".map(e => e.textContent).join(' ')"
                )
                shown = await browser.js(
                    "Array.from(document.querySelectorAll('.msg.translation'))"
                    ".map(e => [e.querySelector('.who').textContent, "
                    "e.querySelector('.text').textContent])"
                )
                # Once it is spoken, its latency bar (end of speech → first audio) is under it.
                await async_wait_for_page(
                    browser, "!!document.querySelector('.msg.translation .latency')", what="a bar"
                )
                bot_bubbles = await browser.js("document.querySelectorAll('.msg.bot').length")
                (tmp_path / "playground_translation.png").write_bytes(
                    await screenshot_card(browser)
                )
            finally:
                await browser.close()
    assert {"tomorrow", "morning"} <= set(words(user)), user
    assert shown == [["→ French", french([{"content": user}])]], shown
    assert bot_bubbles == 0
    assert len(chat.requests) == 1
