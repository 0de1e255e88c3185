"""``voice-agent transcribe --sagemaker-endpoint`` when the platform freezes mid-stream.

The stand-in runs in its own process and is stopped with ``SIGSTOP`` once interim text flows:
the TLS connection stays up and carries nothing, and new connections are accepted by the
kernel but never answered (a hung relay or load balancer). The command must give up within
what ``--timeout`` promises, with its one-line message and nothing from awscrt.
"""

from __future__ import annotations

import math
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.stt.sagemaker import ENDPOINT_URL_ENV
from tests.fakes.sagemaker_process import ENDPOINT, REGION
from tests.fakes.sagemaker_runtime import LoopbackTLS
from tests.fakes.speech import write_wav

pytestmark = pytest.mark.usefixtures("aws_environment")
REPO = Path(__file__).resolve().parents[3]
AUDIO_S, TIMEOUT_S = 4.0, 5.0
BANNER = "ᓚᘏᗢ Pipecat"
SLACK_S = 15.0
"""Teardown plus a noisy shared machine: the command promises audio + --timeout + 5 s."""


@pytest.fixture
def tone_wav(tmp_path: Path) -> Path:
    """Any audio will do: the container behind the stand-in answers every 80 ms of it."""
    rate = 16_000
    samples = (int(3000 * math.sin(i / 10)) for i in range(int(rate * AUDIO_S)))
    return write_wav(tmp_path / "tone.wav", struct.pack(f"<{int(rate * AUDIO_S)}h", *samples), rate)


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}


def stop(process: subprocess.Popen[str]) -> None:
    """Stop a process group we started, frozen or not."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGCONT)
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)


@pytest.fixture
def stand_in(tls: LoopbackTLS) -> Iterator[tuple[subprocess.Popen[str], str]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.sagemaker_process", str(tls.ca_file.parent)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=environment(),
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], 60)
        line = process.stdout.readline() if ready else ""
        assert line.startswith("URL "), f"the stand-in did not start: {line!r}"
        yield process, line.split()[1]
    finally:
        stop(process)


class StderrLines:
    """Reads a process's stderr in a thread; notes when the first interim line came."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self.interim = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(process,), daemon=True)
        self._thread.start()

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stderr is not None
        for line in process.stderr:
            self.lines.append(line.rstrip("\n"))
            if line.startswith("…"):
                self.interim.set()

    def join(self) -> list[str]:
        self._thread.join(timeout=10)
        return self.lines


def test_a_stream_frozen_mid_way_exits_3_within_the_timeout_with_one_line(
    stand_in: tuple[subprocess.Popen[str], str], tone_wav: Path
) -> None:
    server, url = stand_in
    command = [sys.executable, "-m", "agent.cli", "transcribe", str(tone_wav), "--realtime"]
    command += ["--sagemaker-endpoint", ENDPOINT, "--region", REGION, "--timeout", str(TIMEOUT_S)]
    cli = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**environment(), ENDPOINT_URL_ENV: url},
        start_new_session=True,
    )
    try:
        stderr = StderrLines(cli)
        assert stderr.interim.wait(60), f"no interim text came: {stderr.lines}"
        os.killpg(server.pid, signal.SIGSTOP)  # mid-stream: nothing moves, nothing closes
        frozen_at = time.monotonic()
        try:
            cli.wait(timeout=AUDIO_S + TIMEOUT_S + SLACK_S + 30)
        except subprocess.TimeoutExpired:
            running_s = time.monotonic() - frozen_at
            pytest.fail(f"still running {running_s:.0f} s after the freeze: {stderr.lines}")
        took = time.monotonic() - frozen_at
    finally:
        stop(cli)
    # Interim text, and Pipecat's import-time banner (every run prints it, before the CLI
    # sets up its logging): everything else on stderr is what this run had to say.
    messages = [line for line in stderr.join() if not line.startswith("…") and BANNER not in line]
    assert cli.returncode == 3, messages
    assert len(messages) == 1, messages  # no traceback, no awscrt InvalidStateError
    assert messages[0].startswith("voice-agent transcribe: "), messages
    assert "SageMaker endpoint" in messages[0], messages
    assert took < AUDIO_S + TIMEOUT_S + SLACK_S, f"exited {took:.1f} s after the freeze"
