"""The smallest real pipelines, for the fast-path tests: a processor that passes frames on,
and a worker run to its end."""

from __future__ import annotations

import asyncio

from pipecat.frames.frames import EndFrame, Frame
from pipecat.pipeline.worker import PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner


class Echo(FrameProcessor):
    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)


async def run_worker(worker: PipelineWorker, *frames: Frame) -> None:
    """Queue ``frames`` and an ``EndFrame``, and run the worker until it ends."""
    await worker.queue_frames([*frames, EndFrame()])
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await asyncio.wait_for(runner.run(), 20)
