"""Settings → services: each stage's factory reads only its own settings section."""

from __future__ import annotations

import pytest

from agent.config import LLMSettings, SageMakerSettings, STTSettings, TTSSettings
from agent.llm import OfflineResponder, OpenAICompatibleLLMService
from agent.stt import RealtimeSTTParams
from agent.tts import OpenAISpeechService, PiperHTTPTTSService
from pipelines.services import (
    SAGEMAKER_MAX_CONNECTION_AGE_S,
    llm_conversation,
    llm_service,
    stt_service,
    tts_service,
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
