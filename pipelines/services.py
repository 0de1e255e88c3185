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
from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.audio.vad.vad_analyzer import VADParams
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.audio.vad_processor import VADProcessor
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.services.tts_service import TTSService

from agent.config import (
    DTMFSettings,
    LLMSettings,
    STTSettings,
    TransferSettings,
    TranslationSettings,
    TTSSettings,
    TurnSettings,
)
from agent.fastpath.shared_silero import SharedSileroVADAnalyzer
from agent.llm import OfflineResponder, OpenAICompatibleLLMService, conversation_context
from agent.llm.clients import shared_openai_client
from agent.llm.keypresses import KeypressAggregator
from agent.llm.phone_tools import send_dtmf_tool, transfer_call_tool
from agent.llm.tools import tools_named
from agent.llm.translation import TranslationSpec, Translator
from agent.stt import VoxtralRealtimeSTTService, websocket_channel_factory
from agent.stt.channels import ChannelFactory
from agent.transports.call_control import CallControl
from agent.transports.traits import HostsVAD
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
    """The turn handler: an OpenAI-compatible chat server (a remote one, or the local
    llama.cpp server of ``llm.kind = "local"``), or the echo responder."""
    if settings.kind == "echo" or not settings.base_url:
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


def translator(settings: TranslationSettings, llm: LLMSettings) -> Translator:
    """The translating client: ``llm``'s server, ``settings``' languages and instruction.

    Raises:
        ValueError: ``llm.base_url`` is not set (the settings refuse that combination at
            load time; this is for callers that build their own).
    """
    if not llm.base_url:
        raise ValueError("translation needs llm.base_url: an OpenAI-compatible chat server")
    return Translator(
        shared_openai_client(api_key=llm.api_key or "not-needed", base_url=llm.base_url),
        model=settings.model or llm.model,
        spec=TranslationSpec(
            source_language=settings.source_language,
            target_language=settings.target_language,
            instruction=settings.instruction,
        ),
        temperature=settings.temperature,
        max_tokens=settings.max_tokens,
        timeout_s=settings.timeout_s,
    )


def llm_conversation(
    settings: LLMSettings, call_tools: list[FunctionSchema] | None = None
) -> LLMContext:
    """A fresh conversation for one call, offering the tools ``llm.tools`` switches on and the
    call's own (:func:`call_tools`).

    Raises:
        agent.llm.tools.UnknownTool: ``llm.tools`` names a tool nobody registered.
    """
    return conversation_context([*tools_named(settings.tools), *(call_tools or [])])


def call_tools(
    transfer: TransferSettings, dtmf: DTMFSettings, control: CallControl | None
) -> list[FunctionSchema]:
    """A phone call's tools: ``transfer_call`` when it is on and the call can be transferred
    (its carrier's API is configured), ``send_dtmf`` when ``dtmf.send_tool`` is on."""
    tools = []
    if transfer.enabled and control is not None:
        tools.append(
            transfer_call_tool(
                destinations=transfer.destinations, announcement=transfer.announcement
            )
        )
    if dtmf.send_tool:
        tools.append(send_dtmf_tool())
    return tools


def keypress_aggregator(settings: DTMFSettings) -> KeypressAggregator:
    """The caller's keypresses as one "The caller pressed …" transcript per sequence."""
    return KeypressAggregator(timeout_s=settings.timeout_s)


def tts_service(settings: TTSSettings) -> TTSService:
    """Piper's HTTP server (offline) or an OpenAI-compatible speech server."""
    if settings.kind == "piper":
        logger.debug(f"TTS: Piper HTTP server at {settings.base_url}")
        return PiperHTTPTTSService(
            base_url=settings.base_url,
            voice=packaged_piper_voice(),
            sample_rate=settings.sample_rate,
            trim_lead_in=settings.trim_lead_in,
        )
    logger.debug(f"TTS: OpenAI-compatible speech at {settings.base_url} ({settings.model})")
    return OpenAISpeechService(
        base_url=settings.base_url,
        model=settings.model,
        voice=settings.voice,
        api_key=settings.api_key,
        sample_rate=settings.sample_rate,
        trim_lead_in=settings.trim_lead_in,
    )


def caller_vad_params(settings: TurnSettings) -> VADParams:
    """The caller's VAD thresholds and timing while the bot is quiet."""
    return VADParams(
        start_secs=settings.vad_start_secs,
        stop_secs=settings.vad_stop_secs,
        confidence=settings.vad_confidence,
        min_volume=settings.vad_min_volume,
    )


def caller_vad(settings: TurnSettings, **options: Any) -> SharedSileroVADAnalyzer:
    """The caller's VAD as the turn settings tune it: thresholds, timing, the talker gate."""
    return SharedSileroVADAnalyzer(
        params=caller_vad_params(settings),
        foreground_margin_db=settings.vad_foreground_db or None,
        floor_margin_db=settings.vad_floor_margin_db or None,
        **options,
    )


def vad_stages(settings: TurnSettings, transport_input: FrameProcessor) -> list[FrameProcessor]:
    """The caller's VAD (:func:`caller_vad`), hosted by ``transport_input`` where it can (no
    stage: one queue hop less per frame), else the stage to put after it."""
    vad = caller_vad(settings)
    if isinstance(transport_input, HostsVAD):
        transport_input.use_vad(vad)
        return []
    return [VADProcessor(vad_analyzer=vad)]
