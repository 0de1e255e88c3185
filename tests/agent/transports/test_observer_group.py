"""The call's observers: grouped (:class:`ObserverGroup`), called inline by the worker
(:func:`observe_inline`), and Pipecat's idle timeout as one timer (:class:`IdleCallWatch`)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pipecat.frames.frames import (
    EndFrame,
    Frame,
    TextFrame,
    TranscriptionFrame,
)
from pipecat.observers.base_observer import BaseObserver, FrameProcessed, FramePushed
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.utils.asyncio.task_manager import TaskManager
from pipecat.workers.runner import WorkerRunner

from agent.transports import IdleCallWatch, InlineWorkerObserver, ObserverGroup, observe_inline

pytestmark = pytest.mark.timeout(30)


class Recorder(BaseObserver):
    """Records every push it is handed (and processed frames, if asked to)."""

    def __init__(self, *, every_push: bool = True) -> None:
        super().__init__(observe_every_push=every_push)
        self.pushes: list[FramePushed] = []
        self.set_up = self.cleaned_up = self.started = False

    async def setup(self, task_manager: Any) -> None:
        await super().setup(task_manager)
        self.set_up = True

    async def cleanup(self) -> None:
        await super().cleanup()
        self.cleaned_up = True

    async def on_push_frame(self, data: FramePushed) -> None:
        self.pushes.append(data)

    async def on_pipeline_started(self) -> None:
        self.started = True


class ProcessRecorder(Recorder):
    def __init__(self) -> None:
        super().__init__()
        self.processed: list[FrameProcessed] = []

    async def on_process_frame(self, data: FrameProcessed) -> None:
        self.processed.append(data)


def pushed(frame: Frame, *, first: bool) -> FramePushed:
    data = FramePushed(
        source=FrameProcessor(),
        destination=FrameProcessor(),
        frame=frame,
        direction=FrameDirection.DOWNSTREAM,
        timestamp=0,
    )
    data.first_push = first
    return data


async def test_a_first_push_only_member_sees_only_first_pushes() -> None:
    every, first_only = Recorder(every_push=True), Recorder(every_push=False)
    group = ObserverGroup([every, first_only])
    assert group.observe_every_push  # some member wants them all, so Pipecat must send them
    frame = TextFrame("hi")
    await group.on_push_frame(pushed(frame, first=True))
    await group.on_push_frame(pushed(frame, first=False))
    assert [d.first_push for d in every.pushes] == [True, False]
    assert [d.first_push for d in first_only.pushes] == [True]
    assert not ObserverGroup([Recorder(every_push=False)]).observe_every_push


async def test_processed_frames_reach_only_members_that_handle_them() -> None:
    handles, ignores = ProcessRecorder(), Recorder()  # Recorder keeps the base no-op

    async def never(_data: FrameProcessed) -> None:
        raise AssertionError("called for a processed frame it never asked for")

    ignores.on_process_frame = never  # type: ignore[method-assign,assignment]
    group = ObserverGroup([ignores, handles])
    data = FrameProcessed(
        processor=FrameProcessor(),
        frame=TextFrame("x"),
        direction=FrameDirection.DOWNSTREAM,
        timestamp=0,
    )
    await group.on_process_frame(data)
    assert handles.processed == [data]


async def test_setup_cleanup_and_start_reach_every_member() -> None:
    members: list[Recorder] = [Recorder(), ProcessRecorder(), Recorder(every_push=False)]
    group = ObserverGroup(list[BaseObserver](members))
    await group.setup(TaskManager())
    await group.on_pipeline_started()
    await group.cleanup()
    assert all(m.set_up and m.started and m.cleaned_up for m in members)


class Echo(FrameProcessor):
    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)


async def run_worker(worker: PipelineWorker, *frames: Frame) -> None:
    await worker.queue_frames([*frames, EndFrame()])
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await asyncio.wait_for(runner.run(), 20)


async def test_a_worker_calls_inline_observers_with_every_frame_and_first_push_marks() -> None:
    every, first_only, processes = Recorder(), Recorder(every_push=False), ProcessRecorder()
    worker = PipelineWorker(Pipeline([Echo(), Echo()]), idle_timeout_secs=None, enable_rtvi=False)
    observe_inline(worker, [every, first_only, processes])
    assert isinstance(worker._observer, InlineWorkerObserver)
    text = TextFrame("hello")
    await run_worker(worker, text)

    assert all(m.set_up and m.started and m.cleaned_up for m in (every, first_only, processes))
    pushes_of_text = [d for d in every.pushes if d.frame is text]
    assert len(pushes_of_text) >= 2  # through both processors (and the pipeline's ends)
    assert [d.first_push for d in pushes_of_text].count(True) == 1
    assert [d.frame for d in first_only.pushes].count(text) == 1
    assert any(d.frame is text for d in processes.processed)


async def test_observe_inline_refuses_a_worker_that_already_runs_its_observers() -> None:
    worker = PipelineWorker(Pipeline([Echo()]), idle_timeout_secs=None, enable_rtvi=False)
    observe_inline(worker, [])
    with pytest.raises(RuntimeError, match="observers"):
        observe_inline(worker, [])  # no plain WorkerObserver left to replace


async def test_an_idle_call_is_cancelled_and_a_lively_one_is_not() -> None:
    idle_worker = PipelineWorker(Pipeline([Echo()]), idle_timeout_secs=None, enable_rtvi=False)
    watch = IdleCallWatch(idle_worker, timeout_s=0.3)
    observe_inline(idle_worker, [watch])
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(idle_worker)
    await asyncio.wait_for(runner.run(), 10)  # ends on its own: nothing happened
    assert watch.timed_out

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


async def test_the_voice_agent_worker_observes_inline_with_an_idle_watch() -> None:
    from pipecat.transports.websocket.fastapi import FastAPIWebsocketParams

    from agent.config import load_settings
    from agent.transports.telephony import MediaStreamTransport
    from pipelines.voice_agent import build_voice_agent_task

    transport = MediaStreamTransport(
        websocket=_NoSocket(),  # type: ignore[arg-type]
        params=FastAPIWebsocketParams(audio_in_enabled=True, audio_out_enabled=True),
    )
    extra = Recorder(every_push=False)
    worker = build_voice_agent_task(
        transport, load_settings("default"), call_id="c1", observers=[extra]
    )
    observer = worker._observer
    assert isinstance(observer, InlineWorkerObserver)
    members = observer._inline._observers
    assert extra in members and any(isinstance(m, IdleCallWatch) for m in members)
    assert not observer._observers  # no Pipecat-proxied observer (idle, RTVI) on a phone call


class _NoSocket:
    """Enough of a WebSocket to build (not run) a transport."""

    client_state = application_state = None
