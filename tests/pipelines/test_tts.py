"""TTS services against real HTTP servers: Piper's own server as a child process, and an
OpenAI-compatible ``/v1/audio/speech`` server on loopback."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from pipecat.frames.frames import (
    AggregatedTextFrame,
    ErrorFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
    TTSSpeakFrame,
)
from pipecat.pipeline.worker import PipelineParams
from pipecat.tests.utils import run_test

from agent.config import TTSSettings
from agent.lead_in import QUIET_PEAK
from agent.local.piper_server import voice_name
from agent.tts import OpenAISpeechService, PiperHTTPTTSService
from pipelines.services import tts_service
from tests.fakes.serving import free_port
from tests.fakes.speech_server import SpeechServer
from tests.pipelines.conftest import requires_piper_http


def audio_of(frames: list[object]) -> tuple[np.ndarray, int]:
    chunks = [f for f in frames if isinstance(f, TTSAudioRawFrame)]
    assert chunks, f"no audio frames in {[type(f).__name__ for f in frames]}"
    rates = {f.sample_rate for f in chunks}
    assert len(rates) == 1
    samples = np.frombuffer(b"".join(f.audio for f in chunks), "<i2")
    return samples, rates.pop()


PIPER_RATE = 22050
"""The rate of the offline voice's WAVs."""


@requires_piper_http
async def test_piper_server_speaks_through_our_http_service(piper_url: str) -> None:
    service = tts_service(TTSSettings(kind="piper", base_url=piper_url))
    assert isinstance(service, PiperHTTPTTSService)
    down, up = await run_test(
        service,
        frames_to_send=[TTSSpeakFrame("Hello, this is the offline voice.")],
        pipeline_params=PipelineParams(audio_out_sample_rate=16000),
    )
    assert not [f for f in up if isinstance(f, ErrorFrame)]
    samples, rate = audio_of(list(down))
    assert rate == PIPER_RATE  # the voice's own rate; the output transport resamples
    assert len(samples) / rate > 1.0  # a whole sentence, not a click
    rms = float(np.sqrt(np.mean(samples.astype(np.float64) ** 2)))
    assert rms > 300, f"audio is (nearly) silent: rms {rms:.0f}"


@requires_piper_http
async def test_unreachable_piper_is_an_error_frame_not_a_crash() -> None:
    service = PiperHTTPTTSService(base_url=f"http://127.0.0.1:{free_port()}", voice=voice_name())
    _, up = await run_test(service, frames_to_send=[TTSSpeakFrame("Anyone there?")])
    errors = [f for f in up if isinstance(f, ErrorFrame)]
    assert errors and "Is it running?" in errors[0].error


def test_piper_is_never_imported_into_our_process() -> None:
    """GPL-3.0 piper-tts must stay out of process: importing the pipeline must not load it."""
    code = (
        "import sys, agent.tts, agent.serve, pipelines.voice_agent, pipelines.services; "
        "from agent.config import TTSSettings; "
        "pipelines.services.tts_service(TTSSettings()); "
        "sys.exit(3 if 'piper' in sys.modules else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr.decode()[-2000:]


# ------------------------------------------------------------- OpenAI-compatible speech


@pytest.fixture
def speech_server() -> Iterator[SpeechServer]:
    with SpeechServer() as server:
        yield server


async def test_openai_speech_sends_model_voice_key_and_plays_pcm(
    speech_server: SpeechServer,
) -> None:
    settings = TTSSettings(
        kind="openai",
        base_url=speech_server.base_url,
        model="kokoro",
        voice="af_heart",  # not an OpenAI voice name: must pass through untouched
        api_key="secret-key",
        sample_rate=24000,
    )
    service = tts_service(settings)
    assert isinstance(service, OpenAISpeechService)
    down, _ = await run_test(service, frames_to_send=[TTSSpeakFrame("Hi there.")])
    samples, rate = audio_of(list(down))
    assert rate == 24000 and len(samples) == 12000
    headers, body = speech_server.requests[0]
    assert headers["authorization"] == "Bearer secret-key"
    assert body == {
        "model": "kokoro",
        "voice": "af_heart",
        "input": "Hi there.",
        "response_format": "pcm",
    }


@requires_piper_http
async def test_piper_speaks_an_answers_first_clause_before_the_rest(piper_url: str) -> None:
    """Piper answers a whole WAV per request: "You said:" goes alone, so it sounds sooner."""
    service = tts_service(TTSSettings(kind="piper", base_url=piper_url))
    answer = ["You", " said:", " turn", " on", " the", " lights.", " Then", " wait."]
    down, up = await run_test(
        service,
        frames_to_send=[
            LLMFullResponseStartFrame(),
            *(LLMTextFrame(token) for token in answer),
            LLMFullResponseEndFrame(),
        ],
    )
    assert not [f for f in up if isinstance(f, ErrorFrame)]
    spoken = [f.text for f in down if type(f) is AggregatedTextFrame]  # not TTSTextFrames
    assert spoken == ["You said:", "turn on the lights.", "Then wait."]
    audio_of(list(down))


class SteadyPiper(PiperHTTPTTSService):
    """Piper without its sampling noise: each request answers the same audio every time."""

    def request_body(self, text: str) -> dict[str, Any]:
        return {**super().request_body(text), "noise_scale": 0, "noise_w_scale": 0}


@requires_piper_http
async def test_an_answer_sounds_from_its_first_audio_not_after_pipers_lead_in(
    piper_url: str,
) -> None:
    """Piper starts each WAV with ~50 ms of quiet, played in real time before the first word:
    the answer's first audio is cut to its sound, its later sentences keep their pause."""

    async def answer(trim: bool) -> tuple[list[str], np.ndarray]:
        service = SteadyPiper(base_url=piper_url, voice=voice_name(), trim_lead_in=trim)
        # Both sentences start after a lead-in (the second ~40 ms: "turn..." starts at once),
        # so cutting the second one's would show.
        tokens = ["You", " said:", " all", " the", " lights", " are", " on."]
        down, _ = await run_test(
            service,
            frames_to_send=[
                LLMFullResponseStartFrame(),
                *(LLMTextFrame(token) for token in tokens),
                LLMFullResponseEndFrame(),
            ],
            # Piper's own rate: Pipecat's stream resampler starts afresh after 0.2 s without
            # audio, which on a loaded machine made two syntheses of one text differ (CI,
            # 2026-12-06: 37 ms in length); without resampling they are the same samples.
            pipeline_params=PipelineParams(audio_out_sample_rate=PIPER_RATE),
        )
        # The whole answer's audio: which request a frame came from is not in the frame, and
        # the next request's text frame may pass the last of the first one's audio.
        spoken = [f.text for f in down if type(f) is AggregatedTextFrame]
        samples, rate = audio_of(list(down))
        assert rate == PIPER_RATE
        return spoken, samples

    def lead_in_ms(samples: np.ndarray) -> float:
        return 1000 * int(np.argmax(np.abs(samples.astype(np.int32)) > 300)) / PIPER_RATE

    (spoken, cut), (spoken_whole, whole) = await answer(trim=True), await answer(trim=False)
    assert spoken == spoken_whole == ["You said:", "all the lights are on."]  # two requests
    assert lead_in_ms(whole) > 30  # Piper's own lead-in, the reason for the cut
    assert lead_in_ms(cut) < 20  # 5 ms kept, then the onset's rise to a loud sample
    removed = len(whole) - len(cut)
    assert np.abs(whole[:removed].astype(np.int32)).max() <= QUIET_PEAK  # only quiet went...
    assert np.array_equal(cut, whole[removed:])  # ...from the head: the pause before the rest stays
