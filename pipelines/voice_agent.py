"""The voice agent: one Pipecat pipeline per call.

::

    transport.input()                     caller audio, 16 kHz mono (phone: 8 kHz)
      → VADProcessor(shared Silero)       VADUserStarted/StoppedSpeakingFrame; one batched model
                                          (a phone transport runs it inside its input instead)
      → Voxtral realtime STT              interim transcripts, one final per user turn
      → keypresses (phone calls)          "The caller pressed 1." as a transcript; barge-in
      → user context aggregator           turn taking; barge-in interrupts the bot; an answer
                                          stays tentative until heard (eager answer, false ends)
      → LLM turn handler                  OpenAI-compatible chat, or the offline responder
      → TTS                               Piper (out of process) or OpenAI-compatible speech
      → transport.output()                resampled to the transport's rate, paced in real time
      → assistant context aggregator      after the output, so an interrupted answer keeps
                                          only the sentences actually played

Audio enters at 16 kHz (the STT protocol's rate) so the STT never resamples (SOXR stream
resampling holds back 19-53 ms). A transport whose audio is natively slower declares it
(:class:`~agent.transports.traits.TransportTraits`: phone calls are 8 kHz) and the pipeline
runs at that rate instead: the caller's audio is then resampled once (8 → 16 kHz, in the STT)
rather than up in the serializer and back down for the answer, and Silero runs at 8 kHz. The
server builds the transport, calls :func:`build_voice_agent_task`, attaches the call's
observers, runs the worker and cancels it when the call ends.

Per-frame cost (``bench/capacity.py``): a transport whose input can host the VAD
(:class:`~agent.transports.traits.HostsVAD`: phone calls) runs it there, so caller audio
crosses one queue on its way to the STT instead of three; the STT does not pass caller audio
further down the pipeline (the adaptive end of turn, the one reader after it, is handed the
audio at the input by :class:`~agent.turns.caller_audio.CallerAudioFeed`; only Pipecat's own
Smart Turn strategy, ``end_of_turn = "silence"`` with ``smart_turn``, still needs it to
travel), RTVI runs only for clients that speak it, and Pipecat's turn-tracking observer only
when tracing needs it. Smart Turn is one model for the process, its verdicts batched across
calls (:mod:`agent.fastpath.shared_smart_turn`). The server attaches the observers inline and
replaces Pipecat's idle watch (:mod:`agent.fastpath`), so the worker is built here with
``idle_timeout_secs=None``.

Turn taking (``settings.turn``): Silero decides speech stopped after ``vad_stop_secs`` of
quiet and the STT then finalizes what was said. By default (``end_of_turn = "adaptive"``,
:mod:`agent.turns.adaptive_stop`) the turn ends at once after a complete question that Smart
Turn v3 also hears as finished, and after ``unfinished_wait_s`` of quiet otherwise, so the bot
does not answer people's clause pauses (``bench/turn_taking.py``). ``"silence"`` is Pipecat's
plain speech timeout (or, with ``smart_turn``, Pipecat's Smart Turn strategy).

What happens to the answer around the end of turn (:mod:`agent.fastpath.tentative_answer`):
with ``eager_answer`` the STT sends the stable interim transcript at the VAD stop and the LLM
starts on it, kept if the final transcript matches and restarted on it if not; with
``merge_false_ends`` (on) a turn whose answer was not heard yet is taken back when the user
goes on, so the LLM sees both parts as one message.
"""

from __future__ import annotations

from collections.abc import Callable

from pipecat.audio.turn.smart_turn.base_smart_turn import SmartTurnParams
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_response_universal import LLMUserAggregatorParams
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.processors.frameworks.rtvi import RTVIObserverParams
from pipecat.transports.base_transport import BaseTransport
from pipecat.turns.user_start import TranscriptionUserTurnStartStrategy
from pipecat.turns.user_stop import (
    BaseUserTurnStopStrategy,
    SpeechTimeoutUserTurnStopStrategy,
    TurnAnalyzerUserTurnStopStrategy,
)
from pipecat.turns.user_turn_strategies import UserTurnStrategies

