"""The Prometheus registry: call counts read from the call registry, histograms from turns,
STT reconnects and errors from a real STT service losing its real WebSocket connection."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import websockets
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.server import ServerConnection

from agent.calls import CallLimitReached, CallRegistry
from agent.config import STTSettings
from agent.observability.metrics import STAGES, AgentMetrics
from agent.observability.turn_latency import TurnLatencyObserver
from agent.stt import RealtimeSTTParams
from agent.stt.protocol import ErrorEvent, SessionCreated
from pipelines.services import stt_service


def scrape(metrics: AgentMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the text exposition, parsed back the way Prometheus reads it."""
    text = metrics.exposition().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_call_counts_follow_the_call_registry() -> None:
    calls = CallRegistry(max_calls=1)
    metrics = AgentMetrics(calls=calls)
    first = calls.reserve("twilio")
    with pytest.raises(CallLimitReached):
        calls.reserve("twilio")
    samples = scrape(metrics)
    assert samples[("voice_agent_active_calls", ())] == 1
    assert samples[("voice_agent_max_calls", ())] == 1
    assert samples[("voice_agent_calls_started_total", ())] == 1
    assert samples[("voice_agent_calls_refused_total", ())] == 1
    assert samples[("voice_agent_calls_ended_total", ())] == 0
    first.release()
    samples = scrape(metrics)
    assert samples[("voice_agent_active_calls", ())] == 0
    assert samples[("voice_agent_calls_ended_total", ())] == 1


def test_every_stage_is_exported_before_the_first_turn() -> None:
    samples = scrape(AgentMetrics(process=False))
    for stage in STAGES:
        assert samples[("voice_agent_turn_stage_seconds_count", (("stage", stage),))] == 0
    assert samples[("voice_agent_turn_seconds_count", ())] == 0
    assert samples[("voice_agent_stt_reconnects_total", ())] == 0


def test_two_servers_in_one_process_keep_their_own_numbers() -> None:
    a, b = AgentMetrics(), AgentMetrics()
    a.observe_stage("stt_final", 0.3)
    a.count_error("X", "server")
    assert scrape(a)[("voice_agent_turn_stage_seconds_count", (("stage", "stt_final"),))] == 1
    assert scrape(b)[("voice_agent_turn_stage_seconds_count", (("stage", "stt_final"),))] == 0
    assert ("voice_agent_errors_total", (("category", "server"), ("kind", "X"))) not in scrape(b)


