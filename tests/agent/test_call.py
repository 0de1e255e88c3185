"""``voice-agent call``: what it says and how it exits when it cannot place a call. (Placing
one, end to end: tests/agent/transports/test_outbound.py.)"""

from __future__ import annotations

import pytest

from agent.call import EXIT_UNREACHABLE, EXIT_USAGE, main
from tests.fakes.serving import free_port


def test_without_an_operator_token_it_says_where_to_set_one(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VOICE_AGENT_SERVER__API_TOKEN", raising=False)
    assert main(["+15550123"]) == EXIT_USAGE
    assert "server.api_token" in capsys.readouterr().err


def test_an_unreachable_server_is_exit_3(capsys: pytest.CaptureFixture[str]) -> None:
    server = f"http://127.0.0.1:{free_port()}"
    assert main(["+15550123", "--server", server, "--token", "t"]) == EXIT_UNREACHABLE
    assert f"cannot reach the server at {server}" in capsys.readouterr().err
