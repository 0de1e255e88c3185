"""The whole voice-agent pipeline with real peers on loopback: speech in, audio out.

The offline ASR server (``asr_server_url``) recognizes espeak speech; the LLM is either an
OpenAI-compatible chat server streaming SSE with a tool call, or the offline responder; TTS
is Piper's own HTTP server (child process) or an OpenAI-compatible speech server.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.pipeline.worker import PipelineWorker
from pipecat.processors.aggregators.llm_response_universal import LLMAssistantAggregator
from pipecat.workers.runner import WorkerRunner

from agent.config import Settings, load_settings
from agent.fastpath.inline_observers import observe_inline
from agent.stt import SAMPLE_RATE
from pipelines.voice_agent import build_voice_agent_task
from tests.conftest import requires_espeak
from tests.fakes.chat_server import ChatServer
from tests.fakes.speech import speech_at, word_error_rate
from tests.fakes.speech_server import SpeechServer
from tests.pipelines.conftest import requires_piper_http
from tests.pipelines.loopback import LoopbackTransport


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    with ChatServer() as server:
        yield server


@pytest.fixture
def speech_server() -> Iterator[SpeechServer]:
    with SpeechServer() as server:
        yield server


def find(root: Any, kind: type) -> Any:
    """The first processor of ``kind`` in a (nested) pipeline."""
    stack = [root]
    while stack:
        node = stack.pop(0)
        if isinstance(node, kind):
            return node
        stack.extend(getattr(node, "processors", []) or [])
    raise LookupError(f"no {kind.__name__} in the pipeline")


@dataclass
class Call:
    """A running call: the worker, its transport, and a background feed of silence."""

    worker: PipelineWorker
    transport: LoopbackTransport

    def messages(self) -> list[dict[str, Any]]:
        aggregator = find(self.worker.pipeline, LLMAssistantAggregator)
        return [m for m in aggregator.context.get_messages() if isinstance(m, dict)]

    async def say(self, text: str) -> float:
        """Speak ``text`` (espeak) and return the moment its last audio frame went in."""
        return await self.transport.input().say(speech_at(text, SAMPLE_RATE))

    async def played_out(self, since: float, *, quiet_s: float = 0.5) -> None:
        """Wait until the bot's audio since ``since`` has stopped for ``quiet_s``."""
        output = self.transport.output()

        def played_out() -> bool:
            voiced = output.voiced_since(since)  # none yet on a loaded machine: not played out
            return bool(voiced) and time.monotonic() - voiced[-1].at > quiet_s

        await self.wait_for(played_out)

    async def wait_for(self, predicate: Any, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; context: {self.messages()}")
            await asyncio.sleep(0.05)


@pytest.fixture
async def start_call() -> AsyncIterator[Any]:
    """Run a call the way the server does (WorkerRunner, cancelled at the end)."""
    running: list[tuple[PipelineWorker, asyncio.Task[None]]] = []

    async def start(settings: Settings, observers: list[BaseObserver] | None = None) -> Call:
        transport = LoopbackTransport()
        worker = build_voice_agent_task(transport, settings, call_id="test-call")
        if observers:
            observe_inline(worker, observers)  # as the server attaches the call's
        started = asyncio.Event()

        @worker.event_handler("on_pipeline_started")
        async def _started(_worker: PipelineWorker, _frame: object) -> None:
            started.set()

        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(worker)
        run = asyncio.create_task(runner.run())
        await asyncio.wait_for(started.wait(), timeout=30)
        running.append((worker, run))
        return Call(worker, transport)

    yield start
    for worker, run in running:
        await worker.cancel()
        await asyncio.wait_for(run, timeout=15)


def settings_for(asr_server_url: str, asr_model_name: str, **sections: dict[str, Any]) -> Settings:
    overrides: dict[str, Any] = {
        "stt": {"url": asr_server_url, "model": asr_model_name},
        "llm": {"kind": "echo"},  # "You said: …"; the local model's calls: test_local_llm.py
    }
    overrides.update(sections)
    return load_settings("default", overrides=overrides)


def role_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else ""


@requires_espeak
async def test_llm_path_with_a_tool_call_over_real_http(
    asr_server_url: str,
    asr_model_name: str,
    chat_server: ChatServer,
    speech_server: SpeechServer,
) -> None:
    llm: dict[str, Any] = {
        "kind": "openai",
        "base_url": chat_server.base_url,
        "model": "test-model",
        "api_key": "sk-test-key",
        "tools": ["get_current_time"],
    }
    settings = settings_for(
        asr_server_url,
        asr_model_name,
        llm=llm,
        tts={"kind": "openai", "base_url": speech_server.base_url, "sample_rate": 24000},
    )
    call = await start_call_fixture(settings)
    spoken_at = await call.say("what time is it in paris")
    await call.wait_for(lambda: len(call.transport.output().voiced_since(spoken_at)) > 10)
    await call.wait_for(
        lambda: any(
            m["role"] == "assistant" and "Europe/Paris" in role_text(m) for m in call.messages()
        )
    )

    assert len(chat_server.requests) == 2
    first, second = chat_server.requests
    assert chat_server.headers[0]["authorization"] == "Bearer sk-test-key"
    assert first["stream"] is True and first["model"] == "test-model"
    roles = [m["role"] for m in first["messages"]]
    assert roles[0] == "system" and "developer" not in roles
    assert first["messages"][0]["content"] == settings.llm.system_prompt
    assert "time" in role_text(first["messages"][-1]).lower()
    assert [t["function"]["name"] for t in first["tools"]] == ["get_current_time"]
    tool_messages = [m for m in second["messages"] if m["role"] == "tool"]
    assert tool_messages and tool_messages[0]["tool_call_id"] == "call_1"
    assert "Europe/Paris" in tool_messages[0]["content"]
    assert all(m["role"] != "developer" for m in second["messages"])
    spoken = [body["input"] for _headers, body in speech_server.requests]
    assert any("Europe/Paris" in text for text in spoken)


NUMBERS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


@requires_espeak
async def test_barge_in_leaves_only_the_spoken_part_of_the_answer_in_the_context(
    asr_server_url: str, asr_model_name: str, speech_server: SpeechServer
) -> None:
    """The caller talks over a long answer: the next request to the LLM carries the sentences
    the caller heard, not the ones the LLM wrote but nobody played."""
    with ChatServer(answer=" ".join(f"Sentence {n} is here." for n in NUMBERS)) as chat:
        settings = settings_for(
            asr_server_url,
            asr_model_name,
            llm={"kind": "openai", "base_url": chat.base_url, "model": "test-model"},
            tts={"kind": "openai", "base_url": speech_server.base_url, "sample_rate": 24000},
        )
        call = await start_call_fixture(settings)  # each sentence plays as 0.5 s of tone
        spoken_at = await call.say("what is the weather like in paris today")
        output = call.transport.output()
        await call.wait_for(lambda: len(output.voiced_since(spoken_at)) > 0)
        await asyncio.sleep(0.8)  # one or two sentences played, the rest still to come
        await call.say("please call me back tomorrow morning")
        await call.wait_for(lambda: len(chat.requests) >= 2)

        answer = [m for m in chat.requests[1]["messages"] if m["role"] == "assistant"]
        assert len(answer) == 1
        heard = role_text(answer[0])
        assert heard.startswith("Sentence one is here.")
        assert "Sentence ten" not in heard, heard
        assert len(heard) < len(chat.answer) / 2, heard
        # The LLM's whole answer was written (and sent to TTS faster than it plays), so the
        # difference is what the barge-in cut, not what the LLM produced.
        synthesized = " ".join(body["input"] for _headers, body in speech_server.requests)
        assert len(synthesized) > len(heard)
        # ...and the request answers the interruption (tiny.en may mishear its end).
        assert "call me" in role_text(chat.requests[1]["messages"][-1]).lower()


start_call_fixture: Any = None


@pytest.fixture(autouse=True)
def _expose_start_call(start_call: Any) -> None:
    global start_call_fixture
    start_call_fixture = start_call


@pytest.mark.conversation
@requires_espeak
@requires_piper_http
async def test_offline_profile_answers_from_the_transcript_with_piper(
    asr_server_url: str, asr_model_name: str, piper_url: str
) -> None:
    settings = settings_for(asr_server_url, asr_model_name, tts={"base_url": piper_url})
    assert settings.llm.kind == "echo"  # the offline responder answers
    call = await start_call_fixture(settings)
    latencies = []
    sentences = ("turn on the lights in the kitchen", "please call me back tomorrow morning")
    for sentence in sentences:
        spoken_at = await call.say(sentence)
        await call.wait_for(lambda s=spoken_at: len(call.transport.output().voiced_since(s)) > 5)
        latencies.append(call.transport.output().voiced_since(spoken_at)[0].at - spoken_at)
        await call.wait_for(
            lambda s=sentence: any(
                m["role"] == "assistant"
                and role_text(m).startswith("You said:")
                and word_error_rate(s, role_text(m).removeprefix("You said:")) <= 0.34
                for m in call.messages()
            )
        )
        if sentence != sentences[-1]:  # the answer plays out: the next turn is no barge-in
            await call.played_out(since=spoken_at)
    print(f"end of speech → first bot audio: {[f'{x * 1000:.0f} ms' for x in latencies]}")


@requires_espeak
async def test_with_smart_turn_on_a_live_call_is_answered(
    asr_server_url: str,
    asr_model_name: str,
    speech_server: SpeechServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the silence rule, Smart Turn v3 (Pipecat's strategy) decides the end of the turn on
    a live call, and the question is answered (within its 3 s fallback at worst, plus the
    usual stages)."""
    from pipecat.audio.turn.base_turn_analyzer import EndOfTurnState

    from agent.fastpath.shared_smart_turn import SharedSmartTurnAnalyzer

    verdicts: list[EndOfTurnState] = []
    analyze = SharedSmartTurnAnalyzer.analyze_end_of_turn

    async def recording(self: SharedSmartTurnAnalyzer) -> Any:
        state, metrics = await analyze(self)
        verdicts.append(state)
        return state, metrics

    monkeypatch.setattr(SharedSmartTurnAnalyzer, "analyze_end_of_turn", recording)
    settings = settings_for(
        asr_server_url,
        asr_model_name,
        turn={"end_of_turn": "silence", "smart_turn": True},
        tts={"kind": "openai", "base_url": speech_server.base_url, "sample_rate": 24000},
    )
    call = await start_call_fixture(settings)
    spoken_at = await call.say("please call me back tomorrow morning")
    await call.wait_for(
        lambda: any(
            m["role"] == "assistant" and "tomorrow" in role_text(m).lower() for m in call.messages()
        ),
        timeout=20,
    )
    await call.wait_for(lambda: len(call.transport.output().voiced_since(spoken_at)) > 0)
    answered_after = call.transport.output().voiced_since(spoken_at)[0].at - spoken_at
    assert verdicts, "Smart Turn was never asked whether the turn had ended"
    assert answered_after < 5.0, f"first bot audio {answered_after:.1f} s after the question"


class AudioPushes(BaseObserver):
    """Every processor that pushes caller audio (each push, not only the first)."""

    def __init__(self) -> None:
        super().__init__()
        self.sources: set[str] = set()

    async def on_push_frame(self, data: FramePushed) -> None:
        from pipecat.frames.frames import InputAudioRawFrame

        if isinstance(data.frame, InputAudioRawFrame):
            self.sources.add(type(data.source).__name__)


@requires_espeak
async def test_caller_audio_stops_at_the_stt_and_smart_turn_still_hears_it(
    asr_server_url: str,
    asr_model_name: str,
    speech_server: SpeechServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the shipped defaults (adaptive end of turn, Smart Turn on), no caller frame goes
    past the STT to the aggregators, LLM, TTS and output, yet Smart Turn judges the question
    from the caller's audio (fed at the input) and the question is answered."""
    from pipecat.audio.turn.base_turn_analyzer import EndOfTurnState

    from agent.fastpath.shared_smart_turn import SharedSmartTurnAnalyzer

    verdicts: list[tuple[EndOfTurnState, int]] = []
    analyze = SharedSmartTurnAnalyzer.analyze_end_of_turn

    async def recording(self: SharedSmartTurnAnalyzer) -> Any:
        heard = self.state_nbytes
        state, metrics = await analyze(self)
        verdicts.append((state, heard))
        return state, metrics

    monkeypatch.setattr(SharedSmartTurnAnalyzer, "analyze_end_of_turn", recording)
    settings = settings_for(
        asr_server_url,
        asr_model_name,
        tts={"kind": "openai", "base_url": speech_server.base_url, "sample_rate": 24000},
    )
    assert settings.turn.end_of_turn == "adaptive" and settings.turn.smart_turn
    pushes = AudioPushes()
    call = await start_call_fixture(settings, observers=[pushes])
    spoken_at = await call.say("please call me back tomorrow morning")
    await call.wait_for(lambda: len(call.transport.output().voiced_since(spoken_at)) > 0)
    assert verdicts, "Smart Turn was never asked about the question"
    assert all(heard > 16000 for _state, heard in verdicts), "Smart Turn heard no speech"
    assert pushes.sources <= {"LoopbackInput", "VADProcessor"}, pushes.sources


def test_smart_turn_v3_loads_from_the_wheel_when_switched_on() -> None:
    """Smart Turn v3 ships inside Pipecat's wheel (no download). With the silence rule it
    decides the end of the turn instead of the plain speech timeout; by default it is the
    adaptive strategy's second opinion on complete questions."""
    from pipecat.turns.user_stop import (
        SpeechTimeoutUserTurnStopStrategy,
        TurnAnalyzerUserTurnStopStrategy,
    )

    from agent.config import TurnSettings
    from agent.fastpath.shared_smart_turn import SharedSmartTurnAnalyzer
    from agent.turns.adaptive_stop import AdaptiveUserTurnStopStrategy
    from pipelines.voice_agent import _user_params

    def stop_strategy(turn: TurnSettings) -> object:
        strategies = _user_params(turn).user_turn_strategies
        assert strategies is not None and strategies.stop is not None
        (stop,) = strategies.stop
        return stop

    smart = stop_strategy(TurnSettings(end_of_turn="silence", smart_turn=True))
    assert isinstance(smart, TurnAnalyzerUserTurnStopStrategy)
    assert isinstance(smart._turn_analyzer, SharedSmartTurnAnalyzer)
    plain = stop_strategy(TurnSettings(end_of_turn="silence", smart_turn=False))
    assert type(plain) is SpeechTimeoutUserTurnStopStrategy
    adaptive = stop_strategy(TurnSettings())
    assert isinstance(adaptive, AdaptiveUserTurnStopStrategy)
    assert isinstance(adaptive._analyzer, SharedSmartTurnAnalyzer)
    assert adaptive._analyzer.params.pre_speech_ms == 1000  # a short "um" the VAD missed
    # Pipecat's fallback is a safety net behind the strategy's own longest deadline.
    assert _user_params(TurnSettings()).user_turn_stop_timeout > adaptive.longest_wait_s
    patient = _user_params(TurnSettings(), late_final_s=10.0).user_turn_stop_timeout
    assert patient > TurnSettings().unfinished_wait_s + 10.0
    build_voice_agent_task(  # the whole pipeline builds with it, too
        LoopbackTransport(),
        load_settings("default", overrides={"turn": {"smart_turn": True}}),
        call_id="smart",
    )


def test_the_default_profile_asks_its_local_llm_about_the_end_of_turn() -> None:
    """The offline profile's llama.cpp server gives the text end-of-turn model; a profile
    without a local LLM (or with the model switched off) has none, and decides without it."""
    from pipelines.voice_agent import text_end_of_turn

    default = load_settings("default")
    model = text_end_of_turn(default)
    assert model is not None and model.timeout_s == default.turn.text_timeout_s
    assert default.turn.text_unfinished_p == 0.02
    assert (default.turn.text_end_p, default.turn.text_end_wait_s) == (0.1, 0.8)
    assert default.turn.answer_ahead and default.turn.words_over_audio
    assert default.turn.model_over_audio
    assert default.turn.paused_turns_wait
    # tiny.en closes fragments with a question mark; a Voxtral profile's mark decides alone
    assert default.turn.text_question_unfinished_p == 0.001
    assert load_settings("vllm").turn.text_question_unfinished_p == 0
    assert text_end_of_turn(load_settings("default", overrides={"llm": {"kind": "echo"}})) is None
    off = load_settings("default", overrides={"turn": {"text_model": False}})
    assert text_end_of_turn(off) is None
