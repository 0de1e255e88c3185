"""``voice-agent transcribe`` end to end against ``voice-agent asr-server``, each in its own
process, as a user would run them."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ASR_MODEL_NAME, requires_espeak
from tests.fakes.speech import speech_at, word_error_rate, write_wav

pytestmark = requires_espeak
SENTENCE = "what is the weather like in paris today"


def voice_agent(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )


@pytest.fixture(scope="module")
def asr_server() -> Iterator[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "agent.cli", "asr-server", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:
            match = re.search(r"(ws://\S+/v1/realtime)", line)
            if match:
                yield match.group(1)
                break
        else:
            pytest.fail("voice-agent asr-server exited without announcing its URL")
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)


@pytest.fixture(scope="module")
def stereo_44k_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("wav") / "question.wav"
    return write_wav(path, speech_at(SENTENCE, 44_100, channels=2), 44_100, channels=2)


def test_the_final_transcript_is_the_last_line_of_stdout(
    asr_server: str, stereo_44k_wav: Path
) -> None:
    result = voice_agent("transcribe", str(stereo_44k_wav), "--url", asr_server, "--realtime")
    assert result.returncode == 0, result.stderr
    last_line = result.stdout.strip().splitlines()[-1]
    assert word_error_rate(SENTENCE, last_line) <= 0.25, last_line
    assert "…" in result.stderr  # interim lines while the audio streamed


def test_json_prints_one_object_per_event_ending_with_the_final(
    asr_server: str, stereo_44k_wav: Path
) -> None:
    result = voice_agent("transcribe", str(stereo_44k_wav), "--url", asr_server, "--json")
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.strip().splitlines()]
    assert events[-1]["type"] == "final"
    assert word_error_rate(SENTENCE, events[-1]["text"]) <= 0.25


def test_a_rejected_model_name_exits_non_zero_and_says_how_to_fix_it(
    asr_server: str, stereo_44k_wav: Path
) -> None:
    result = voice_agent(
        "transcribe", str(stereo_44k_wav), "--url", asr_server, "--model", "no-such-model"
    )
    assert result.returncode == 4
    assert "--model" in result.stderr and "no-such-model" in result.stderr


def test_an_unreachable_endpoint_exits_non_zero_with_a_clear_message(stereo_44k_wav: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"ws://127.0.0.1:{port}/v1/realtime"
    # A short --timeout also shortens the wait for a session (the default waits 20 s).
    result = voice_agent("transcribe", str(stereo_44k_wav), "--url", url, "--timeout", "3")
    assert result.returncode == 3
    assert "cannot reach the STT endpoint" in result.stderr


def test_a_file_that_is_not_audio_exits_non_zero(tmp_path: Path) -> None:
    text_file = tmp_path / "notes.wav"
    text_file.write_text("this is not a wav file")
    result = voice_agent("transcribe", str(text_file), "--url", "ws://127.0.0.1:9/v1/realtime")
    assert result.returncode == 2
    assert "not a PCM WAV file" in result.stderr


def test_the_served_model_name_is_the_voxtral_name_by_default() -> None:
    from agent.config import load_settings

    assert load_settings("default").stt.model == ASR_MODEL_NAME
