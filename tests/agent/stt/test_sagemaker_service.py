"""The STT service through the whole SageMaker path, every hop real except AWS itself:

service → SageMaker channel (real SDK, HTTP/2 + TLS) → runtime stand-in → container bridge
(uvicorn) → offline ASR server speaking vLLM's protocol.

A stream the platform cuts mid-sentence is reconnected and the turn replayed, connections are
rotated between turns once they reach their maximum age, and ``voice-agent transcribe
--sagemaker-endpoint`` works end to end.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent.stt.client import RealtimeTranscriber
from agent.stt.params import RealtimeSTTParams
from agent.stt.sagemaker import ENDPOINT_URL_ENV, sagemaker_channel_factory
from agent.stt.service import VoxtralRealtimeSTTService
from tests.conftest import requires_espeak
from tests.container.conftest import bridge_settings, running_bridge
from tests.fakes.sagemaker_runtime import LoopbackTLS, SageMakerRuntimeStandIn
from tests.fakes.serving import port_of
from tests.fakes.speech import speech_at, word_error_rate, write_wav
from tests.fakes.tcp_fault_proxy import TcpFaultProxy

pytestmark = [requires_espeak, pytest.mark.usefixtures("aws_environment")]
ENDPOINT, REGION = "voxtral-realtime", "us-east-1"
SENTENCE = "i would like to book a table for two people"


@pytest.fixture
async def runtime(asr_server_url: str, tls: LoopbackTLS) -> AsyncIterator[SageMakerRuntimeStandIn]:
    async with running_bridge(bridge_settings(asr_server_url)) as bridge:
        container_url = bridge.stream_url.removesuffix("/invocations-bidirectional-stream")
        async with SageMakerRuntimeStandIn(
            upstream_url=container_url, tls=tls, endpoints=(ENDPOINT,), region=REGION
        ) as runtime:
            yield runtime


def service_for(
    runtime: SageMakerRuntimeStandIn, model: str, **options: object
) -> VoxtralRealtimeSTTService:
    defaults: dict[str, object] = {"preroll_s": 0.0, "reconnect_min_wait_s": 0.05}
    defaults.update(options)
    return VoxtralRealtimeSTTService(
        channel_factory=sagemaker_channel_factory(
            endpoint_name=ENDPOINT, region=REGION, endpoint_url=runtime.url
        ),
        settings=VoxtralRealtimeSTTService.Settings(model=model),
        params=RealtimeSTTParams(**defaults),  # type: ignore[arg-type]
    )


async def final_text(transcriber: RealtimeTranscriber, errors: list[str] | None = None) -> str:
    while True:
        event = await transcriber.next_event(timeout=30)
        if event.kind == "error" and errors is not None:
            errors.append(event.text)
        if event.kind == "final":
            return event.text


async def test_a_stream_cut_mid_sentence_is_replayed_and_no_word_is_lost(
    runtime: SageMakerRuntimeStandIn, asr_model_name: str
) -> None:
    pcm = speech_at(SENTENCE, 16_000)
    service = service_for(runtime, asr_model_name)
    async with RealtimeTranscriber(service, sample_rate=16_000) as transcriber:
        assert await transcriber.wait_connected(timeout=20)
        await transcriber.start_turn()
        half = len(pcm) // 2 // 640 * 640
        await transcriber.feed(pcm[:half], realtime=True)
        await runtime.cut_streams()  # the platform ends the stream mid-sentence
        await transcriber.feed(pcm[half:], realtime=True)
        await transcriber.end_turn()
        text = await final_text(transcriber)
    assert len(runtime.streams) >= 2
    assert word_error_rate(SENTENCE, text) <= 0.25, text
    assert {part.data_type for stream in runtime.streams for part in stream.parts} == {"UTF8"}


async def test_connections_rotate_between_turns_before_their_maximum_age(
    runtime: SageMakerRuntimeStandIn, asr_model_name: str
) -> None:
    service = service_for(runtime, asr_model_name, max_connection_age_s=1.0)
    errors: list[str] = []
    async with RealtimeTranscriber(service, sample_rate=16_000) as transcriber:
        assert await transcriber.wait_connected(timeout=20)
        first = speech_at("turn on the lights in the kitchen", 16_000)
        await transcriber.start_turn()
        await transcriber.feed(first)
        await transcriber.end_turn()
        assert "kitchen" in (await final_text(transcriber, errors)).lower()
        await runtime.wait_until(lambda: len(runtime.streams) >= 2, timeout=10)
        await transcriber.wait_connected(timeout=10)
        second = speech_at("send the report to my manager", 16_000)
        await transcriber.start_turn()
        await transcriber.feed(second)
        await transcriber.end_turn()
        assert "manager" in (await final_text(transcriber, errors)).lower()
    assert errors == []  # a rotation is not a failure


async def test_voice_agent_transcribe_works_through_a_sagemaker_endpoint(
    runtime: SageMakerRuntimeStandIn, asr_model_name: str, tmp_path: Path
) -> None:
    wav = write_wav(tmp_path / "q.wav", speech_at(SENTENCE, 22_050), 22_050)
    command = [sys.executable, "-m", "agent.cli", "transcribe", str(wav)]
    command += ["--sagemaker-endpoint", ENDPOINT, "--region", REGION, "--model", asr_model_name]
    process = await asyncio.create_subprocess_exec(
        *command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, ENDPOINT_URL_ENV: runtime.url},
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, stderr.decode()
    last_line = stdout.decode().strip().splitlines()[-1]
    assert word_error_rate(SENTENCE, last_line) <= 0.25, last_line


async def test_a_frozen_stream_is_replaced_and_the_turn_transcribed(
    runtime: SageMakerRuntimeStandIn, asr_model_name: str
) -> None:
    """The TLS connection to SageMaker freezes mid-sentence (nothing moves, nothing closes):
    within the stall timeout the watchdog gives up on it, and the turn is replayed on a fresh
    stream, with every send and the teardown bounded."""
    pcm = speech_at(SENTENCE, 16_000)
    async with TcpFaultProxy(port_of(runtime.url)) as proxy:
        service = VoxtralRealtimeSTTService(
            channel_factory=sagemaker_channel_factory(
                endpoint_name=ENDPOINT,
                region=REGION,
                endpoint_url=f"https://127.0.0.1:{proxy.port}",
            ),
            settings=VoxtralRealtimeSTTService.Settings(model=asr_model_name),
            params=RealtimeSTTParams(
                preroll_s=0.0, reconnect_min_wait_s=0.05, stall_timeout_s=2.0, final_timeout_s=2.0
            ),
        )
        async with RealtimeTranscriber(service, sample_rate=16_000) as transcriber:
            assert await transcriber.wait_connected(timeout=20)
            await transcriber.start_turn()
            half = len(pcm) // 2 // 640 * 640
            await transcriber.feed(pcm[:half], realtime=True)
            proxy.freeze()  # the connection stays up and carries nothing more
            await transcriber.feed(pcm[half:], realtime=True)
            await transcriber.end_turn()
            text = await asyncio.wait_for(final_text(transcriber), 30)
        assert proxy.connections >= 2
    assert word_error_rate(SENTENCE, text) <= 0.25, text
    # (Which notices first depends on the machine's load: the watchdog, or a send's deadline.)