from agent.config import Settings, TurnSettings
from agent.fastpath.inline_observers import observe_inline
from agent.fastpath.shared_smart_turn import SharedSmartTurnAnalyzer
from agent.fastpath.tentative_answer import tentative_answer_aggregators
from agent.transports.traits import CarriesPhoneCall, traits_of
from agent.turns.adaptive_stop import LATE_FINAL_S, AdaptiveUserTurnStopStrategy
from agent.turns.barge_in import BargeInUserTurnStartStrategy
from agent.turns.caller_audio import CallerAudioFeed
from agent.turns.text_end_of_turn import Conversation, TextEndOfTurn, prompt_context
from pipelines.services import (
    call_tools,
    caller_vad_params,
    keypress_aggregator,
    llm_conversation,
    llm_service,
    stt_service,
    tts_service,
    vad_stages,
)

PRE_SPEECH_MS = 1000
"""Audio Smart Turn hears before the first word the VAD reported (Pipecat's default: 500)."""


def build_voice_agent_task(
    transport: BaseTransport, settings: Settings, *, call_id: str
) -> PipelineWorker:
    """The whole call as a Pipecat worker, ready for ``WorkerRunner.run``.

    Each call gets its own STT connection, LLM context, TTS session and VAD state; cancelling
    the worker releases them all. It has no observers and no idle timeout of its own: the
    server attaches both (:mod:`agent.server`).

    Raises:
        agent.llm.tools.UnknownTool: ``llm.tools`` names a tool nobody registered.
    """
    turn = settings.turn
    traits = traits_of(transport)
    tracing = settings.observability.otel_enabled
    phone = transport if isinstance(transport, CarriesPhoneCall) else None
    tools = call_tools(settings.transfer, settings.dtmf, phone.call_control) if phone else []
    keypresses = [keypress_aggregator(settings.dtmf)] if phone and settings.dtmf.enabled else []
    conversation = llm_conversation(settings.llm, tools)
    user_params = _user_params(
        turn,
        late_final_s=settings.stt.params.final_timeout_s,
        text_model=text_end_of_turn(settings),
        context=lambda: prompt_context(
            conversation.get_messages(),  # type: ignore[arg-type]
            settings.llm.system_prompt,
        ),
    )
    # Who reads the caller's audio after the STT: Pipecat's Smart Turn strategy in the user
    # aggregator (so the audio travels down, as in Pipecat), or the adaptive strategy, fed
    # where the audio is (CallerAudioFeed) so nothing else carries it.
    audio_readers = _audio_readers(turn, user_params)
    user_aggregator, assistant_aggregator = tentative_answer_aggregators(
        conversation,
        user_params=user_params,
        eager_answer=turn.eager_answer,
        merge_false_ends=turn.merge_false_ends,
    )
    transport_input = transport.input()
    stages: list[FrameProcessor] = [
        transport_input,
        *vad_stages(turn, transport_input),
        stt_service(
            settings.stt,
            audio_passthrough=turn.smart_turn and turn.end_of_turn == "silence",
            enable_eager_end_of_turn=turn.eager_answer,
        ),
        *keypresses,
        user_aggregator,
        llm_service(settings.llm),
        tts_service(settings.tts),
        transport.output(),
        assistant_aggregator,
    ]
    worker = PipelineWorker(
        Pipeline(stages),
        params=PipelineParams(
            audio_in_sample_rate=traits.pipeline_sample_rate,
            audio_out_sample_rate=traits.pipeline_sample_rate,
            enable_metrics=True,
        ),
        conversation_id=call_id,
        enable_rtvi=traits.speaks_rtvi,
        # The raw VAD events too, so a client can show whether the VAD hears its user.
        rtvi_observer_params=RTVIObserverParams(vad_user_speaking_enabled=True),
        enable_tracing=tracing,
        enable_turn_tracking=tracing,
        idle_timeout_secs=None,  # the server's IdleCallWatch does the same job more cheaply
        name=f"call-{call_id}",
    )
    if audio_readers:
        observe_inline(worker, [CallerAudioFeed(audio_readers)])
    return worker


