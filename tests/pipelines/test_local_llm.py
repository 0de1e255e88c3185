"""Calls through the offline profile with its real model: what a streaming LLM brings.

The default profile's LLM (llama.cpp's server with the packaged SmolLM2-135M-Instruct, one
server for this module, ``local_llm``), the offline recognizer and Piper's HTTP server, with
espeak speech on a loopback transport. The model's wording is not asserted, only what the
pipeline does with a streamed answer: it is spoken sentence by sentence while the model still
writes, a barge-in cuts the audio and leaves in the context only what was played, and the
next question reaches the model with the conversation so far.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import pytest
from pipecat.frames.frames import (
    EagerEndOfTurnCancelFrame,
    Frame,
    InterruptionFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSTextFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.pipeline.worker import PipelineWorker
from pipecat.services.tts_service import TTSService
from pipecat.transports.base_output import BaseOutputTransport
from pipecat.workers.runner import WorkerRunner

from agent.config import LLMSettings, Settings, load_settings
from agent.llm import OpenAICompatibleLLMService
from pipelines.voice_agent import build_voice_agent_task
from tests.conftest import requires_espeak, requires_local_llm
from tests.pipelines.conftest import requires_piper_http
from tests.pipelines.loopback import RATE, LoopbackTransport
from tests.pipelines.test_voice_agent import Call, find, role_text, settings_for

pytestmark = [requires_espeak, requires_piper_http, requires_local_llm, pytest.mark.timeout(120)]

LONG_ANSWERS = (
    "You are a helpful voice assistant. Answer every question in four short spoken "
    "sentences, without lists or markdown."
)


class LLMWatch(BaseObserver):
    """What the LLM service was asked (a request started ahead of the turn's end too, unless it
    was withdrawn) and what it wrote, and what the caller heard (the sentences the output
    transport passes on once their audio has played), with the moments it happened."""

    def __init__(self) -> None:
        super().__init__()
        self.contexts: list[list[dict[str, Any]]] = []
        self.answers: list[list[tuple[float, str]]] = []
        self.started: list[float] = []
        self.ended: list[float] = []
        self.heard: list[tuple[float, str]] = []
        self.interruptions: list[float] = []
        self._ahead = False  # the last request was started ahead of its turn's end

    async def on_push_frame(self, data: FramePushed) -> None:
        frame: Frame = data.frame
        now = time.monotonic()
        if isinstance(frame, InterruptionFrame) and data.first_push:
            self.interruptions.append(now)
        if isinstance(frame, TTSTextFrame) and isinstance(data.source, BaseOutputTransport):
            self.heard.append((now, frame.text))
        if isinstance(data.destination, OpenAICompatibleLLMService):
            # A request started ahead of the turn's end counts unless it is withdrawn.
            if isinstance(frame, LLMContextFrame):
                self.contexts.append(copy.deepcopy(frame.context.get_messages()))
                self._ahead = frame.speculation
            elif isinstance(frame, EagerEndOfTurnCancelFrame) and self._ahead:
                self.contexts.pop()
                self._ahead = False
        if not isinstance(data.source, OpenAICompatibleLLMService):
            return
        if isinstance(frame, LLMFullResponseStartFrame):
            self.answers.append([])
            self.started.append(now)
        elif isinstance(frame, LLMTextFrame) and self.answers:
            self.answers[-1].append((now, frame.text))
        elif isinstance(frame, LLMFullResponseEndFrame):
            self.ended.append(now)

    def text(self, answer: int) -> str:
        return "".join(token for _at, token in self.answers[answer])


class RealCall(Call):
    """A call with the LLM watched and the sentences sent to the voice recorded."""

    watch: LLMWatch
    sentences: list[tuple[float, str]]


@pytest.fixture
async def start_call() -> AsyncIterator[Any]:
    running: list[tuple[PipelineWorker, asyncio.Task[None]]] = []

    async def start(settings: Settings) -> RealCall:
        transport = LoopbackTransport()
        worker = build_voice_agent_task(transport, settings, call_id="local-llm-call")
        watch = LLMWatch()
        worker.add_observer(watch)
        sentences: list[tuple[float, str]] = []
        tts = find(worker.pipeline, TTSService)
        synthesize = tts.run_tts

        async def recording(text: str, context_id: str) -> AsyncGenerator[Frame, None]:
            sentences.append((time.monotonic(), text))
            async for frame in synthesize(text, context_id):
                yield frame

        tts.run_tts = recording
        started = asyncio.Event()

        @worker.event_handler("on_pipeline_started")
        async def _started(_worker: PipelineWorker, _frame: object) -> None:
            started.set()

        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(worker)
        run = asyncio.create_task(runner.run())
        await asyncio.wait_for(started.wait(), timeout=30)
        running.append((worker, run))
        call = RealCall(worker, transport)
        call.watch, call.sentences = watch, sentences
        return call

    yield start
    for worker, run in running:
        await worker.cancel()
        await asyncio.wait_for(run, timeout=15)


def offline_settings(
    asr_server_url: str, asr_model_name: str, piper_url: str, llm: LLMSettings, **changes: Any
) -> Settings:
    """The offline profile as ``serve`` runs it, its LLM being this module's server."""
    return settings_for(
        asr_server_url,
        asr_model_name,
        llm={**llm.model_dump(exclude={"base_url", "model"}), **changes},
        tts={"base_url": piper_url},
    )


