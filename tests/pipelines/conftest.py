"""Fixtures for the pipeline tests: Piper's HTTP server as a real child process."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from agent.local.piper_server import piper_child
from agent.local.supervisor import Supervisor
from tests.conftest import requires_modules
from tests.fakes.serving import free_port

requires_piper_http = requires_modules(
    "piper", "flask", install="Piper's HTTP server needs piper-tts[http]: scripts/setup.sh"
)


@pytest.fixture(scope="session")
def piper_url() -> Iterator[str]:
    """Piper's HTTP server with the packaged voice, started the way ``voice-agent serve`` does."""
    base_url = f"http://127.0.0.1:{free_port()}"
    supervisor = Supervisor([piper_child(base_url)])
    asyncio.run(supervisor.start())
    try:
        yield base_url
    finally:
        supervisor.stop()
