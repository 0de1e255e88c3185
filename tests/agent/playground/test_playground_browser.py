"""The playground page in headless Chromium: connect, talk through a fake microphone, read.

Chromium (Debian's ``/usr/bin/chromium``) plays an espeak WAV as its microphone; the test
drives the page over the DevTools protocol with the ``websockets`` package, clicks Connect,
and waits until the page shows the user's words and the bot's reply. A screenshot is saved
to ``tests/artifacts/playground.png``.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets
from fastapi import FastAPI

from tests.agent.transports.stack import (
    async_wait_for,
    running_server,
    stack_settings,
)
from tests.conftest import requires_espeak
from tests.fakes.speech import speech_at, words, write_wav
from tests.fakes.speech_server import SpeechServer

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
QUESTION = "what is the weather like in paris today"

pytestmark = [
    requires_espeak,
    pytest.mark.timeout(120),
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="chromium is not installed"),
]


@pytest.fixture(scope="module")
def server(asr_server_url: str, asr_model_name: str) -> Iterator[tuple[str, FastAPI]]:
    with SpeechServer(voice="espeak") as tts:
        settings = stack_settings(asr_url=asr_server_url, asr_model=asr_model_name, tts_url=tts.url)
        with running_server(settings) as running:
            yield running


class Browser:
    """Headless Chromium with a WAV file as its microphone, driven over CDP."""

    def __init__(self, url: str, wav: Path, profile: Path) -> None:
        self.process = subprocess.Popen(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                "--use-fake-ui-for-media-stream",
                "--use-fake-device-for-media-stream",
                f"--use-file-for-fake-audio-capture={wav}",
                "--autoplay-policy=no-user-gesture-required",
                "--remote-debugging-port=0",
                "--window-size=900,760",
                url,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.profile = profile
        self._ids = itertools.count(1)
        self.ws: websockets.ClientConnection | None = None

    async def attach(self) -> None:
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text().strip():
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError("chromium did not open its DevTools port")
            await asyncio.sleep(0.1)
        port = port_file.read_text().split()[0]
        async with httpx.AsyncClient() as http:
            for _ in range(100):
                targets = (await http.get(f"http://127.0.0.1:{port}/json/list")).json()
                pages = [t for t in targets if t.get("type") == "page"]
                if pages:
                    break
                await asyncio.sleep(0.1)
        self.ws = await websockets.connect(pages[0]["webSocketDebuggerUrl"], max_size=None)

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        assert self.ws is not None
        msg_id = next(self._ids)
        await self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            reply = json.loads(await self.ws.recv())
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result

    async def js(self, expression: str) -> Any:
        result = await self.send(
            "Runtime.evaluate",
            expression=expression,
            returnByValue=True,
            userGesture=True,
            awaitPromise=True,
        )
        return result.get("result", {}).get("value")

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


async def test_the_playground_shows_the_users_words_and_the_bots_reply(
    server: tuple[str, FastAPI],
) -> None:
    url, app = server
    registry = app.state.registry
    # Chromium's helper processes may still write to the profile as it exits.
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        pcm = speech_at(QUESTION, 48_000)
        silence = bytes(2 * 48_000)
        # Chromium starts the file at getUserMedia, before the call is up: lead with silence.
        wav = write_wav(Path(tmp) / "mic.wav", silence * 4 + pcm + silence * 12, 48_000)
        browser = Browser("about:blank", wav, Path(tmp) / "profile")
        try:
            await browser.attach()
            await browser.send("Runtime.enable")
            await browser.send("Page.navigate", url=url + "/")
            for _ in range(200):  # the first page may still be about:blank
                found = await browser.js("!!document.getElementById('connect')")
                if found and await browser.js("document.readyState") == "complete":
                    break
                await asyncio.sleep(0.1)
            assert await browser.js("document.getElementById('connect').textContent") == "Connect"
            await browser.js("document.getElementById('connect').click()")

            async def text(selector: str) -> str:
                value = await browser.js(
                    f"Array.from(document.querySelectorAll('{selector}'))"
                    ".map(e => e.textContent).join(' ')"
                )
                return str(value or "")

            deadline = time.monotonic() + 40
            user = bot = ""
            while time.monotonic() < deadline:
                user, bot = await text(".msg.user .text"), await text(".msg.bot .text")
                if "paris" in words(user) and bot.strip():
                    break
                await asyncio.sleep(0.25)
            status = await browser.js("document.getElementById('status').textContent")
            error = await browser.js("document.getElementById('error').textContent")
            assert {"weather", "paris"} <= set(words(user)), (user, bot, status, error)
            assert bot.strip(), (user, bot, status, error)
            assert status == "Connected"
            assert (
                await browser.js("document.getElementById('connect').textContent") == "Disconnect"
            )
            assert registry.stats.active == 1

            await asyncio.sleep(0.5)
            shot = await browser.send("Page.captureScreenshot", format="png")
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            (ARTIFACTS / "playground.png").write_bytes(base64.b64decode(shot["data"]))

            await browser.js("document.getElementById('connect').click()")  # Disconnect
            await async_wait_for(
                lambda: registry.stats.active == 0, timeout_s=15, what="the call to end"
            )
            assert await browser.js("document.getElementById('connect').textContent") == "Connect"
        finally:
            await browser.close()