def _audio_readers(
    turn: TurnSettings, user_params: LLMUserAggregatorParams
) -> list[BaseUserTurnStopStrategy]:
    """The stop strategies fed the caller's audio at the input: the adaptive one with Smart
    Turn (its window, and the quiet it hears after the VAD stop)."""
    strategies = user_params.user_turn_strategies
    stops = (strategies.stop or []) if strategies else []
    return [s for s in stops if isinstance(s, AdaptiveUserTurnStopStrategy) and turn.smart_turn]


def text_end_of_turn(settings: Settings) -> TextEndOfTurn | None:
    """The text end-of-turn model for one call, where ``turn.text_model`` is on and a ChatML
    completions server is known (``turn.text_model_url``, else the local LLM's server);
    ``None`` otherwise, and the turn is decided as without it."""
    turn, llm = settings.turn, settings.llm
    if not (turn.text_model and turn.smart_turn and turn.end_of_turn == "adaptive"):
        return None
    url = turn.text_model_url or (llm.base_url if llm.kind == "local" else None)
    if url is None:
        return None
    return TextEndOfTurn(url, llm.model, timeout_s=turn.text_timeout_s)


def _user_params(
    turn: TurnSettings,
    *,
    late_final_s: float = LATE_FINAL_S,
    text_model: TextEndOfTurn | None = None,
    context: Callable[[], Conversation] | None = None,
) -> LLMUserAggregatorParams:
    """The turn strategies, and Pipecat's user-turn fallback as a safety net behind them: the
    adaptive strategy has a deadline of its own on every path, so reaching the fallback is an
    error (counted as ``turn_fallback``), never part of a normal turn. A transcript still due
    is waited for ``late_final_s`` past the upper bound (the STT's ``final_timeout_s``)."""
    stop: BaseUserTurnStopStrategy
    fallback_s = LLMUserAggregatorParams.user_turn_stop_timeout
    if turn.end_of_turn == "adaptive":
        stop = AdaptiveUserTurnStopStrategy(
            complete_wait_s=turn.complete_wait_s,
            unfinished_wait_s=turn.unfinished_wait_s,
            turn_analyzer=_turn_long_smart_turn() if turn.smart_turn else None,
            late_final_s=late_final_s,
            text_check=turn.text_check,
            text_model=text_model,
            text_end_p=turn.text_end_p,
            text_end_wait_s=turn.text_end_wait_s,
            text_unfinished_p=turn.text_unfinished_p,
            text_veto_min_words=turn.text_veto_min_words,
            answer_ahead=turn.answer_ahead,
            words_over_audio=turn.words_over_audio,
            model_over_audio=turn.model_over_audio,
            paused_turns_wait=turn.paused_turns_wait,
            text_question_unfinished_p=turn.text_question_unfinished_p,
            context=context,
        )
        fallback_s = max(fallback_s, stop.longest_wait_s + 1.0)
    elif turn.smart_turn:
        stop = TurnAnalyzerUserTurnStopStrategy(turn_analyzer=SharedSmartTurnAnalyzer())
    else:
        stop = SpeechTimeoutUserTurnStopStrategy(user_speech_timeout=turn.user_speech_timeout_s)
    strategies = UserTurnStrategies(
        start=[
            BargeInUserTurnStartStrategy(
                vad_params=caller_vad_params(turn), barge_in_secs=turn.barge_in_secs
            ),
            TranscriptionUserTurnStartStrategy(),
        ],
        stop=[stop],
    )
    return LLMUserAggregatorParams(
        user_turn_strategies=strategies, user_turn_stop_timeout=fallback_s
    )


def _turn_long_smart_turn() -> SharedSmartTurnAnalyzer:
    """Smart Turn v3 (the model in Pipecat's wheel, one session for all calls) as the adaptive
    strategy's second opinion: it keeps the turn's audio after a COMPLETE verdict (the
    strategy clears it when the turn ends), and hears 1 s before the first word the VAD
    reported instead of Pipecat's 0.5 s: Silero needs 100-200 ms of speech to report any, so a
    short "um" or "so" before a pause goes unreported, and without it "um... what was it?"
    is judged as a plain "what was it?"."""
    return SharedSmartTurnAnalyzer(
        params=SmartTurnParams(pre_speech_ms=PRE_SPEECH_MS), clear_on_complete=False
    )
