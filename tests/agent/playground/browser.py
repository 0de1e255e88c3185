"""Headless Chromium for the browser tests, driven over the DevTools protocol.

Debian's ``/usr/bin/chromium`` plays a WAV file as its microphone (``--use-file-for-fake-
audio-capture``; it loops the file); :class:`Browser` talks to its page with the
``websockets`` package. Shared by the playground's tests and the live view's.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import websockets

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


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


async def async_wait_for_page(
    browser: Browser,
    expression: str,
    *,
    what: str,
    timeout_s: float = 20,
    show: str | None = None,
) -> None:
    """Poll ``expression`` in the page until it is truthy; ``TimeoutError`` naming ``what``
    (and the value of the expression ``show``, if given: what the page shows instead)."""
    deadline = time.monotonic() + timeout_s
    while not await browser.js(expression):
        if time.monotonic() > deadline:
            shown = f": {await browser.js(show)!r}" if show else ""
            raise TimeoutError(f"timed out waiting for {what}{shown}")
        await asyncio.sleep(0.05)


async def open_playground(browser: Browser, url: str) -> None:
    """Navigate to the playground at ``url`` and wait until its Connect button is there."""
    await browser.send("Page.navigate", url=url)
    for _ in range(200):  # the first page may still be about:blank
        if await browser.js("document.readyState") == "complete" and (
            await browser.js("!!document.getElementById('connect')")
        ):
            return
        await asyncio.sleep(0.1)
    raise TimeoutError(f"the playground did not load from {url}")


async def screenshot_card(browser: Browser) -> bytes:
    """A PNG of the page's ``main.card``, with a margin."""
    card = await browser.js(
        "(() => { const r = document.querySelector('main.card').getBoundingClientRect();"
        " return {x: r.x - 12, y: r.y - 12, width: r.width + 24, height: r.height + 24,"
        " scale: 1}; })()"
    )
    shot = await browser.send("Page.captureScreenshot", format="png", clip=card)
    return base64.b64decode(shot["data"])
