"""The call's idle timeout as one timer: Pipecat's idle watch, the same frames, the same end."""

from __future__ import annotations

import asyncio
import inspect

import pytest
from pipecat.frames.frames import EndFrame, StartFrame, TranscriptionFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import IDLE_TIMEOUT_SECS, PipelineWorker
from pipecat.workers.runner import WorkerRunner

from agent.fastpath.idle_watch import IDLE_FRAMES, IdleCallWatch
from agent.fastpath.inline_observers import observe_inline
from tests.agent.fastpath.workers import Echo

pytestmark = pytest.mark.timeout(30)


def test_the_same_frames_count_as_life_as_in_pipecats_idle_watch() -> None:
    defaults = inspect.signature(PipelineWorker.__init__).parameters
    assert set(IDLE_FRAMES) == {StartFrame, *defaults["idle_timeout_frames"].default}
    assert defaults["idle_timeout_secs"].default == IDLE_TIMEOUT_SECS


async def test_an_idle_call_is_cancelled_and_a_lively_one_is_not() -> None:
    idle_worker = PipelineWorker(Pipeline([Echo()]), idle_timeout_secs=None, enable_rtvi=False)
    told: list[str] = []
    watch = IdleCallWatch(idle_worker, timeout_s=0.3, on_timeout=lambda: told.append("idle"))
    observe_inline(idle_worker, [watch])
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(idle_worker)
    await asyncio.wait_for(runner.run(), 10)  # ends on its own: nothing happened
    assert watch.timed_out and told == ["idle"]  # the call record's end reason

    busy_worker = PipelineWorker(Pipeline([Echo()]), idle_timeout_secs=None, enable_rtvi=False)
    busy_watch = IdleCallWatch(busy_worker, timeout_s=0.3)
    observe_inline(busy_worker, [busy_watch])

    async def talk() -> None:
        for _ in range(8):  # transcripts keep the call alive past several timeouts
            await busy_worker.queue_frame(TranscriptionFrame("hi", "user", "now"))
            await asyncio.sleep(0.1)
        await busy_worker.queue_frame(EndFrame())

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(busy_worker)
    await asyncio.wait_for(asyncio.gather(runner.run(), talk()), 10)
    assert not busy_watch.timed_out


def test_idle_watch_needs_a_positive_timeout() -> None:
    worker = PipelineWorker(Pipeline([Echo()]), idle_timeout_secs=None, enable_rtvi=False)
    with pytest.raises(ValueError, match="timeout_s"):
        IdleCallWatch(worker, timeout_s=0)
