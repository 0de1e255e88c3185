"""The server under test with real parts on loopback, and real clients for it.

- :func:`stack_settings`: settings for it against loopback peers (the TTS is usually
  ``SpeechServer(voice="espeak")`` from :mod:`tests.fakes.speech_server`: a real synthesizer).
- :func:`running_server`: our app (``create_app``) on 127.0.0.1:0 in a background thread;
  :func:`phone_server`: the same set up for phone calls.
- :class:`WebRTCClient` (from :mod:`tests.fakes.webrtc_caller`): an aiortc peer that speaks
  PCM at real-time pace and records the audio and RTVI messages it gets back.
- helpers to count sockets and pipeline tasks, for "nothing left behind" checks.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI

from agent.config import Settings, load_settings
from agent.server import PipelineFactory, create_app
from tests.fakes.serving import background
from tests.fakes.speech_server import ESPEAK_RATE, SpeechServer
from tests.fakes.telnyx_caller import PUBLIC_KEY as TELNYX_PUBLIC_KEY
from tests.fakes.twilio_caller import TOKEN
from tests.fakes.webrtc_caller import CLIENT_RATE as CLIENT_RATE
from tests.fakes.webrtc_caller import WebRTCClient as WebRTCClient


def stack_settings(
    *, asr_url: str, asr_model: str, tts_url: str, max_calls: int = 4, **server: Any
) -> Settings:
    return load_settings(
        "default",
        overrides={
            "server": {"max_calls": max_calls, "start_local_services": False, **server},
            "stt": {"url": asr_url, "model": asr_model},
            "llm": {"kind": "echo"},  # "You said: …"
            "tts": {"kind": "openai", "base_url": f"{tts_url}/v1", "sample_rate": ESPEAK_RATE},
        },
    )


@contextmanager
def running_server(
    settings: Settings, *, pipeline: PipelineFactory | None = None
) -> Iterator[tuple[str, FastAPI]]:
    app = create_app(settings, pipeline=pipeline)
    with background(app) as url:
        yield url, app


@contextmanager
def phone_server(
    asr_url: str,
    asr_model: str,
    *,
    max_calls: int,
    telnyx: dict[str, Any] | None = None,
    turn: dict[str, Any] | None = None,
    **server: Any,
) -> Iterator[tuple[str, FastAPI]]:
    """The server taking phone calls (Twilio auth on, with the callers' ``TOKEN``; Telnyx on,
    with the test account's public key and ``telnyx`` settings; ``turn`` settings) against the
    offline ASR server and an espeak speech server; ``server``: more ``server.*`` settings."""
    with SpeechServer(voice="espeak") as tts:
        settings = stack_settings(
            asr_url=asr_url, asr_model=asr_model, tts_url=tts.url, max_calls=max_calls, **server
        )
        settings.twilio.auth_token = TOKEN
        settings.telnyx = settings.telnyx.model_copy(
            update={"public_key": TELNYX_PUBLIC_KEY, **(telnyx or {})}
        )
        settings.turn = settings.turn.model_copy(update=turn or {})
        with running_server(settings) as running:
            yield running


# ----------------------------------------------------------------------------- leftovers


def open_sockets() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                count += 1
        except OSError:
            pass
    return count


def server_tasks(app: FastAPI) -> list[str]:
    """Names of the tasks alive on the server's loop that belong to calls or Pipecat."""
    loop = _server_loop(app)
    if loop is None:
        return []

    async def names() -> list[str]:
        return [t.get_name() for t in asyncio.all_tasks() if not t.done()]

    all_names = asyncio.run_coroutine_threadsafe(names(), loop).result(timeout=5)
    return [n for n in all_names if not n.startswith("Task-")]


def _server_loop(app: FastAPI) -> asyncio.AbstractEventLoop | None:
    for call in app.state.registry.recent() + app.state.registry.calls():
        if call.task is not None:
            loop: asyncio.AbstractEventLoop = call.task.get_loop()
            return loop
    return None


def wait_for(predicate: Callable[[], bool], *, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)


async def async_wait_for(predicate: Callable[[], bool], *, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.05)