async def test_a_long_answer_is_spoken_sentence_by_sentence_while_the_model_writes(
    asr_server_url: str,
    asr_model_name: str,
    piper_url: str,
    local_llm: LLMSettings,
    start_call: Any,
) -> None:
    settings = offline_settings(
        asr_server_url, asr_model_name, piper_url, local_llm, system_prompt=LONG_ANSWERS
    )
    assert settings.llm.base_url == local_llm.base_url
    call = await start_call(settings)
    spoken_at = await call.say("tell me about the moon")
    await call.wait_for(lambda: call.watch.ended, timeout=60)
    output = call.transport.output()
    await call.wait_for(lambda: len(output.voiced_since(spoken_at)) > 0)

    written = call.watch.answers[0]
    assert len(written) > 10, call.watch.text(0)  # a streamed answer, token by token
    last_token = written[-1][0]
    # The voice got the answer a sentence at a time, the first before the model was done.
    # (When its audio begins is the TTS's speed: on a loaded machine Piper's first sentence
    # can come out after SmolLM2 wrote its last token, which is no fault of the streaming.)
    answer_sentences = [(at, text) for at, text in call.sentences if at > spoken_at]
    assert len(answer_sentences) >= 2, (answer_sentences, call.watch.text(0))
    assert answer_sentences[0][0] < last_token
    assert not call.watch.text(0).startswith("You said")


async def test_a_barge_in_stops_the_answer_and_the_context_keeps_only_what_was_heard(
    asr_server_url: str,
    asr_model_name: str,
    piper_url: str,
    local_llm: LLMSettings,
    start_call: Any,
) -> None:
    settings = offline_settings(
        asr_server_url, asr_model_name, piper_url, local_llm, system_prompt=LONG_ANSWERS
    )
    call = await start_call(settings)
    spoken_at = await call.say("tell me about the ocean")
    output = call.transport.output()
    # The caller hears the first sentence out, then talks over the next one.
    await call.wait_for(lambda: call.watch.heard, timeout=60)
    await call.wait_for(lambda: output.voiced_since(call.watch.heard[0][0]))
    barged_at = await call.say("please stop talking now")
    await call.wait_for(lambda: len(call.watch.contexts) >= 2)

    # The audio stopped: from the interruption until the next answer began, at most a moment
    # of it played (the answer had seconds left). Counted in audio, not on the clock: on a
    # loaded machine (CI, 2026-12-06) one last chunk went out 0.39 s after the
    # interruption, and none after it.
    cut_at = next(at for at in call.watch.interruptions if at > spoken_at)
    next_answer = call.watch.started[1] if len(call.watch.started) > 1 else time.monotonic()
    late = [p for p in output.voiced_since(cut_at) if p.at < next_answer]
    played_s = sum(len(p.audio) for p in late) / 2 / RATE
    assert played_s <= 0.3, f"{played_s:.2f} s of the answer played after the barge-in"
    assert cut_at < barged_at

    # The second request carries the first answer as far as it was heard: the sentences
    # played, fewer than the model wrote.
    second = call.watch.contexts[1]
    answer = [role_text(m) for m in second if m.get("role") == "assistant"]
    written = " ".join(call.watch.text(0).split())
    heard = " ".join(" ".join(text for at, text in call.watch.heard if at < cut_at).split())
    assert len(answer) == 1, second
    assert " ".join(answer[0].split()) == heard, (answer, heard)
    assert heard and len(heard) < len(written), (heard, written)
    assert written.startswith(heard[:20]), (heard, written)


async def test_a_follow_up_reaches_the_model_with_the_first_exchange_in_its_context(
    asr_server_url: str,
    asr_model_name: str,
    piper_url: str,
    local_llm: LLMSettings,
    start_call: Any,
) -> None:
    # The default profile's temperature: at the fixture's (0.7, 200 tokens) SmolLM2 once
    # rambled in French for longer than the answer may take to play out on a loaded machine.
    # A short answer: the test waits for it to play out before the follow-up.
    settings = offline_settings(
        asr_server_url,
        asr_model_name,
        piper_url,
        local_llm,
        temperature=load_settings("default").llm.temperature,
        max_tokens=32,
    )
    call = await start_call(settings)
    first_at = await call.say("what is the weather like in paris today")
    await call.wait_for(lambda: call.watch.ended, timeout=60)
    await call.played_out(since=first_at)  # the answer plays out: the next turn is no barge-in
    await call.say("and tomorrow")
    await call.wait_for(lambda: len(call.watch.ended) >= 2, timeout=60)

    first_context, second_context = call.watch.contexts[:2]
    roles = [m.get("role") for m in second_context if m.get("role") != "system"]
    assert roles == ["user", "assistant", "user"], second_context
    user, answer, follow_up = [m for m in second_context if m.get("role") != "system"]
    assert "paris" in role_text(user).lower()
    assert role_text(answer).strip() and role_text(answer) != role_text(user)
    assert " ".join(role_text(answer).split()) in " ".join(call.watch.text(0).split())
    assert "tomorrow" in role_text(follow_up).lower()
    assert len(first_context) < len(second_context)
    assert call.watch.text(1).strip()  # ...and the model answered it
