"""An answered turn's latency reaches an RTVI client as a ``server-message``, with the very
figures of the ``turn_latency`` log line; a turn nobody answered sends nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pipecat.frames.frames import (
    EndFrame,
    Frame,
    OutputTransportMessageUrgentFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline as PipecatPipeline
from pipecat.pipeline.worker import PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner

from agent.observability.client_latency import TurnLatencyToClient, turn_latency_message
from agent.observability.metrics import STAGES
from agent.observability.turn_latency import TurnLatencyObserver, TurnTimings
from tests.agent.observability.synthetic import Pipeline, answered_turn, feed

pytestmark = pytest.mark.timeout(30)


class Wire(FrameProcessor):
    """The end of the pipeline, where a transport would send client messages."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[dict[str, Any]] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, OutputTransportMessageUrgentFrame):
            self.messages.append(frame.message)
        await self.push_frame(frame, direction)


async def test_only_answered_turns_are_handed_on_with_the_logged_figures(
    turn_log: list[dict[str, Any]],
) -> None:
    answered: list[TurnTimings] = []

    async def on_answer(turn: TurnTimings) -> None:
        answered.append(turn)

    observer = TurnLatencyObserver(call_id="call-1", on_answer=on_answer)
    p = Pipeline()
    unanswered = [
        p.push(p.vad, VADUserStartedSpeakingFrame(start_secs=0.2), 0),
        p.push(p.vad, VADUserStoppedSpeakingFrame(stop_secs=0.2), 800),
    ]
    await feed(observer, unanswered + answered_turn(p, 5000))

    assert [turn.index for turn in answered] == [2]
    assert [line["complete"] for line in turn_log] == [False, True]
    message = turn_latency_message(answered[0])
    assert message == {
        "type": "turn-latency",
        "turn": 2,
        "total_ms": 520,
        "stages_ms": {stage: turn_log[1][f"{stage}_ms"] for stage in STAGES},
    }


async def test_the_turn_goes_to_the_client_as_an_rtvi_server_message() -> None:
    wire = Wire()
    worker = PipelineWorker(PipecatPipeline([wire]), idle_timeout_secs=None, enable_rtvi=True)
    observer = TurnLatencyObserver(call_id="call-1", on_answer=TurnLatencyToClient(worker))
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    try:
        await feed(observer, answered_turn(Pipeline(), 0))
        for _ in range(200):
            if any(m.get("type") == "server-message" for m in wire.messages):
                break
            await asyncio.sleep(0.01)
    finally:
        await worker.queue_frame(EndFrame())
        await asyncio.wait_for(running, 10)
    sent = [m for m in wire.messages if m.get("type") == "server-message"]
    assert sent == [
        {
            "label": "rtvi-ai",
            "type": "server-message",
            "data": {
                "type": "turn-latency",
                "turn": 1,
                "total_ms": 520,
                "stages_ms": {
                    "vad_stop": 200,
                    "stt_final": 300,
                    "llm_first_token": 350,
                    "tts_first_audio": 500,
                    "first_audio_out": 520,
                },
            },
        }
    ]
