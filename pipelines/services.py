"""Settings → services: the one place where the app's config meets the services it builds.

Each factory has the same shape, ``<stage>_service(settings.<stage>, **options)``, and is the
only reader of that settings section. The services themselves (``agent.stt``, ``agent.llm``,
``agent.tts``) know nothing of the config.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from loguru import logger
from openai import NOT_GIVEN
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.services.tts_service import TTSService

from agent.config import LLMSettings, STTSettings, TTSSettings
from agent.llm import OfflineResponder, OpenAICompatibleLLMService, conversation_context
from agent.llm.tools import tools_named
from agent.stt import VoxtralRealtimeSTTService, websocket_channel_factory
from agent.stt.channels import ChannelFactory
from agent.tts import OpenAISpeechService, PiperHTTPTTSService, packaged_piper_voice

SAGEMAKER_MAX_CONNECTION_AGE_S = 25 * 60
"""Rotation age for SageMaker streams when none is configured: SageMaker caps a stream at
about 30 minutes."""


def stt_channel_factory(settings: STTSettings) -> ChannelFactory:
    """How the STT reaches its endpoint: a WebSocket to vLLM, or a SageMaker stream."""
    if settings.transport == "sagemaker":
        from agent.stt.sagemaker import sagemaker_channel_factory

        sagemaker = settings.sagemaker
        return sagemaker_channel_factory(
            endpoint_name=sagemaker.endpoint_name,
            region=sagemaker.region,
            target_variant=sagemaker.target_variant,
            invocation_path=sagemaker.invocation_path,
            endpoint_url=sagemaker.endpoint_url,
        )
    return websocket_channel_factory(settings.url, api_key=settings.api_key)


def stt_service(settings: STTSettings, **options: Any) -> VoxtralRealtimeSTTService:
    """The Voxtral realtime STT ``settings`` asks for; ``options`` go to Pipecat's
    ``STTService`` (e.g. ``audio_passthrough``)."""
    params = settings.params
    if settings.transport == "sagemaker" and params.max_connection_age_s is None:
        params = replace(params, max_connection_age_s=SAGEMAKER_MAX_CONNECTION_AGE_S)
    return VoxtralRealtimeSTTService(
        channel_factory=stt_channel_factory(settings),
        settings=VoxtralRealtimeSTTService.Settings(model=settings.model),
        params=params,
        **options,
    )


def llm_service(settings: LLMSettings) -> FrameProcessor:
    """The turn handler: an OpenAI-compatible chat server, or the offline responder without
    ``base_url``."""
    if not settings.base_url:
        return OfflineResponder()
    return OpenAICompatibleLLMService(
        api_key=settings.api_key or "not-needed",
        base_url=settings.base_url,
        settings=OpenAICompatibleLLMService.Settings(
            model=settings.model,
            system_instruction=settings.system_prompt,
            temperature=settings.temperature,
            max_tokens=settings.max_tokens,
            max_completion_tokens=NOT_GIVEN,
            extra={},
        ),
    )


def llm_conversation(settings: LLMSettings) -> LLMContext:
    """A fresh conversation for one call, offering the tools ``llm.tools`` switches on.

    Raises:
        agent.llm.tools.UnknownTool: ``llm.tools`` names a tool nobody registered.
    """
    return conversation_context(tools_named(settings.tools))


def tts_service(settings: TTSSettings) -> TTSService:
    """Piper's HTTP server (offline) or an OpenAI-compatible speech server."""
    if settings.kind == "piper":
        logger.debug(f"TTS: Piper HTTP server at {settings.base_url}")
        return PiperHTTPTTSService(
            base_url=settings.base_url,
            voice=packaged_piper_voice(),
            sample_rate=settings.sample_rate,
        )
    logger.debug(f"TTS: OpenAI-compatible speech at {settings.base_url} ({settings.model})")
    return OpenAISpeechService(
        base_url=settings.base_url,
        model=settings.model,
        voice=settings.voice,
        api_key=settings.api_key,
        sample_rate=settings.sample_rate,
    )
