"""Realtime translation: one Pipecat pipeline per call, speech in one language, its
translation out.

::

    transport.input()                     the speaker's audio (phone: 8 kHz)
      → VADProcessor(shared Silero)       cuts the speech into utterances
                                          (a phone transport runs it inside its input instead)
      → Voxtral realtime STT              one final transcript per utterance (and, with
                                          translation.interim, its stable interim text at the
                                          VAD stop, to start translating sooner)
      → TranslationProcessor              each final → the OpenAI-compatible LLM with a
                                          translation instruction; captions stream out as RTVI
                                          server messages (source beside translation)
      → TTS (interpreter mode)            speaks the translation, sentence by sentence
      → transport.output()                into the call

Turned on for every call by ``translation.enabled`` (:class:`agent.config.TranslationSettings`);
the server then builds this instead of the voice agent. There is no conversation, no turn
taking and no barge-in: the speaker talks, the interpreter follows, neither interrupts the
other. One call translates one direction, the speaker's language into the target language,
into itself; two parties who talk to each other through an interpreter are two calls paired in
an interpreted session (:mod:`pipelines.interpreter`: the same stages, each call's translation
spoken into the other call).

The STT is not told the source language: vLLM's realtime ``session.update`` carries only
``model`` (Voxtral Realtime detects the language itself), and the offline recognizer is
English-only. The languages reach the LLM's instruction.

See :mod:`agent.llm.translation` for the captions' shape and how errors are reported.
"""

from __future__ import annotations

from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.transports.base_transport import BaseTransport

from agent.config import Settings, TranslationSettings
from agent.llm.translation import TranslationProcessor
from agent.transports.traits import traits_of
from pipelines.services import stt_service, translator, tts_service, vad_stages


def build_translation_task(
    transport: BaseTransport, settings: Settings, *, call_id: str
) -> PipelineWorker:
    """The translation call as a Pipecat worker, ready for ``WorkerRunner.run``; the same
    shape as :func:`pipelines.voice_agent.build_voice_agent_task` (the server attaches the
    observers and the idle watch)."""
    translation = settings.translation
    return translation_worker(
        transport,
        settings,
        call_id=call_id,
        translation=translation,
        speech=[tts_service(settings.tts)] if translation.speak else [],
    )


def translation_worker(
    transport: BaseTransport,
    settings: Settings,
    *,
    call_id: str,
    translation: TranslationSettings,
    speech: list[FrameProcessor],
    name: str = "translation",
    about: dict[str, str] | None = None,
) -> PipelineWorker:
    """Speech in, ``translation``'s languages out: the stages every translating call shares,
    with ``speech`` (the TTS, and what goes before it) after the translator; ``about``: more
    fields for its captions."""
    traits = traits_of(transport)
    transport_input = transport.input()
    stages: list[FrameProcessor] = [
        transport_input,
        *vad_stages(settings.turn, transport_input),
        stt_service(settings.stt, enable_eager_end_of_turn=translation.interim),
        TranslationProcessor(
            translator(translation, settings.llm), speak=translation.speak, about=about
        ),
        *speech,
        transport.output(),
    ]
    return PipelineWorker(
        Pipeline(stages),
        params=PipelineParams(
            audio_in_sample_rate=traits.pipeline_sample_rate,
            audio_out_sample_rate=traits.pipeline_sample_rate,
            enable_metrics=True,
        ),
        conversation_id=call_id,
        enable_rtvi=traits.speaks_rtvi,
        enable_tracing=settings.observability.otel_enabled,
        enable_turn_tracking=False,
        idle_timeout_secs=None,  # the server's IdleCallWatch
        name=f"{name}-{call_id}",
    )
