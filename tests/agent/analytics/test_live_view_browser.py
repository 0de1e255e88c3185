"""The analytics live view in headless Chromium (driven over the DevTools protocol, as the
playground's test drives it): a carrier forks a call whose two speakers overlap; the page
lists the call while it runs, shows each speaker's interim and final words as they come, the
overlap and the silences on its timeline, and the summary once the call has ended. A
screenshot is saved as ``analytics.png`` in the test's tmp dir (``bench/results/analytics.png``,
shown in the README, is a copy of one)."""

from __future__ import annotations

import asyncio
import base64
import json
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import websockets
from fastapi import FastAPI

from tests.agent.analytics.test_operator import ANALYSIS
from tests.agent.playground.browser import Browser
from tests.agent.transports.stack import async_wait_for, running_server
from tests.agent.transports.test_listen_only import (
    AGENT_SAYS,
    CALLER_SAYS,
    OPERATOR,
    analytics_settings,
    heard,
)
from tests.conftest import requires_chromium, requires_espeak
from tests.fakes.both_tracks_caller import BothTracksStream, ring, timeline
from tests.fakes.chat_server import ChatServer
from tests.fakes.speech import write_wav
from tests.fakes.speech_server import SpeechServer
from tests.fakes.twilio_caller import ulaw_speech

pytestmark = [requires_espeak, requires_chromium, pytest.mark.timeout(120)]

CALLER_AGAIN = "turn on the lights in the kitchen"

# Installed in the page: remembers what showed up between two polls (interims are brief).
WATCH = """
(() => {
window.__seen = {interim: {caller: [], agent: []}, speaking: {caller: false, agent: false}};
new MutationObserver(() => {
  for (const s of ['caller', 'agent']) {
    const text = document.getElementById('interim-' + s).textContent;
    if (text) window.__seen.interim[s].push(text);
  }
}).observe(document.body, {childList: true, characterData: true, subtree: true});
return true;
})()
"""

READ = """
(() => ({
  listed: Array.from(document.querySelectorAll('#calls a')).map(a => a.dataset.callId),
  lines: Array.from(document.querySelectorAll('#transcript li'))
    .map(li => [li.dataset.speaker, li.querySelector('.text').textContent]),
  overlaps: document.querySelectorAll('#timeline rect.overlap').length,
  silences: document.querySelectorAll('#timeline rect.silence').length,
  bars: {caller: document.querySelectorAll('#timeline rect.speech.caller').length,
         agent: document.querySelectorAll('#timeline rect.speech.agent').length},
  state: document.getElementById('call-state').textContent,
  reason: document.getElementById('reason').textContent,
  analysisShown: !document.getElementById('analysis').hidden,
  error: document.getElementById('error').textContent,
}))()
"""


@pytest.fixture(scope="module")
def server(asr_server_url: str, asr_model_name: str) -> Iterator[tuple[str, FastAPI]]:
    with SpeechServer(voice="espeak") as tts, ChatServer(answer=json.dumps(ANALYSIS)) as chat:
        settings = analytics_settings(asr_server_url, asr_model_name, tts.url)
        settings.llm.base_url = chat.base_url
        settings.llm.model = "chat-server"
        with running_server(settings) as running:
            yield running


async def wait_page(browser: Browser, test: Any, *, what: str, timeout_s: float = 30) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        seen = await browser.js(READ)  # None until the page has loaded
        if seen is not None and test(seen):
            return seen
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {seen}")
        await asyncio.sleep(0.1)


async def test_the_live_view_shows_both_speakers_as_they_speak(
    server: tuple[str, FastAPI], tmp_path: Path
) -> None:
    url, app = server
    registry = app.state.registry
    forked = await ring(url, "twilio", "CA-browser")
    # The agent starts answering 0.9 s before the caller is done (an overlap the VAD's 0.2 s
    # start cannot hide: at 0.25 s it came and went with the test speech's last bits), then a
    # silence, then the caller again.
    tracks = timeline(
        [
            (0.4, "inbound", ulaw_speech(CALLER_SAYS)),
            (2.0, "outbound", ulaw_speech(AGENT_SAYS)),
            (7.8, "inbound", ulaw_speech(CALLER_AGAIN)),
        ],
        total_s=11.0,
    )
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        silent_mic = write_wav(Path(tmp) / "mic.wav", bytes(2 * 48_000), 48_000)
        browser = Browser("about:blank", silent_mic, Path(tmp) / "profile")
        try:
            await browser.attach()
            await browser.send("Runtime.enable")
            async with websockets.connect(forked.url) as ws:
                stream = BothTracksStream(ws, "twilio", "CA-browser")
                await stream.start(forked.parameters)
                await async_wait_for(lambda: registry.stats.active == 1, timeout_s=5, what="slot")
                call_id = registry.calls()[0].id
                await browser.send(
                    "Page.navigate", url=f"{url}/analytics?call={call_id}#token={OPERATOR}"
                )
                await wait_page(browser, lambda s: call_id in s["listed"], what="the call listed")
                assert await browser.js(WATCH)
                playing = asyncio.create_task(stream.play(tracks))
                # Mid-call: the first utterances are shown before the call ends.
                live = await wait_page(
                    browser,
                    lambda s: {line[0] for line in s["lines"]} == {"caller", "agent"},
                    what="both speakers' first words",
                )
                assert live["state"] == "live" and not playing.done()
                await playing
                await stream.stop()
                await async_wait_for(lambda: registry.stats.active == 0, timeout_s=15, what="end")
                await stream.close()
            seen = await wait_page(
                browser, lambda s: s["analysisShown"] and len(s["lines"]) == 3, what="the summary"
            )
            lines = seen["lines"]
            assert [who for who, _ in lines] == ["caller", "agent", "caller"], lines
            assert heard(lines[0][1], CALLER_SAYS) and heard(lines[1][1], AGENT_SAYS), lines
            assert heard(lines[2][1], CALLER_AGAIN), lines
            assert seen["state"] == "ended" and seen["reason"] == ANALYSIS["reason"]
            assert seen["bars"] == {"caller": 2, "agent": 1}
            assert seen["overlaps"] >= 1 and seen["silences"] >= 1
            interims = await browser.js("window.__seen.interim")
            assert interims["caller"] and interims["agent"], interims
            assert not seen["error"]

            card = await browser.js(
                "(() => { const r = document.querySelector('main.card').getBoundingClientRect();"
                " return {x: r.x - 12, y: r.y - 12, width: r.width + 24, height: r.height + 24,"
                " scale: 1}; })()"
            )
            shot = await browser.send(
                "Page.captureScreenshot", format="png", clip=card, captureBeyondViewport=True
            )
            (tmp_path / "analytics.png").write_bytes(base64.b64decode(shot["data"]))
        finally:
            await browser.close()