@pytest.fixture
async def flaky_stt_peer() -> AsyncIterator[tuple[str, list[int]]]:
    """A realtime peer whose first connection reports an error and then drops; later ones
    behave. Yields its URL and the number of connections it has seen."""
    seen: list[int] = []

    async def handle(ws: ServerConnection) -> None:
        seen.append(1)
        await ws.send(SessionCreated(id=f"sess-{len(seen)}", created=1).to_json())
        await ws.recv()  # session.update
        if len(seen) == 1:
            await ws.send(ErrorEvent(error="engine hiccup", code="server_error").to_json())
            await ws.close()
            return
        await ws.wait_closed()

    async with websockets.serve(handle, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"ws://127.0.0.1:{port}/v1/realtime", seen


async def test_stt_reconnects_and_errors_are_counted(
    flaky_stt_peer: tuple[str, list[int]],
) -> None:
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineWorker
    from pipecat.workers.runner import WorkerRunner

    url, seen = flaky_stt_peer
    stt = stt_service(
        STTSettings(
            url=url,
            model="m",
            params=RealtimeSTTParams(reconnect_min_wait_s=0.05, reconnect_max_wait_s=0.2),
        )
    )
    metrics = AgentMetrics(process=False)
    worker = PipelineWorker(
        Pipeline([stt]),
        observers=[TurnLatencyObserver(call_id="c", metrics=metrics, log_turns=False)],
        idle_timeout_secs=None,
        enable_rtvi=False,
    )
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    run: asyncio.Task[Any] = asyncio.create_task(runner.run())
    try:
        for _ in range(200):
            if (
                len(seen) >= 2
                and stt.connected
                and scrape(metrics).get(("voice_agent_stt_reconnects_total", ()))
            ):
                break
            await asyncio.sleep(0.025)
    finally:
        await worker.cancel()
        await asyncio.wait_for(run, 10)
    samples = scrape(metrics)
    assert len(seen) == 2
    assert samples[("voice_agent_stt_reconnects_total", ())] == 1
    errors_by_kind: dict[str, float] = {}
    for (name, labels), value in samples.items():
        if name == "voice_agent_errors_total":
            kind = dict(labels)["kind"]
            errors_by_kind[kind] = errors_by_kind.get(kind, 0) + value
    assert errors_by_kind == {"VoxtralRealtimeSTTService": 1.0}


@pytest.mark.turn_fallback_expected
async def test_a_turn_left_to_pipecats_fallback_is_counted_as_an_error() -> None:
    """The end-of-turn strategy has a deadline on every path, so Pipecat's fallback is an
    error: counted, and logged (which fails any other test it happens in)."""
    from loguru import logger
    from pipecat.frames.frames import (
        EndFrame,
        TranscriptionFrame,
        VADUserStartedSpeakingFrame,
        VADUserStoppedSpeakingFrame,
    )
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineWorker
    from pipecat.processors.aggregators.llm_context import LLMContext
    from pipecat.processors.aggregators.llm_response_universal import LLMUserAggregatorParams
    from pipecat.turns.user_start import VADUserTurnStartStrategy
    from pipecat.turns.user_stop import ExternalUserTurnStopStrategy
    from pipecat.turns.user_turn_strategies import UserTurnStrategies
    from pipecat.workers.runner import WorkerRunner

    from agent.fastpath.tentative_answer import (
        TURN_FALLBACK_WARNING,
        TentativeAnswerUserAggregator,
    )
    from agent.observability.answer_outcomes import count_turn_outcomes

    never_stops = UserTurnStrategies(
        start=[VADUserTurnStartStrategy()], stop=[ExternalUserTurnStopStrategy()]
    )
    aggregator = TentativeAnswerUserAggregator(
        LLMContext(),
        params=LLMUserAggregatorParams(
            user_turn_strategies=never_stops, user_turn_stop_timeout=0.2
        ),
    )
    worker = PipelineWorker(Pipeline([aggregator]), idle_timeout_secs=None, enable_rtvi=False)
    metrics = AgentMetrics(calls=CallRegistry(max_calls=1))
    count_turn_outcomes(worker, metrics)
    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(str(m)), level="WARNING")
    final = TranscriptionFrame("hello", "caller", "now", finalized=True)
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    try:
        await worker.queue_frames(
            [VADUserStartedSpeakingFrame(), VADUserStoppedSpeakingFrame(stop_secs=0.2), final]
        )
        await asyncio.sleep(0.8)  # past the 0.2 s fallback
        await worker.queue_frame(EndFrame())
        await asyncio.wait_for(running, 10)
    finally:
        logger.remove(sink)
    errors = ("voice_agent_errors_total", (("category", "turn"), ("kind", "turn_fallback")))
    assert scrape(metrics)[errors] == 1
    assert any(TURN_FALLBACK_WARNING in w for w in warnings)


async def test_smart_turn_verdicts_are_counted_for_the_whole_process() -> None:
    """Each verdict of the shared model counts once, whichever call asked (the capacity bench
    reads inferences per call-minute from it)."""
    import numpy as np

    from agent.fastpath.shared_smart_turn import SharedSmartTurnAnalyzer

    metrics = AgentMetrics(process=False)
    before = scrape(metrics)[("voice_agent_smart_turn_inferences_total", ())]
    calls = [SharedSmartTurnAnalyzer() for _ in range(2)]
    for analyzer in calls:
        analyzer.set_sample_rate(8000)
        analyzer.append_audio((np.arange(8000) % 200 * 50).astype(np.int16).tobytes(), True)
    await asyncio.gather(*(analyzer.analyze_end_of_turn() for analyzer in calls))
    assert scrape(metrics)[("voice_agent_smart_turn_inferences_total", ())] == before + 2
