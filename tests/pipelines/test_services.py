"""Settings → services: each stage's factory reads only its own settings section."""

from __future__ import annotations

import pytest
from pipecat.audio.vad.vad_analyzer import VADAnalyzer
from pipecat.processors.audio.vad_processor import VADProcessor
from pipecat.processors.frame_processor import FrameProcessor

from agent.config import LLMSettings, SageMakerSettings, STTSettings, TTSSettings, TurnSettings
from agent.fastpath.shared_silero import SharedSileroVADAnalyzer
from agent.llm import OfflineResponder, OpenAICompatibleLLMService
from agent.stt import RealtimeSTTParams
from agent.tts import OpenAISpeechService, PiperHTTPTTSService
from pipelines.services import (
    SAGEMAKER_MAX_CONNECTION_AGE_S,
    llm_conversation,
    llm_service,
    stt_service,
    tts_service,
    vad_stages,
)


def test_settings_choose_the_turn_handler() -> None:
    assert isinstance(llm_service(LLMSettings()), OfflineResponder)
    llm = llm_service(LLMSettings(base_url="http://127.0.0.1:9/v1", model="m"))
    assert isinstance(llm, OpenAICompatibleLLMService)
    assert llm.supports_developer_role is False  # vLLM chat templates reject "developer"


def test_no_tools_by_default_and_the_conversation_offers_configured_ones() -> None:
    assert not getattr(llm_conversation(LLMSettings()).tools, "standard_tools", None)
    context = llm_conversation(LLMSettings(tools=["get_current_time"]))
    assert [t.name for t in context.tools.standard_tools] == ["get_current_time"]  # type: ignore[union-attr]


def test_settings_choose_the_voice() -> None:
    assert isinstance(tts_service(TTSSettings(kind="piper")), PiperHTTPTTSService)
    assert isinstance(tts_service(TTSSettings(kind="openai")), OpenAISpeechService)


def test_stt_params_pass_through_as_they_are() -> None:
    params = RealtimeSTTParams(preroll_s=0.25, chunk_ms=40)
    service = stt_service(STTSettings(model="served-name", params=params))
    assert service._params is params
    assert service._settings.model == "served-name"


@pytest.mark.parametrize(
    "configured, expected", [(None, SAGEMAKER_MAX_CONNECTION_AGE_S), (60.0, 60.0)]
)
def test_sagemaker_streams_rotate_before_sagemakers_cap(
    configured: float | None, expected: float
) -> None:
    pytest.importorskip("aws_sdk_sagemaker_runtime_http2")
    settings = STTSettings(
        transport="sagemaker",
        sagemaker=SageMakerSettings(endpoint_name="e", region="us-east-1"),
        params=RealtimeSTTParams(max_connection_age_s=configured),
    )
    assert stt_service(settings)._params.max_connection_age_s == expected


class VADHostingInput(FrameProcessor):
    """An input transport that runs the VAD itself, as the phone transports do."""

    def __init__(self) -> None:
        super().__init__()
        self.analyzer: VADAnalyzer | None = None

    def use_vad(self, analyzer: VADAnalyzer) -> None:
        self.analyzer = analyzer


def test_every_pipeline_gets_the_callers_vad_as_the_turn_settings_tune_it() -> None:
    turn = TurnSettings(vad_confidence=0.55, vad_min_volume=0.35, vad_stop_secs=0.3)
    [stage] = vad_stages(turn, FrameProcessor())
    assert isinstance(stage, VADProcessor)
    analyzer = stage._vad_controller._vad_analyzer
    assert isinstance(analyzer, SharedSileroVADAnalyzer)
    params = analyzer.params
    assert (params.confidence, params.min_volume, params.stop_secs) == (0.55, 0.35, 0.3)
    assert analyzer._foreground is not None  # the talker gate, on by default
    assert analyzer._floor is not None  # and the line's floor


def test_a_transport_that_hosts_the_vad_gets_it_and_no_stage_and_0_db_turns_the_gates_off() -> None:
    hosting = VADHostingInput()
    assert vad_stages(TurnSettings(vad_foreground_db=0, vad_floor_margin_db=0), hosting) == []
    assert isinstance(hosting.analyzer, SharedSileroVADAnalyzer)
    assert hosting.analyzer._foreground is None
    assert hosting.analyzer._floor is None
